// What the C API's tests share: the bible fixtures (bible-base converted once per process), a
// loaded model freed on scope exit, tokenizing, and a generation collected into tokens and text.
#pragma once

#include <tbb/global_control.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bitsplit/bitsplit.h"
#include "bitsplit/convert.h"
#include "test_paths.h"

namespace bitsplit::capi_testing {

inline std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/models/" + name; }

#if defined(__SANITIZE_THREAD__)
// ThreadSanitizer cannot see oneTBB's own synchronisation (libtbb is not instrumented), so under
// TSan oneTBB runs on the calling thread only: what is checked is the engine's threading (two
// sessions, one model, its registry and locks), not the kernels' work split.
inline const tbb::global_control serial_tbb(tbb::global_control::max_allowed_parallelism, 1);
#endif

// bible-base converted once per process (the engine's main path: a bit-split model).
inline const std::string& converted_base() {
  static const std::string path = [] {
    static testing::TempDir dir("capi");
    auto src = open_weights(fixture("bible-base.gguf"));
    BITSPLIT_CHECK(src.is_ok(), src.status().message());
    const std::string out = dir.file("base.bitsplit.gguf");
    BITSPLIT_CHECK(convert_model(**src, out, {}, nullptr, nullptr).is_ok());
    return out;
  }();
  return path;
}

struct Loaded {
  bitsplit_model* model = nullptr;
  ~Loaded() { bitsplit_model_free(model); }
};

inline std::vector<bitsplit_token> tokenize(bitsplit_model* m, const std::string& text) {
  std::vector<bitsplit_token> t(512);
  size_t n = 0;
  EXPECT_EQ(bitsplit_tokenize(m, text.data(), text.size(), 1, 0, t.data(), t.size(), &n), BITSPLIT_OK);
  t.resize(n);
  return t;
}

// Session parameters with the library's defaults but greedy decoding (temperature 0).
inline bitsplit_session_params greedy_params() {
  bitsplit_session_params p;
  bitsplit_session_params_init(&p);
  p.temperature = 0;
  return p;
}

struct Collected {
  std::vector<bitsplit_token> tokens;
  std::string text;
  int stop_after = -1;
};

inline int collect(void* user, bitsplit_token token, const char* text, size_t length) {
  auto* c = static_cast<Collected*>(user);
  if (token >= 0) c->tokens.push_back(token);
  c->text.append(text, length);
  return c->stop_after >= 0 && int(c->tokens.size()) >= c->stop_after;
}

inline Collected generate(bitsplit_model* m, const bitsplit_session_params* params, const std::string& prompt, int n,
                   bitsplit_status* status = nullptr) {
  bitsplit_session* s = nullptr;
  EXPECT_EQ(bitsplit_session_create(m, params, &s), BITSPLIT_OK) << bitsplit_last_error();
  Collected c;
  const auto ids = tokenize(m, prompt);
  const bitsplit_status st = bitsplit_session_generate(s, ids.data(), ids.size(), n, collect, &c, nullptr);
  if (status) *status = st;
  else EXPECT_EQ(st, BITSPLIT_OK) << bitsplit_last_error();
  bitsplit_session_free(s);
  return c;
}

}  // namespace bitsplit::capi_testing
