// The C API as an application meets it: bad arguments give a status and a message, never a
// crash; sessions on one model from two threads give the same text as one after the other;
// abort stops a generation; the step-by-step API decodes what generate decodes.
#include "bitsplit/bitsplit.h"

#include <gtest/gtest.h>

#include <cmath>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tbb/global_control.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "bitsplit/convert.h"
#include "bitsplit/delta_format.h"
#include "bitsplit/version.h"
#include "capi_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

using namespace capi_testing;


TEST(CApi, VersionAndStatusNames) {
  EXPECT_EQ(bitsplit_api_version(), uint32_t(BITSPLIT_API_VERSION));
  EXPECT_STREQ(bitsplit_status_name(BITSPLIT_ERR_CONTEXT_OVERFLOW), "context overflow");
  EXPECT_STREQ(bitsplit_version_string(), BITSPLIT_VERSION_STRING);  // CMake's project version
}

TEST(CApi, BadArgumentsAreStatusesWithMessages) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  bitsplit_model* m = nullptr;
  EXPECT_EQ(bitsplit_model_load(nullptr, nullptr, &m), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitsplit_last_error()).find("NULL"), std::string::npos);
  EXPECT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, nullptr), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bitsplit_model_load("/nonexistent/model.gguf", nullptr, &m), BITSPLIT_ERR_LOAD);
  EXPECT_NE(std::string(bitsplit_last_error()).find("/nonexistent/model.gguf"), std::string::npos);
  EXPECT_EQ(m, nullptr) << "outputs are written only on success";
  // A file that is not a model.
  EXPECT_EQ(bitsplit_model_load(fixture("bible-2k.model").c_str(), nullptr, &m), BITSPLIT_ERR_LOAD);
  bitsplit_model_params mp;
  bitsplit_model_params_init(&mp);
  EXPECT_EQ(mp.target_activations, BITSPLIT_TARGET_ACTIVATIONS_DRAFT_REMAINDER);
  mp.target_activations = 3;
  EXPECT_EQ(bitsplit_model_load(converted_base().c_str(), &mp, &m), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitsplit_last_error()).find("target_activations"), std::string::npos);
  EXPECT_EQ(m, nullptr);

  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK) << bitsplit_last_error();
  EXPECT_EQ(bitsplit_model_is_bitsplit(l.model), 1);
  EXPECT_EQ(bitsplit_model_n_vocab(l.model), 2048);
  EXPECT_STREQ(bitsplit_model_meta_string(l.model, "general.architecture"), "llama");
  EXPECT_EQ(bitsplit_model_meta_string(l.model, "no.such.key"), nullptr);
  EXPECT_EQ(bitsplit_model_add_variant(l.model, "x", "/nonexistent.delta.gguf"), BITSPLIT_ERR_LOAD);
  EXPECT_EQ(bitsplit_model_add_variant(l.model, nullptr, "x"), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bitsplit_model_remove_variant(l.model, "never-added"), BITSPLIT_ERR_NOT_FOUND);

  bitsplit_session_params p;
  bitsplit_session_params_init(&p);
  bitsplit_session* s = nullptr;
  p.variant = "unknown";
  EXPECT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_ERR_NOT_FOUND);
  EXPECT_NE(std::string(bitsplit_last_error()).find("unknown"), std::string::npos);
  bitsplit_session_params_init(&p);
  p.top_p = 2.0f;
  EXPECT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitsplit_last_error()).find("top-p"), std::string::npos);
  bitsplit_session_params_init(&p);
  p.budget = 65;
  EXPECT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  for (int32_t lookup : {-2, 65}) {
    bitsplit_session_params_init(&p);
    p.lookup = lookup;
    EXPECT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_ERR_INVALID_ARGUMENT) << lookup;
    EXPECT_NE(std::string(bitsplit_last_error()).find("lookup"), std::string::npos);
    EXPECT_EQ(s, nullptr);
  }

  ASSERT_EQ(bitsplit_session_create(l.model, nullptr, &s), BITSPLIT_OK);
  const auto ids = tokenize(l.model, "In the beginning");
  EXPECT_EQ(bitsplit_session_generate(s, nullptr, 3, 4, nullptr, nullptr, nullptr), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bitsplit_session_generate(s, ids.data(), 0, 4, nullptr, nullptr, nullptr), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bitsplit_session_generate(s, ids.data(), ids.size(), 100000, nullptr, nullptr, nullptr),
            BITSPLIT_ERR_CONTEXT_OVERFLOW);
  EXPECT_NE(std::string(bitsplit_last_error()).find("context length"), std::string::npos);
  const bitsplit_token bad = 99999;
  EXPECT_EQ(bitsplit_session_generate(s, &bad, 1, 4, nullptr, nullptr, nullptr), BITSPLIT_ERR_INVALID_ARGUMENT);
  const float* logits = nullptr;
  EXPECT_EQ(bitsplit_session_logits(s, &logits, nullptr), BITSPLIT_ERR_INVALID_ARGUMENT) << "nothing fed yet";
  bitsplit_token t = 0;
  EXPECT_EQ(bitsplit_session_sample(s, &t), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bitsplit_session_feed(s, &bad, 1), BITSPLIT_ERR_INVALID_ARGUMENT);
  size_t n = 0;
  EXPECT_EQ(bitsplit_tokenize(l.model, "In the beginning God", 20, 1, 0, &t, 1, &n), BITSPLIT_ERR_BUFFER_TOO_SMALL);
  EXPECT_GT(n, 1u) << "the size needed";
  char small[2];
  size_t len = 0;
  EXPECT_EQ(bitsplit_detokenize(l.model, ids.data(), ids.size(), small, sizeof small, &len), BITSPLIT_ERR_BUFFER_TOO_SMALL);
  EXPECT_GT(len, sizeof small);
  bitsplit_session_free(s);
  bitsplit_session_free(nullptr);
  bitsplit_model_free(nullptr);
}

