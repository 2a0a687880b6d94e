// libFuzzer target: split GGUF sets (two parts) opened through open_weights.
// The harness (and what it asserts) is in harness_split_set.h; tests/fuzz/fuzz_regression_test.cpp runs the same
// function over the seeds and every input that once failed.
#include "harness_split_set.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_split_set(data, size); }
