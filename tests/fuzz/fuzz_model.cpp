// libFuzzer target: a whole model file to read_split_format, read_model_config and Model::load.
// The harness (and what it asserts) is in harness_model.h; tests/fuzz/fuzz_regression_test.cpp runs the same
// function over the seeds and every input that once failed.
#include "harness_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_model(data, size); }