TEST(CApi, LoadProgressCanCancel) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  bitsplit_model_params p;
  bitsplit_model_params_init(&p);
  int calls = 0;
  p.progress = [](void* user, int64_t done, int64_t total) {
    ++*static_cast<int*>(user);
    return done * 2 >= total ? 1 : 0;  // stop half-way
  };
  p.progress_user_data = &calls;
  bitsplit_model* m = nullptr;
  EXPECT_EQ(bitsplit_model_load(converted_base().c_str(), &p, &m), BITSPLIT_ERR_CANCELLED);
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(calls, 3) << "6 layers, stopped after the third";
  EXPECT_NE(std::string(bitsplit_last_error()).find("cancelled"), std::string::npos);
}

TEST(CApi, SpeculativeAndPlainAndStepByStepAgree) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK) << bitsplit_last_error();
  bitsplit_session_params p = greedy_params();
  const std::string prompt = "And it came to pass";
  const Collected spec = generate(l.model, &p, prompt, 40);
  ASSERT_EQ(spec.tokens.size(), 40u);
  p.speculative = 0;
  const Collected plain = generate(l.model, &p, prompt, 40);
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_EQ(spec.text, plain.text);
  // Context lookup off, or longer than the default, and with a fixed budget: the same text.
  p.speculative = 1;
  for (int32_t lookup : {0, 16}) {
    p.lookup = lookup;
    EXPECT_EQ(generate(l.model, &p, prompt, 40).tokens, plain.tokens) << "lookup " << lookup;
  }
  p.budget = 4;
  p.lookup = 8;
  EXPECT_EQ(generate(l.model, &p, prompt, 40).tokens, plain.tokens) << "budget 4 + lookup 8";
  p.budget = 0;
  p.lookup = -1;
  p.speculative = 0;

  bitsplit_session* s = nullptr;
  ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK);
  auto ids = tokenize(l.model, prompt);
  ASSERT_EQ(bitsplit_session_feed(s, ids.data(), ids.size()), BITSPLIT_OK) << bitsplit_last_error();
  std::vector<bitsplit_token> stepped;
  for (int i = 0; i < 40; ++i) {
    bitsplit_token t = -1;
    ASSERT_EQ(bitsplit_session_sample(s, &t), BITSPLIT_OK);
    stepped.push_back(t);
    ASSERT_EQ(bitsplit_session_feed(s, &t, 1), BITSPLIT_OK);
  }
  EXPECT_EQ(stepped, spec.tokens);
  EXPECT_EQ(bitsplit_session_n_past(s), int32_t(ids.size() + 40));
  std::string text(spec.text.size() + 64, '\0');
  size_t len = 0;
  ASSERT_EQ(bitsplit_detokenize(l.model, stepped.data(), stepped.size(), text.data(), text.size(), &len), BITSPLIT_OK);
  text.resize(len);
  EXPECT_EQ(text, spec.text);
  bitsplit_session_reset(s);
  EXPECT_EQ(bitsplit_session_n_past(s), 0);
  bitsplit_session_free(s);
}

// A session continues from the last generation's KV cache (a chat's second turn): the second
// call runs only the new part of the prompt and gives the text a fresh session gives; with
// reuse_prefix 0, or after bitsplit_session_reset, nothing is reused.
// A caller built against the header before reuse_prefix passes size 72 (its last field ended at
// 68, padded to 8): the new field must lie past that, so such a caller gets the default.
static_assert(offsetof(bitsplit_session_params, reuse_prefix) >= 72, "reuse_prefix inside the older struct's size");
static_assert(offsetof(bitsplit_generation_stats, reused_tokens) >= 80, "reused_tokens inside the older struct's size");

TEST(CApi, ASessionReusesItsLastPromptAndOutput) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK) << bitsplit_last_error();
  for (int32_t speculative : {1, 0}) {
    bitsplit_session_params p;
    bitsplit_session_params_init(&p);
    EXPECT_EQ(p.reuse_prefix, 1);
    p.temperature = 0;
    p.speculative = speculative;
    bitsplit_session* s = nullptr;
    ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK);
    const auto first = tokenize(l.model, "And it came to pass");
    Collected one;
    bitsplit_generation_stats st{};
    st.size = sizeof(st);
    ASSERT_EQ(bitsplit_session_generate(s, first.data(), first.size(), 20, collect, &one, &st), BITSPLIT_OK);
    EXPECT_EQ(st.reused_tokens, 0);
    std::vector<bitsplit_token> second = first;
    second.insert(second.end(), one.tokens.begin(), one.tokens.end());
    const auto more = tokenize(l.model, " and the LORD said");
    second.insert(second.end(), more.begin() + 1, more.end());  // (without its BOS)
    Collected two;
    ASSERT_EQ(bitsplit_session_generate(s, second.data(), second.size(), 20, collect, &two, &st), BITSPLIT_OK);
    EXPECT_GE(st.reused_tokens, int64_t(first.size() + one.tokens.size() - 1)) << "speculative " << speculative;
    EXPECT_EQ(st.prompt_tokens, int64_t(second.size()));
    // A fresh session, and one with reuse off, give the same tokens and reuse nothing.
    for (int32_t reuse : {1, 0}) {
      p.reuse_prefix = reuse;
      bitsplit_session* f = nullptr;
      ASSERT_EQ(bitsplit_session_create(l.model, &p, &f), BITSPLIT_OK);
      Collected fresh;
      ASSERT_EQ(bitsplit_session_generate(f, second.data(), second.size(), 20, collect, &fresh, &st), BITSPLIT_OK);
      EXPECT_EQ(fresh.tokens, two.tokens) << "reuse " << reuse;
      EXPECT_EQ(st.reused_tokens, 0);
      if (reuse == 0) {  // and again: still nothing kept
        Collected again;
        ASSERT_EQ(bitsplit_session_generate(f, second.data(), second.size(), 20, collect, &again, &st), BITSPLIT_OK);
        EXPECT_EQ(st.reused_tokens, 0);
      }
      bitsplit_session_free(f);
    }
    bitsplit_session_reset(s);
    Collected after_reset;
    ASSERT_EQ(bitsplit_session_generate(s, second.data(), second.size(), 20, collect, &after_reset, &st), BITSPLIT_OK);
    EXPECT_EQ(st.reused_tokens, 0);
    EXPECT_EQ(after_reset.tokens, two.tokens);
    bitsplit_session_free(s);
  }
}

