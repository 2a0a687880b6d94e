// libFuzzer target: chat templates (Jinja source) parsed and rendered.
// The harness (and what it asserts) is in harness_chat_template.h; tests/fuzz/fuzz_regression_test.cpp runs the same
// function over the seeds and every input that once failed.
#include "harness_chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_chat_template(data, size); }
