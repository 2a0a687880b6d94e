// libFuzzer target: one safetensors shard parsed in memory.
// The harness (and what it asserts) is in harness_safetensors.h; tests/fuzz/fuzz_regression_test.cpp runs the same
// function over the seeds and every input that once failed.
#include "harness_safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_safetensors(data, size); }