TEST(CApi, CallbackStopsAndAbortStopsWithinACheck) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK);
  bitsplit_session_params p = greedy_params();
  p.budget = 8;
  bitsplit_session* s = nullptr;
  ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK);
  const auto ids = tokenize(l.model, "The LORD");
  Collected c;
  c.stop_after = 5;
  bitsplit_generation_stats st{sizeof st};
  ASSERT_EQ(bitsplit_session_generate(s, ids.data(), ids.size(), 100, collect, &c, &st), BITSPLIT_OK);
  EXPECT_EQ(c.tokens.size(), 5u);
  EXPECT_EQ(st.generated_tokens, 5);
  EXPECT_EQ(st.speculative, 1);

  // Abort from another thread while the generation runs: it stops within one check (at most
  // the budget + 1 tokens after the abort was seen) and says so.
  struct Abort {
    bitsplit_session* s;
    std::atomic<int> seen{0};
  } a{s};
  auto on_token = [](void* user, bitsplit_token, const char*, size_t) {
    auto* a = static_cast<Abort*>(user);
    if (++a->seen == 3) {
      std::thread([s = a->s] { bitsplit_session_abort(s); }).join();
    }
    return 0;
  };
  const bitsplit_status r = bitsplit_session_generate(s, ids.data(), ids.size(), 200, on_token, &a, &st);
  EXPECT_EQ(r, BITSPLIT_ERR_ABORTED) << bitsplit_last_error();
  EXPECT_GE(a.seen.load(), 3);
  EXPECT_LE(a.seen.load(), 3 + p.budget + 1);
  EXPECT_EQ(st.generated_tokens, a.seen.load());
  // The next generation runs normally.
  Collected again;
  EXPECT_EQ(bitsplit_session_generate(s, ids.data(), ids.size(), 4, collect, &again, nullptr), BITSPLIT_OK);
  EXPECT_EQ(again.tokens.size(), 4u);
  bitsplit_session_free(s);
}

// An abort reaches a generation still in its prompt (the prompt polls it between chunks). With
// this model's context of 256 the prompt is one chunk, so which pass sees the abort depends on
// timing; whichever it is, the generation says BITSPLIT_ERR_ABORTED and neither generates a
// token nor hands one to the callback (Session.AStopRequestEndsThePromptBetweenChunks checks the
// chunks themselves, deterministically). The abort is repeated until the call returns, as the
// call clears the flag when it starts.
TEST(CApi, AnAbortDuringThePromptGeneratesNothing) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK);
  for (int32_t speculative : {1, 0}) {
    bitsplit_session_params p;
    bitsplit_session_params_init(&p);
    p.speculative = speculative;
    bitsplit_session* s = nullptr;
    ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK);
    const auto ids = tokenize(l.model, "And it came to pass, when the king of Israel was passing by upon the wall, "
                                       "there cried a woman unto him, saying, Help, my lord, O king.");
    std::atomic<bool> returned{false};
    std::thread aborter([&] {
      while (!returned.load()) {
        bitsplit_session_abort(s);
        std::this_thread::yield();
      }
    });
    Collected c;
    bitsplit_generation_stats st{sizeof st};
    const bitsplit_status r = bitsplit_session_generate(s, ids.data(), ids.size(), 256 - int32_t(ids.size()), collect, &c, &st);
    returned = true;
    aborter.join();
    EXPECT_EQ(r, BITSPLIT_ERR_ABORTED) << bitsplit_last_error();
    EXPECT_TRUE(c.tokens.empty());
    EXPECT_TRUE(c.text.empty());
    EXPECT_EQ(st.generated_tokens, 0);
    EXPECT_LE(st.prompt_tokens, int64_t(ids.size()));
    bitsplit_session_free(s);
  }
}

// A FIFO given as the model is refused at once with what it is (opening it for reading would
// wait for a writer forever). The load runs on another thread so that a hang fails the test
// instead of hanging it: after the wait a writer opens the FIFO and closes it again, which lets a
// blocked open return.
TEST(CApi, AFifoAsTheModelIsRefusedAtOnce) {
  testing::TempDir dir("capi-fifo");
  const std::string fifo = dir.file("model.gguf");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  struct Outcome {
    bitsplit_status status = BITSPLIT_OK;
    std::string message;
    bitsplit_model* model = nullptr;
  };
  auto load = std::async(std::launch::async, [&] {
    Outcome o;
    o.status = bitsplit_model_load(fifo.c_str(), nullptr, &o.model);
    o.message = bitsplit_last_error();  // (the loading thread's)
    return o;
  });
  const bool in_time = load.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!in_time) {
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) ::close(writer);
  }
  const Outcome o = load.get();
  bitsplit_model_free(o.model);
  EXPECT_TRUE(in_time) << "loading a FIFO blocked";
  EXPECT_EQ(o.status, BITSPLIT_ERR_LOAD);
  EXPECT_NE(o.message.find(fifo + ": is a FIFO, not a regular file"), std::string::npos) << o.message;
}

// The sampling parameters are checked as every front end checks them (SamplingParams::validate):
// a negative temperature, which the server refuses, is refused here too.
TEST(CApi, NegativeTemperatureIsRefused) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK);
  bitsplit_session_params p;
  bitsplit_session_params_init(&p);
  p.temperature = -1.0f;
  bitsplit_session* s = nullptr;
  EXPECT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitsplit_last_error()).find("temperature must be a finite number >= 0"), std::string::npos)
      << bitsplit_last_error();
  EXPECT_EQ(s, nullptr);
}

