// libFuzzer target: whole HTTP requests (head and body) against an in-process server of the HTTP
// layer of bitsplit serve. The harness (and what it asserts) is in harness_http_request.h;
// tests/fuzz/fuzz_regression_test.cpp runs the same function over the seeds and every input that
// once failed.
#include "harness_http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return bitsplit::fuzz::run_http_request(data, size); }
