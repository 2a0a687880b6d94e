// libFuzzer target: a GGUF file's tokenizer.ggml.* metadata to Tokenizer::from_metadata.
// The harness (and what it asserts) is in harness_tokenizer.h; tests/fuzz/fuzz_regression_test.cpp runs the same
// function over the seeds and every input that once failed.
#include "harness_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_tokenizer_metadata(data, size); }
