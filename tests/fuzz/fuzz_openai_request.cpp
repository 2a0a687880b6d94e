// libFuzzer target: OpenAI request bodies and stop strings of bitsplit serve.
// The harness (and what it asserts) is in harness_openai_request.h; tests/fuzz/fuzz_regression_test.cpp runs the same
// function over the seeds and every input that once failed.
#include "harness_openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_openai_request(data, size); }
