// libFuzzer target: option strings and values to parse_byte_size, parse_budget, DraftPolicy and SamplingParams::validate.
// The harness (and what it asserts) is in harness_options.h; tests/fuzz/fuzz_regression_test.cpp runs the same
// function over the seeds and every input that once failed.
#include "harness_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_options(data, size); }
