// libFuzzer target: a whole delta file to open_delta (through a memfd path) and apply_delta_f32.
// The harness (and what it asserts) is in harness_delta.h; tests/fuzz/fuzz_regression_test.cpp runs the same
// function over the seeds and every input that once failed.
#include "harness_delta.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_delta(data, size); }
