// libFuzzer target: a whole GGUF file to gguf::File::parse (metadata, tensor table, tensor bytes).
// The harness (and what it asserts) is in harness_gguf.h; tests/fuzz/fuzz_regression_test.cpp runs the same
// function over the seeds and every input that once failed.
#include "harness_gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_gguf(data, size); }