// Every versioned struct's `size` follows one rule (bitsplit.h, Conventions): a size below the
// first version's, or one ending inside a field, is refused with a message naming the struct and
// the size, and nothing is read or written; the first version's size, sizeof and more (a newer
// caller's struct) are taken, whole fields only. (Size 9 with a variant once copied one byte of
// the pointer and crashed; sizes 0 to 8 ignored every field; the statistics took 0 as "all".)
template <typename T>
struct Oversized {  // a newer caller's struct: 8 more bytes
  T s;
  uint64_t newer;
};
// Sizes every struct refuses: 0, 1, 8 (size alone), 9 (a byte into the next field), sizeof - 1.
template <typename T>
std::vector<size_t> refused_sizes() { return {0, 1, 8, 9, sizeof(T) - 1}; }
template <typename T>
std::vector<size_t> taken_sizes(size_t first_version) { return {first_version, sizeof(T), sizeof(T) + 8}; }

TEST(CApi, StructSizesFollowOneRule) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK);
  auto refused_naming = [](const std::string& name, size_t size) {
    return std::string(bitsplit_last_error()).find(name + ".size is " + std::to_string(size) + ":") != std::string::npos;
  };

  // Session parameters: an unknown variant shows they were read (NOT_FOUND).
  for (size_t size : refused_sizes<bitsplit_session_params>()) {
    Oversized<bitsplit_session_params> b{};
    bitsplit_session_params_init(&b.s);
    b.s.variant = "unknown";
    b.s.budget = 65;
    b.s.size = size;
    bitsplit_session* s = nullptr;
    EXPECT_EQ(bitsplit_session_create(l.model, &b.s, &s), BITSPLIT_ERR_INVALID_ARGUMENT) << size;
    EXPECT_TRUE(refused_naming("bitsplit_session_params", size)) << bitsplit_last_error();
    EXPECT_EQ(s, nullptr);
  }
  const size_t session_first = offsetof(bitsplit_session_params, n_ctx) + sizeof(int32_t);
  for (size_t size : taken_sizes<bitsplit_session_params>(session_first)) {
    Oversized<bitsplit_session_params> b{};
    bitsplit_session_params_init(&b.s);
    b.s.variant = "unknown";
    b.s.size = size;
    bitsplit_session* s = nullptr;
    EXPECT_EQ(bitsplit_session_create(l.model, &b.s, &s), BITSPLIT_ERR_NOT_FOUND) << size << ": " << bitsplit_last_error();
    // A field past the caller's size is not read: the first version has no lookup.
    b.s.variant = nullptr;
    b.s.lookup = 99;
    EXPECT_EQ(bitsplit_session_create(l.model, &b.s, &s), size == session_first ? BITSPLIT_OK : BITSPLIT_ERR_INVALID_ARGUMENT)
        << size;
    bitsplit_session_free(s);
  }

  // Model parameters: taken sizes reach the (missing) file.
  for (size_t size : refused_sizes<bitsplit_model_params>()) {
    Oversized<bitsplit_model_params> b{};
    bitsplit_model_params_init(&b.s);
    b.s.size = size;
    bitsplit_model* m = nullptr;
    EXPECT_EQ(bitsplit_model_load("/nonexistent/model.gguf", &b.s, &m), BITSPLIT_ERR_INVALID_ARGUMENT) << size;
    EXPECT_TRUE(refused_naming("bitsplit_model_params", size)) << bitsplit_last_error();
  }
  const size_t model_first = offsetof(bitsplit_model_params, progress_user_data) + sizeof(void*);
  for (size_t size : taken_sizes<bitsplit_model_params>(model_first)) {
    Oversized<bitsplit_model_params> b{};
    bitsplit_model_params_init(&b.s);
    b.s.target_activations = 3;  // out of range: read only from a size that holds it
    b.s.size = size;
    bitsplit_model* m = nullptr;
    EXPECT_EQ(bitsplit_model_load("/nonexistent/model.gguf", &b.s, &m),
              size == model_first ? BITSPLIT_ERR_LOAD : BITSPLIT_ERR_INVALID_ARGUMENT)
        << size << ": " << bitsplit_last_error();
  }

  // Statistics: a refused size is written nothing, and a generation given one does not run.
  bitsplit_session* s = nullptr;
  ASSERT_EQ(bitsplit_session_create(l.model, nullptr, &s), BITSPLIT_OK);
  const auto ids = tokenize(l.model, "The LORD");
  Collected c;
  ASSERT_EQ(bitsplit_session_generate(s, ids.data(), ids.size(), 6, collect, &c, nullptr), BITSPLIT_OK);
  using Stats = Oversized<bitsplit_generation_stats>;
  auto poisoned = [](size_t size) {
    Stats b;
    std::memset(static_cast<void*>(&b), 0x5a, sizeof b);
    b.s.size = size;
    return b;
  };
  for (size_t size : refused_sizes<bitsplit_generation_stats>()) {
    Stats b = poisoned(size);
    const Stats before = b;
    EXPECT_EQ(bitsplit_session_stats(s, &b.s), BITSPLIT_ERR_INVALID_ARGUMENT) << size;
    EXPECT_TRUE(refused_naming("bitsplit_generation_stats", size)) << bitsplit_last_error();
    EXPECT_EQ(std::memcmp(&b, &before, sizeof b), 0) << size << ": written";
    Collected none;
    EXPECT_EQ(bitsplit_session_generate(s, ids.data(), ids.size(), 6, collect, &none, &b.s), BITSPLIT_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(none.tokens.empty());
    EXPECT_EQ(std::memcmp(&b, &before, sizeof b), 0) << size << ": written";
  }
  const size_t stats_first = offsetof(bitsplit_generation_stats, tokens_per_check) + sizeof(double);
  for (size_t size : taken_sizes<bitsplit_generation_stats>(stats_first)) {
    Stats b = poisoned(size);
    const Stats before = b;
    ASSERT_EQ(bitsplit_session_stats(s, &b.s), BITSPLIT_OK) << size;
    EXPECT_EQ(b.s.size, std::min(size, sizeof(bitsplit_generation_stats))) << "the bytes written";
    EXPECT_EQ(b.s.generated_tokens, int64_t(c.tokens.size()));
    // Past the bytes written, nothing changed.
    const size_t written = b.s.size;
    EXPECT_EQ(std::memcmp(reinterpret_cast<const char*>(&b) + written, reinterpret_cast<const char*>(&before) + written,
                          sizeof b - written),
              0)
        << size;
  }
  bitsplit_session_free(s);
}

