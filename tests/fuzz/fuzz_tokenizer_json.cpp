// libFuzzer target: a tokenizer.json (and, after a 0 byte, a tokenizer_config.json) to Tokenizer::from_hf_json.
// The harness (and what it asserts) is in harness_tokenizer.h; tests/fuzz/fuzz_regression_test.cpp runs the same
// function over the seeds and every input that once failed.
#include "harness_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_tokenizer_json(data, size); }
