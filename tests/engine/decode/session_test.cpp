// The session: one call for plain and speculative decoding of a sequence, with its variant
// held for its lifetime. Greedy output is the same whichever way it decodes.
#include <gtest/gtest.h>

#include <filesystem>

#include "bitsplit/convert.h"
#include "bitsplit/session.h"
#include "gguf_testing.h"
#include "test_paths.h"

#include <optional>

namespace bitsplit {
namespace {

namespace fs = std::filesystem;

struct Converted {
  std::unique_ptr<WeightSource> source;
  Model model;
};

// `source` converted to a bit-split file (named after `name` in the temp folder) and loaded.
Converted convert_and_load(const WeightSource& source, const std::string& name) {
  const fs::path path = fs::temp_directory_path() / ("bitsplit_session_" + std::to_string(::getpid()) + "_" + name);
  BITSPLIT_CHECK(convert_model(source, path.string(), {}, nullptr, nullptr).is_ok());
  auto w = open_weights(path.string());
  BITSPLIT_CHECK(w.is_ok());
  auto m = Model::load(**w);
  BITSPLIT_CHECK(m.is_ok(), m.status().message());
  fs::remove(path);
  return {std::move(*w), std::move(*m)};
}

Converted tiny_converted() { return convert_and_load(*testing::tiny_weights({}), "tiny.gguf"); }

// A fixture from tests/models converted to a bit-split file (nullopt when tests/models is missing).
std::optional<Converted> converted_fixture(const std::string& name) {
  const std::string path = testing::source_dir() + "/tests/models/" + name;
  if (!fs::exists(path)) return std::nullopt;
  auto source = open_weights(path);
  BITSPLIT_CHECK(source.is_ok(), source.status().message());
  return convert_and_load(**source, name);
}

std::vector<int32_t> greedy(Session& s, const std::vector<int32_t>& prompt, int n, SessionResult* result = nullptr) {
  SamplingParams p;
  p.temperature = 0;
  Sampler sampler(p);
  std::vector<int32_t> out;
  auto r = s.generate(prompt, n, -1, sampler, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  if (r && result) *result = *r;
  return out;
}

// A session that records the target logits of every token it generates (SessionOptions::on_logits).
struct LoggingSession {
  LoggingSession(const Model& model, SessionOptions o) : session(model, nullptr, record_into(std::move(o))) {}
  LoggingSession(const LoggingSession&) = delete;  // (the callback points at this object)
  LoggingSession& operator=(const LoggingSession&) = delete;
  // greedy(), with `logits` holding this generation's.
  std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int n, SessionResult* result = nullptr) {
    logits.clear();
    return bitsplit::greedy(session, prompt, n, result);
  }
  std::vector<std::vector<float>> logits;
  Session session;

 private:
  SessionOptions record_into(SessionOptions o) {
    o.on_logits = [this](int32_t, std::span<const float> l) { logits.emplace_back(l.begin(), l.end()); };
    return o;
  }
};

TEST(Session, SpeculativeAndPlainGiveTheSameGreedyText) {
  Converted c = tiny_converted();
  const std::vector<int32_t> prompt = {1, 5, 9};
  Session plain(c.model, nullptr, {.speculative = false});
  EXPECT_FALSE(plain.speculative());
  SessionResult pr;
  const auto want = greedy(plain, prompt, 30, &pr);
  EXPECT_FALSE(pr.speculative.has_value());
  EXPECT_EQ(pr.generation.generated_tokens, 30);
  for (std::optional<int32_t> budget : {std::optional<int32_t>(), std::optional<int32_t>(1), std::optional<int32_t>(16)}) {
    Session spec(c.model, nullptr, {.budget = budget});
    ASSERT_TRUE(spec.speculative());
    SessionResult sr;
    EXPECT_EQ(greedy(spec, prompt, 30, &sr), want) << "budget " << (budget ? *budget : 0);
    ASSERT_TRUE(sr.speculative.has_value());
    EXPECT_GT(sr.speculative->acceptance.checks, 0);
    EXPECT_EQ(sr.speculative->draft_pass.rfind("host", 0), 0u) << sr.speculative->draft_pass;
  }
}

TEST(Session, AutoShapeAndLookupGiveTheSameGreedyText) {
  Converted c = tiny_converted();
  const std::vector<int32_t> prompt = {1, 5, 9, 5, 9, 5};
  Session plain(c.model, nullptr, {.speculative = false});
  const auto want = greedy(plain, prompt, 30);
  for (bool auto_shape : {false, true}) {
    for (int lookup : {0, 8}) {
      SessionOptions o{.auto_shape = auto_shape};
      o.policy.shape = spec::DraftShape::kChain;
      o.lookup.max_tokens = lookup;
      Session spec(c.model, nullptr, o);
      SessionResult sr;
      EXPECT_EQ(greedy(spec, prompt, 30, &sr), want) << "auto shape " << auto_shape << " lookup " << lookup;
      ASSERT_TRUE(sr.speculative.has_value());
      if (!auto_shape) {
        for (const auto& [name, checks] : sr.speculative->checks_per_setting)
          EXPECT_EQ(name.find("tree"), std::string::npos) << name << ": --draft chain keeps to chains";
      }
    }
  }
}

// With an online budget a session's controller carries what it learned from one generation to
// the next, and so do sessions sharing a ControllerMemory (a server's requests); a generation
// whose controller would choose among other settings (lookup off) starts a new one. The text is
// the same greedy text either way.
TEST(Session, TheOnlineControllerCarriesWhatItLearnedToTheNextGeneration) {
  Converted c = tiny_converted();
  const std::vector<int32_t> prompt = {1, 5, 9, 5, 9, 5};
  Session plain(c.model, nullptr, {.speculative = false});
  const auto want = greedy(plain, prompt, 20);
  auto checks_before = [&](Session& s) {
    SessionResult r;
    EXPECT_EQ(greedy(s, prompt, 20, &r), want);
    return r.speculative ? r.speculative->controller_checks_before : -1;
  };
  SessionOptions o;
  o.lookup.max_tokens = 8;
  Session own(c.model, nullptr, o);
  EXPECT_EQ(checks_before(own), 0);
  const int64_t after_one = checks_before(own);
  EXPECT_GT(after_one, 0) << "the second generation continues the first's controller";
  EXPECT_GT(checks_before(own), after_one);

  o.controller_memory = std::make_shared<ControllerMemory>();
  {
    Session first(c.model, nullptr, o);
    EXPECT_EQ(checks_before(first), 0);
  }
  Session second(c.model, nullptr, o);
  EXPECT_GT(checks_before(second), 0) << "a new session on the same memory continues it";
  SessionOptions no_lookup = o;
  no_lookup.lookup.max_tokens = 0;
  Session other(c.model, nullptr, no_lookup);
  EXPECT_EQ(checks_before(other), 0) << "other settings to choose from: a new controller";
  Session fixed(c.model, nullptr, {.budget = 4, .controller_memory = o.controller_memory});
  EXPECT_EQ(checks_before(fixed), 0) << "a fixed budget has no controller";
}

TEST(Session, StopsWhenTheCallbackSaysSo) {
  Converted c = tiny_converted();
  for (bool speculative : {false, true}) {
    Session s(c.model, nullptr, {.speculative = speculative, .budget = 8});
    SamplingParams p;
    p.temperature = 0;
    Sampler sampler(p);
    int seen = 0;
    auto r = s.generate(std::vector<int32_t>{1, 5}, 30, -1, sampler, [&](int32_t) { return ++seen < 3; });
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(seen, 3) << (speculative ? "speculative" : "plain");
    EXPECT_EQ(r->generation.generated_tokens, 3);
  }
}

// A stop request (SessionOptions::stop, the C API's abort) is polled before each prompt chunk:
// the generation ends there, with the chunks run so far counted and kept like any prompt
// tokens, and no token generated; the next generation continues from them and gives a fresh
// session's text. Deterministic: the callback itself says stop at its third poll.
TEST(Session, AStopRequestEndsThePromptBetweenChunks) {
  Converted c = tiny_converted();
  const std::vector<int32_t> prompt = {1, 5, 9, 5, 3, 7, 2, 8, 4, 4, 6, 1, 9, 3};
  for (bool speculative : {false, true}) {
    SCOPED_TRACE(speculative ? "speculative" : "plain");
    int polls = 0, stop_at = 3;
    SessionOptions o{.speculative = speculative, .prefill_chunk = 4};
    o.stop = [&] { return ++polls == stop_at; };
    Session s(c.model, nullptr, o);
    SamplingParams p;
    p.temperature = 0;
    Sampler sampler(p);
    int tokens = 0;
    auto r = s.generate(prompt, 8, -1, sampler, [&](int32_t) { return ++tokens > 0; });
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(polls, 3);
    EXPECT_TRUE(r->generation.stopped);
    EXPECT_EQ(r->generation.prompt_tokens, 8) << "two chunks of 4 ran";
    EXPECT_EQ(r->generation.generated_tokens, 0);
    EXPECT_EQ(tokens, 0);
    EXPECT_EQ(s.cached_tokens(), 8);

    stop_at = -1;
    SessionResult again;
    const auto out = greedy(s, prompt, 8, &again);
    EXPECT_FALSE(again.generation.stopped);
    EXPECT_EQ(again.generation.reused_tokens, 8);
    EXPECT_EQ(again.generation.prompt_tokens, int64_t(prompt.size()));
    Session fresh(c.model, nullptr, {.speculative = speculative, .prefill_chunk = 4});
    EXPECT_EQ(out, greedy(fresh, prompt, 8));

    // Stopped before the first chunk: nothing ran, nothing is kept.
    polls = 0;
    stop_at = 1;
    s.forget();
    r = s.generate(prompt, 8, -1, sampler, [&](int32_t) { return ++tokens > 0; });
    ASSERT_TRUE(r.is_ok());
    EXPECT_TRUE(r->generation.stopped);
    EXPECT_EQ(r->generation.prompt_tokens, 0);
    EXPECT_EQ(tokens, 0);
    EXPECT_EQ(s.cached_tokens(), 0);
  }
}

// A session keeps its last sequence's K/V and starts the next prompt from the longest common
// prefix; the reused K/V are the bits a new prefill computes, so tokens and logits are those of a
// fresh session, plain and speculative, whether the cache grows (a longer prompt) or not.
TEST(Session, ReusesTheKeptPrefixWithTheSameLogits) {
  Converted c = tiny_converted();
  for (bool speculative : {false, true}) {
    for (std::optional<int32_t> budget : {std::optional<int32_t>(), std::optional<int32_t>(4)}) {
      if (!speculative && budget) continue;
      SCOPED_TRACE(std::string(speculative ? "speculative" : "plain") + " budget " + std::to_string(budget.value_or(0)));
      SessionOptions o{.speculative = speculative, .budget = budget};
      o.lookup.max_tokens = 8;
      LoggingSession kept(c.model, o);
      const std::vector<int32_t> first = {1, 5, 9, 5};
      SessionResult r;
      const auto reply = kept.greedy(first, 20, &r);
      EXPECT_EQ(r.generation.reused_tokens, 0);
      // What went through the model: the prompt and every generated token but the last (and
      // that one too when speculation had verified it before the run stopped).
      const int64_t kept_tokens = kept.session.cached_tokens();
      EXPECT_GE(kept_tokens, int64_t(first.size() + reply.size() - 1));
      EXPECT_LE(kept_tokens, int64_t(first.size() + reply.size()));
      if (!speculative) {
        EXPECT_EQ(kept_tokens, int64_t(first.size() + reply.size() - 1));
      }
      // The next turn: the history, then new tokens (a longer prompt: the cache grows).
      std::vector<int32_t> second = first;
      second.insert(second.end(), reply.begin(), reply.end());
      second.insert(second.end(), {3, 7, 2});
      // Against a new session (nothing kept) with the same options.
      LoggingSession fresh(c.model, o);
      const auto want = fresh.greedy(second, 20);
      EXPECT_EQ(kept.greedy(second, 20, &r), want);
      EXPECT_EQ(r.generation.reused_tokens, kept_tokens);
      EXPECT_TRUE(kept.logits == fresh.logits) << "the logits differ from a fresh session's";
      // A prompt that leaves the history after two tokens reuses two (the cache is big enough).
      const std::vector<int32_t> third = {1, 5, 4, 4, 8};
      Session fresh3(c.model, nullptr, {.speculative = speculative, .budget = budget});
      const auto want3 = greedy(fresh3, third, 10);
      EXPECT_EQ(kept.greedy(third, 10, &r), want3);
      EXPECT_EQ(r.generation.reused_tokens, 2);
      // The whole prompt kept: its last token still runs (its logits pick the first token).
      const std::vector<int32_t> prefix(third.begin(), third.begin() + 4);
      EXPECT_EQ(kept.greedy(prefix, 10, &r), greedy(fresh3, prefix, 10));
      EXPECT_EQ(r.generation.reused_tokens, 3);
      kept.session.forget();
      EXPECT_EQ(kept.session.cached_tokens(), 0);
      EXPECT_EQ(kept.greedy(third, 10, &r), want3);
      EXPECT_EQ(r.generation.reused_tokens, 0);
    }
  }
}

// LongRoPE (Phi-3, trained for 32 positions) turns positions by a factor set the sequence's
// length picks: K/V kept from a sequence under 32 positions are not reused by one past them (nor
// the other way), and the logits stay a fresh session's. Sliding-window attention (Gemma 2)
// reads the positions of the reused slots: a history longer than the window reuses exactly.
TEST(Session, ReuseKeepsLongRopeFactorsAndSlidingWindows) {
  for (const char* name : {"phi3-longrope-tiny.gguf", "gemma2-tiny.gguf"}) {
    SCOPED_TRACE(name);
    auto c = converted_fixture(name);
    if (!c) GTEST_SKIP() << "tests/models is missing";
    const bool longrope = c->model.config().rope_original_context > 0;
    LoggingSession kept(c->model, {});
    std::vector<int32_t> prompt = {1, 5, 9, 5};
    // Short (4 + 10 positions), then past 32 (with 20 new tokens), then short again.
    for (int n : {10, 20, 4}) {
      SCOPED_TRACE(n);
      SessionResult r;
      const auto out = kept.greedy(prompt, n, &r);
      LoggingSession fresh(c->model, {});
      fresh.greedy(prompt, n);
      EXPECT_TRUE(kept.logits == fresh.logits) << "the logits differ from a fresh session's";
      // The first sequence has nothing kept; on LongRoPE every later one changed factor sets.
      if (n == 10 || longrope) EXPECT_EQ(r.generation.reused_tokens, 0);
      else EXPECT_GT(r.generation.reused_tokens, int64_t(prompt.size()) / 2);
      prompt.insert(prompt.end(), out.begin(), out.end());
      prompt.insert(prompt.end(), {3, 7});
      if (n == 20) prompt.resize(12);  // back under 32 positions with the 4 new tokens
    }
  }
}

TEST(Session, WithoutReuseNothingIsKept) {
  Converted c = tiny_converted();
  for (bool speculative : {false, true}) {
    Session s(c.model, nullptr, {.speculative = speculative, .reuse_prefix = false});
    SessionResult r;
    greedy(s, {1, 5, 9}, 8, &r);
    EXPECT_EQ(s.cached_tokens(), 0);
    greedy(s, {1, 5, 9, 2}, 8, &r);
    EXPECT_EQ(r.generation.reused_tokens, 0);
  }
}

// A request refused before it runs (here: over the context) leaves the kept cache as it was.
TEST(Session, ARefusedRequestLeavesTheKeptCache) {
  Converted c = tiny_converted();
  for (bool speculative : {false, true}) {
    Session s(c.model, nullptr, {.speculative = speculative});
    SessionResult r;
    greedy(s, {1, 5, 9}, 8, &r);
    EXPECT_GT(s.cached_tokens(), 0);
    SamplingParams p;
    Sampler sampler(p);
    EXPECT_FALSE(s.generate(std::vector<int32_t>{1, 5, 9}, 1000, -1, sampler, [](int32_t) { return true; }).is_ok());
    EXPECT_GT(s.cached_tokens(), 0);
    greedy(s, {1, 5, 9, 4}, 8, &r);
    EXPECT_EQ(r.generation.reused_tokens, 3);
  }
}

TEST(Session, BadOptionsAreErrors) {
  Converted c = tiny_converted();
  SamplingParams p;
  Sampler sampler(p);
  auto none = [](int32_t) { return true; };
  EXPECT_FALSE(Session(c.model, nullptr, {.base_draft = true}).validate().is_ok()) << "a base draft without a variant";
  EXPECT_FALSE(Session(c.model, nullptr, {.budget = 0}).validate().is_ok());
  EXPECT_FALSE(Session(c.model, nullptr, {.budget = spec::kMaxBudget + 1}).validate().is_ok());
  SessionOptions bad_lookup;
  bad_lookup.lookup.max_tokens = spec::kMaxBudget + 1;
  EXPECT_FALSE(Session(c.model, nullptr, bad_lookup).validate().is_ok());
  bad_lookup.lookup = {4, 3, 0};
  EXPECT_FALSE(Session(c.model, nullptr, bad_lookup).validate().is_ok()) << "n-grams of 0 tokens";
  for (bool speculative : {false, true}) {
    Session zero(c.model, nullptr, {.speculative = speculative, .prefill_chunk = 0});
    auto r = zero.generate(std::vector<int32_t>{1, 5, 9}, 4, -1, sampler, none);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("prefill chunk"), std::string::npos);
    Session s(c.model, nullptr, {.speculative = speculative});
    EXPECT_FALSE(s.generate(std::vector<int32_t>{}, 4, -1, sampler, none).is_ok()) << "empty prompt";
    EXPECT_FALSE(s.generate(std::vector<int32_t>{1}, 1000, -1, sampler, none).is_ok()) << "over the context";
  }
}

}  // namespace
}  // namespace bitsplit