// API 0.5's speculative statistics: accepted tokens per draft depth (their sum is accepted_tokens;
// a depth is accepted at most as often as drafted, and no more often than the depth above it),
// draft and verify time, the lookup's share, and the checks per draft setting.
TEST(CApi, SpeculativeStatisticsPerDepthAndTime) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK) << bitsplit_last_error();
  bitsplit_session_params p = greedy_params();
  for (int32_t budget : {0, 4}) {  // online (with lookup), and a fixed tree budget
    p.budget = budget;
    bitsplit_session* s = nullptr;
    ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK) << bitsplit_last_error();
    const auto ids = tokenize(l.model, "And it came to pass");
    Collected c;
    bitsplit_generation_stats st{sizeof st};
    ASSERT_EQ(bitsplit_session_generate(s, ids.data(), ids.size(), 48, collect, &c, &st), BITSPLIT_OK)
        << bitsplit_last_error();
    EXPECT_EQ(st.size, sizeof st);
    ASSERT_EQ(st.speculative, 1);
    EXPECT_GT(st.checks, 0);
    EXPECT_GT(st.n_depths, 0) << "budget " << budget;
    EXPECT_LE(st.n_depths, BITSPLIT_MAX_DRAFT_DEPTH);
    int64_t sum = 0;
    for (int32_t d = 0; d < st.n_depths; ++d) {
      sum += st.accepted_at_depth[d];
      EXPECT_LE(st.accepted_at_depth[d], st.drafted_at_depth[d]) << "depth " << d + 1;
      EXPECT_LE(st.drafted_at_depth[d], st.checks) << "depth " << d + 1;
      if (d > 0) {
        EXPECT_LE(st.accepted_at_depth[d], st.accepted_at_depth[d - 1]) << "depth " << d + 1;
      }
    }
    for (int32_t d = st.n_depths; d < BITSPLIT_MAX_DRAFT_DEPTH; ++d) {
      EXPECT_EQ(st.accepted_at_depth[d], 0);
      EXPECT_EQ(st.drafted_at_depth[d], 0);
    }
    EXPECT_EQ(sum, st.accepted_tokens) << "budget " << budget;
    EXPECT_GE(st.draft_seconds, 0.0);
    EXPECT_GE(st.verify_seconds, 0.0);
    // (No timing beyond that: draft + verify is within the generation's time, but clocks are coarse.)
    EXPECT_GE(st.lookup_drafted_tokens, 0);
    EXPECT_LE(st.lookup_drafted_tokens, st.drafted_tokens);
    EXPECT_GE(st.lookup_accepted_tokens, 0);
    EXPECT_LE(st.lookup_accepted_tokens, st.accepted_tokens);
    if (budget == 4) {
      EXPECT_EQ(st.lookup_drafted_tokens, 0) << "a fixed budget drafts no lookup by default";
    }
    // The checks per setting add up to the checks.
    int64_t checks = 0;
    int32_t settings = 0;
    const char* name = nullptr;
    int64_t n = 0;
    for (; bitsplit_session_setting_checks(s, settings, &name, &n) == BITSPLIT_OK; ++settings) {
      ASSERT_NE(name, nullptr);
      EXPECT_GT(std::strlen(name), 0u);
      EXPECT_GT(n, 0);
      checks += n;
    }
    EXPECT_EQ(bitsplit_session_setting_checks(s, settings, &name, &n), BITSPLIT_ERR_NOT_FOUND);
    EXPECT_GT(settings, 0);
    EXPECT_EQ(checks, st.checks);
    EXPECT_EQ(bitsplit_session_setting_checks(s, -1, &name, &n), BITSPLIT_ERR_NOT_FOUND);
    EXPECT_EQ(bitsplit_session_setting_checks(s, 0, nullptr, &n), BITSPLIT_ERR_INVALID_ARGUMENT);
    bitsplit_session_free(s);
  }
  // Plain decoding: none of it.
  p.budget = 0;
  p.speculative = 0;
  bitsplit_session* s = nullptr;
  ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK);
  const auto ids = tokenize(l.model, "The LORD");
  bitsplit_generation_stats st{sizeof st};
  ASSERT_EQ(bitsplit_session_generate(s, ids.data(), ids.size(), 8, nullptr, nullptr, &st), BITSPLIT_OK);
  EXPECT_EQ(st.speculative, 0);
  EXPECT_EQ(st.n_depths, 0);
  EXPECT_EQ(st.draft_seconds, 0.0);
  EXPECT_EQ(st.verify_seconds, 0.0);
  const char* name = nullptr;
  int64_t n = 0;
  EXPECT_EQ(bitsplit_session_setting_checks(s, 0, &name, &n), BITSPLIT_ERR_NOT_FOUND);
  bitsplit_session_free(s);
}

