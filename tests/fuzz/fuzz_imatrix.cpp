// libFuzzer target: a whole importance-matrix file to read_imatrix (through a memfd path).
// The harness (and what it asserts) is in harness_imatrix.h; tests/fuzz/fuzz_regression_test.cpp runs the same
// function over the seeds and every input that once failed.
#include "harness_imatrix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_imatrix(data, size); }
