// libFuzzer target: a whole LoRA adapter file to open_lora (through a memfd path) and
// read_lora_factors. The harness (and what it asserts) is in harness_lora.h;
// tests/fuzz/fuzz_regression_test.cpp runs the same function over the seeds and every input that
// once failed.
#include "harness_lora.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_lora(data, size); }