// A caller built against the API 0.4 header passes the statistics' old size (the struct ended at
// reused_tokens): it is taken, the old fields are written and nothing past them; sizes ending
// inside the new fields (inside the per-depth arrays) are refused.
TEST(CApi, OlderStatisticsSizeStillWorks) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK);
  bitsplit_session_params p = greedy_params();
  bitsplit_session* s = nullptr;
  ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK);
  const auto ids = tokenize(l.model, "And it came to pass");
  using T = bitsplit_generation_stats;
  const size_t old_size = offsetof(T, reused_tokens) + sizeof(int64_t);
  EXPECT_EQ(old_size, 88u) << "API 0.4's sizeof(bitsplit_generation_stats) on LP64";
  EXPECT_EQ(offsetof(T, draft_seconds), old_size) << "the new fields start where the old struct ended";
  T st;
  std::memset(static_cast<void*>(&st), 0x5a, sizeof st);
  st.size = old_size;
  T before = st;
  Collected c;
  ASSERT_EQ(bitsplit_session_generate(s, ids.data(), ids.size(), 24, collect, &c, &st), BITSPLIT_OK) << bitsplit_last_error();
  EXPECT_EQ(st.size, old_size);
  EXPECT_EQ(st.generated_tokens, 24);
  EXPECT_EQ(st.speculative, 1);
  EXPECT_GT(st.accepted_tokens, 0);
  EXPECT_EQ(std::memcmp(reinterpret_cast<const char*>(&st) + old_size, reinterpret_cast<const char*>(&before) + old_size,
                        sizeof st - old_size),
            0)
      << "written past the caller's size";
  // bitsplit_session_stats likewise; every field end of the new version is taken too.
  for (size_t size : {old_size, offsetof(T, verify_seconds), offsetof(T, n_depths) + sizeof(int32_t),
                      offsetof(T, drafted_at_depth), sizeof(T)}) {
    std::memset(static_cast<void*>(&st), 0x5a, sizeof st);
    st.size = size;
    before = st;
    ASSERT_EQ(bitsplit_session_stats(s, &st), BITSPLIT_OK) << size << ": " << bitsplit_last_error();
    EXPECT_EQ(st.size, size);
    EXPECT_EQ(st.generated_tokens, 24);
    EXPECT_EQ(std::memcmp(reinterpret_cast<const char*>(&st) + size, reinterpret_cast<const char*>(&before) + size,
                          sizeof st - size),
              0)
        << size;
  }
  // The full size has the new fields.
  T full{sizeof full};
  ASSERT_EQ(bitsplit_session_stats(s, &full), BITSPLIT_OK);
  EXPECT_GT(full.n_depths, 0);
  EXPECT_GE(full.verify_seconds, 0.0);
  EXPECT_EQ(full.reserved1, 0);
  for (size_t size : {old_size + 1, old_size + 4, offsetof(T, accepted_at_depth) + 8, offsetof(T, stopped_at_stop) + 2}) {
    std::memset(static_cast<void*>(&st), 0x5a, sizeof st);
    st.size = size;
    before = st;
    EXPECT_EQ(bitsplit_session_stats(s, &st), BITSPLIT_ERR_INVALID_ARGUMENT) << size;
    EXPECT_EQ(std::memcmp(&st, &before, sizeof st), 0) << size;
  }
  bitsplit_session_free(s);
}

struct Logprobs {
  std::vector<bitsplit_token> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<bitsplit_token, float>>> top;
  Collected collected;
  int out_of_order = 0;  // a token callback without its log-probability just before
};

void on_logprob(void* user, bitsplit_token token, float logprob, const bitsplit_token* top_tokens, const float* top_logprobs,
                int32_t n_top) {
  auto* l = static_cast<Logprobs*>(user);
  l->tokens.push_back(token);
  l->logprobs.push_back(logprob);
  l->top.emplace_back();
  for (int32_t i = 0; i < n_top; ++i) l->top.back().push_back({top_tokens[i], top_logprobs[i]});
}

int on_token_after_logprob(void* user, bitsplit_token token, const char* text, size_t length) {
  auto* l = static_cast<Logprobs*>(user);
  if (token >= 0 && (l->tokens.size() != l->collected.tokens.size() + 1 || l->tokens.back() != token)) ++l->out_of_order;
  return collect(&l->collected, token, text, length);
}

// API 0.5's log-probabilities: each token's comes right before it, is the log-softmax of the
// raw logits (what the step-by-step API's logits give), greedy tokens are the most probable, and
// speculative and plain decoding report the same values.
TEST(CApi, LogprobsOfGeneratedTokens) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK);
  bitsplit_session_params p = greedy_params();
  const auto ids = tokenize(l.model, "And it came to pass");
  auto run = [&](int32_t speculative, int32_t top) {
    p.speculative = speculative;
    bitsplit_session* s = nullptr;
    EXPECT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK);
    Logprobs out;
    EXPECT_EQ(bitsplit_session_generate_logprobs(s, ids.data(), ids.size(), 24, top, on_logprob, on_token_after_logprob, &out,
                                                 nullptr),
              BITSPLIT_OK)
        << bitsplit_last_error();
    bitsplit_session_free(s);
    return out;
  };
  const Logprobs spec = run(1, 3);
  const Logprobs plain = run(0, 3);
  ASSERT_EQ(spec.collected.tokens.size(), 24u);
  EXPECT_EQ(spec.tokens, spec.collected.tokens);
  EXPECT_EQ(spec.out_of_order, 0);
  EXPECT_EQ(plain.tokens, spec.tokens);
  ASSERT_EQ(plain.logprobs.size(), spec.logprobs.size());
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    EXPECT_LE(spec.logprobs[i], 0.0f);
    ASSERT_EQ(spec.top[i].size(), 3u);
    EXPECT_EQ(spec.top[i][0].first, spec.tokens[i]) << "greedy picks the most probable";
    EXPECT_FLOAT_EQ(spec.top[i][0].second, spec.logprobs[i]);
    EXPECT_GE(spec.top[i][0].second, spec.top[i][1].second);
    EXPECT_GE(spec.top[i][1].second, spec.top[i][2].second);
    EXPECT_EQ(spec.logprobs[i], plain.logprobs[i]) << i;  // the verify pass is batch invariant: bit for bit
  }
  // The first token's, against the step-by-step logits' log-softmax.
  p.speculative = 0;
  bitsplit_session* s = nullptr;
  ASSERT_EQ(bitsplit_session_create(l.model, &p, &s), BITSPLIT_OK);
  ASSERT_EQ(bitsplit_session_feed(s, ids.data(), ids.size()), BITSPLIT_OK);
  const float* logits = nullptr;
  int32_t n_vocab = 0;
  ASSERT_EQ(bitsplit_session_logits(s, &logits, &n_vocab), BITSPLIT_OK);
  double max = logits[0], sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) max = std::max(max, double(logits[i]));
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(double(logits[i]) - max);
  EXPECT_NEAR(plain.logprobs[0], double(logits[plain.tokens[0]]) - max - std::log(sum), 1e-4);
  // Sampled: temperature does not change the reported values' meaning (raw logits), and top 0 gives none.
  p.temperature = 1.5f;
  p.seed = 3;
  const Logprobs sampled = run(0, 0);
  ASSERT_EQ(sampled.tokens.size(), 24u);
  EXPECT_EQ(sampled.out_of_order, 0);
  for (size_t i = 0; i < sampled.tokens.size(); ++i) {
    EXPECT_TRUE(sampled.top[i].empty());
    EXPECT_LE(sampled.logprobs[i], 0.0f);
  }
  // Out-of-range top_logprobs are refused before anything runs.
  Logprobs none;
  for (int32_t bad : {-1, BITSPLIT_MAX_TOP_LOGPROBS + 1}) {
    EXPECT_EQ(bitsplit_session_generate_logprobs(s, ids.data(), ids.size(), 4, bad, on_logprob, on_token_after_logprob, &none,
                                                 nullptr),
              BITSPLIT_ERR_INVALID_ARGUMENT);
  }
  EXPECT_TRUE(none.tokens.empty() && none.collected.tokens.empty());
  // A plain generate afterwards reports none (the hook is gone).
  Collected c;
  EXPECT_EQ(bitsplit_session_generate(s, ids.data(), ids.size(), 4, collect, &c, nullptr), BITSPLIT_OK);
  EXPECT_EQ(c.tokens.size(), 4u);
  bitsplit_session_free(s);
}

// Two sessions on one model, each in its own thread (one greedy on the base, one sampled on a
// variant), give the texts they give one after the other.
TEST(CApi, SessionsOnOneModelFromTwoThreads) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-devil.gguf"));
  static testing::TempDir dir("capi-threads");
  auto base = open_weights(fixture("bible-base.gguf"));
  auto devil = open_weights(fixture("bible-devil.gguf"));
  ASSERT_TRUE(base.is_ok() && devil.is_ok());
  const std::string delta = dir.file("devil.delta.gguf");
  ASSERT_TRUE(make_delta(**base, **devil, delta, {}, nullptr).is_ok());
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK);
  ASSERT_EQ(bitsplit_model_add_variant(l.model, "devil", delta.c_str()), BITSPLIT_OK) << bitsplit_last_error();
  EXPECT_EQ(bitsplit_model_variant_count(l.model), 1);
  bitsplit_session_params greedy, sampled;
  bitsplit_session_params_init(&greedy);
  greedy.temperature = 0;
  bitsplit_session_params_init(&sampled);
  sampled.variant = "devil";
  sampled.seed = 7;
  sampled.budget = 4;  // a fixed budget: sampled output is reproducible
  const Collected want_a = generate(l.model, &greedy, "And God said", 48);
  const Collected want_b = generate(l.model, &sampled, "The devil", 48);
  EXPECT_NE(want_a.text, want_b.text);
  for (int round = 0; round < 2; ++round) {
    Collected got_a, got_b;
    std::thread ta([&] { got_a = generate(l.model, &greedy, "And God said", 48); });
    std::thread tb([&] { got_b = generate(l.model, &sampled, "The devil", 48); });
    ta.join();
    tb.join();
    EXPECT_EQ(got_a.tokens, want_a.tokens) << "round " << round;
    EXPECT_EQ(got_b.tokens, want_b.tokens) << "round " << round;
  }
  // A removed variant cannot be chosen any more.
  ASSERT_EQ(bitsplit_model_remove_variant(l.model, "devil"), BITSPLIT_OK);
  bitsplit_session* s = nullptr;
  EXPECT_EQ(bitsplit_session_create(l.model, &sampled, &s), BITSPLIT_ERR_NOT_FOUND);
}

}  // namespace
}  // namespace bitsplit

namespace bitsplit {
namespace {

// LoRA adapters through the C API: at scale 0 the variant writes the base's text, at scale 1
// its own; a delta, a missing file or a scale that is not finite are refused.
TEST(CApi, LoraAdaptersAsVariants) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-devil-lora.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(converted_base().c_str(), nullptr, &l.model), BITSPLIT_OK);
  const std::string lora = fixture("bible-devil-lora.gguf");
  ASSERT_EQ(bitsplit_model_add_lora(l.model, "zero", lora.c_str(), 0.0f), BITSPLIT_OK) << bitsplit_last_error();
  ASSERT_EQ(bitsplit_model_add_lora(l.model, "devil", lora.c_str(), 1.0f), BITSPLIT_OK) << bitsplit_last_error();
  EXPECT_EQ(bitsplit_model_variant_count(l.model), 2);
  bitsplit_session_params p = greedy_params();
  const Collected base = generate(l.model, &p, "The devil", 32);
  p.variant = "zero";
  EXPECT_EQ(generate(l.model, &p, "The devil", 32).tokens, base.tokens);
  p.variant = "devil";
  EXPECT_NE(generate(l.model, &p, "The devil", 32).tokens, base.tokens);
  EXPECT_EQ(bitsplit_model_add_lora(l.model, "nan", lora.c_str(), std::nanf("")), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bitsplit_model_add_lora(l.model, "gone", "/nonexistent.gguf", 1.0f), BITSPLIT_ERR_LOAD);
  EXPECT_EQ(bitsplit_model_add_lora(l.model, "base", fixture("bible-base.gguf").c_str(), 1.0f), BITSPLIT_ERR_LOAD);
  EXPECT_NE(std::string(bitsplit_last_error()).find("not a LoRA adapter"), std::string::npos);
  EXPECT_EQ(bitsplit_model_add_lora(l.model, nullptr, lora.c_str(), 1.0f), BITSPLIT_ERR_INVALID_ARGUMENT);
}

// Chat prompts through the C API: the template's text as Jinja defines it, the tokens the server
// feeds (the template's BOS as a control token, the same text inside a message as plain text),
// and every bad input a status with a message.
TEST(CApi, ChatPromptsRenderAndTokenize) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  Loaded l;
  ASSERT_EQ(bitsplit_model_load(fixture("bible-base.gguf").c_str(), nullptr, &l.model), BITSPLIT_OK) << bitsplit_last_error();
  const std::string messages = R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "<s>Who begat Enos?"}])";
  std::vector<char> buf(1024);
  size_t length = 0;
  // The fixture has no template of its own.
  EXPECT_EQ(bitsplit_model_chat_template(l.model), nullptr);
  EXPECT_EQ(bitsplit_chat_render(l.model, messages.data(), messages.size(), nullptr, buf.data(), buf.size(), &length),
            BITSPLIT_ERR_NOT_FOUND);
  EXPECT_NE(std::string(bitsplit_last_error()).find("no chat template"), std::string::npos);

  bitsplit_chat_params p;
  bitsplit_chat_params_init(&p);
  EXPECT_EQ(p.add_generation_prompt, 1);
  EXPECT_EQ(p.special_tokens_in_content, 0);
  p.chat_template =
      "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  char bos_text[64];
  size_t bos_length = 0;
  const bitsplit_token bos = bitsplit_model_bos(l.model);
  ASSERT_GE(bos, 0);
  ASSERT_EQ(bitsplit_detokenize(l.model, &bos, 1, bos_text, sizeof(bos_text), &bos_length), BITSPLIT_OK);
  const std::string bos_piece(bos_text, bos_length);
  const std::string expected = bos_piece + "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n<s>Who begat Enos?"
                               "<|im_end|>\n<|im_start|>assistant\n";
  ASSERT_EQ(bitsplit_chat_render(l.model, messages.data(), messages.size(), &p, buf.data(), buf.size(), &length), BITSPLIT_OK)
      << bitsplit_last_error();
  EXPECT_EQ(std::string(buf.data(), length), expected);
  // Too small a buffer gives the size needed.
  size_t needed = 0;
  EXPECT_EQ(bitsplit_chat_render(l.model, messages.data(), messages.size(), &p, buf.data(), 3, &needed),
            BITSPLIT_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(needed, expected.size());
  p.add_generation_prompt = 0;
  ASSERT_EQ(bitsplit_chat_render(l.model, messages.data(), messages.size(), &p, buf.data(), buf.size(), &length), BITSPLIT_OK);
  EXPECT_EQ(std::string(buf.data(), length), expected.substr(0, expected.size() - std::strlen("<|im_start|>assistant\n")));
  p.add_generation_prompt = 1;

  // Tokens: the template's BOS is the one control token; the "<s>" a user wrote stays text.
  std::vector<bitsplit_token> ids(512);
  size_t n = 0;
  ASSERT_EQ(bitsplit_chat_tokenize(l.model, messages.data(), messages.size(), &p, ids.data(), ids.size(), &n), BITSPLIT_OK)
      << bitsplit_last_error();
  ids.resize(n);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), bos), 1);
  EXPECT_EQ(ids.front(), bos);
  std::vector<bitsplit_token> as_text(512);
  size_t n_text = 0;
  const std::string rest = expected.substr(bos_piece.size());
  ASSERT_EQ(bitsplit_tokenize(l.model, rest.data(), rest.size(), 0, 0, as_text.data(), as_text.size(), &n_text), BITSPLIT_OK);
  as_text.resize(n_text);
  as_text.insert(as_text.begin(), bos);
  EXPECT_EQ(ids, as_text);
  // Trusted content: the user's "<s>" becomes the control token too.
  p.special_tokens_in_content = 1;
  std::vector<bitsplit_token> trusted(512);
  ASSERT_EQ(bitsplit_chat_tokenize(l.model, messages.data(), messages.size(), &p, trusted.data(), trusted.size(), &n), BITSPLIT_OK);
  trusted.resize(n);
  EXPECT_EQ(std::count(trusted.begin(), trusted.end(), bos), 2);
  p.special_tokens_in_content = 0;
  EXPECT_EQ(bitsplit_chat_tokenize(l.model, messages.data(), messages.size(), &p, ids.data(), 2, &n),
            BITSPLIT_ERR_BUFFER_TOO_SMALL);
  EXPECT_EQ(n, as_text.size());

  // Bad inputs.
  auto status_of = [&](const std::string& json, const bitsplit_chat_params* params) {
    return bitsplit_chat_render(l.model, json.data(), json.size(), params, buf.data(), buf.size(), &length);
  };
  EXPECT_EQ(status_of("[{\"role\": ", &p), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitsplit_last_error()).find("not valid JSON"), std::string::npos);
  EXPECT_EQ(status_of("{\"role\": \"user\"}", &p), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status_of("[1]", &p), BITSPLIT_ERR_INVALID_ARGUMENT);
  bitsplit_chat_params raising = p;
  raising.chat_template = "{{ raise_exception('only user turns') }}";
  EXPECT_EQ(status_of(messages, &raising), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitsplit_last_error()).find("only user turns"), std::string::npos);
  bitsplit_chat_params broken = p;
  broken.chat_template = "{% for m in messages %}";
  EXPECT_EQ(status_of(messages, &broken), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitsplit_last_error()).find("chat template"), std::string::npos);
  bitsplit_chat_params sized = p;
  sized.size = 0;
  EXPECT_EQ(status_of(messages, &sized), BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(bitsplit_last_error()).find("bitsplit_chat_params.size"), std::string::npos);
  EXPECT_EQ(bitsplit_chat_render(nullptr, messages.data(), messages.size(), &p, buf.data(), buf.size(), &length),
            BITSPLIT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bitsplit_chat_tokenize(l.model, messages.data(), messages.size(), &p, ids.data(), ids.size(), nullptr),
            BITSPLIT_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace bitsplit
