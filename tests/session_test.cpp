// The session: one call for plain and speculative decoding of a sequence, with its variant
// held for its lifetime. Greedy output is the same whichever way it decodes.
#include <gtest/gtest.h>

#include <filesystem>

#include "bitsplit/convert.h"
#include "bitsplit/session.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

namespace fs = std::filesystem;

struct Converted {
  std::unique_ptr<WeightSource> source;
  Model model;
};

Converted tiny_converted() {
  auto source = testing::tiny_weights({});
  const fs::path path = fs::temp_directory_path() / ("bitsplit_session_" + std::to_string(::getpid()) + ".gguf");
  BITSPLIT_CHECK(convert_model(*source, path.string(), {}, nullptr, nullptr).is_ok());
  auto w = open_weights(path.string());
  BITSPLIT_CHECK(w.is_ok());
  auto m = Model::load(**w);
  BITSPLIT_CHECK(m.is_ok(), m.status().message());
  fs::remove(path);
  return {std::move(*w), std::move(*m)};
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
      o.policy.shape = speculation::DraftShape::kChain;
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

TEST(Session, BadOptionsAreErrors) {
  Converted c = tiny_converted();
  SamplingParams p;
  Sampler sampler(p);
  auto none = [](int32_t) { return true; };
  EXPECT_FALSE(Session(c.model, nullptr, {.base_draft = true}).validate().is_ok()) << "a base draft without a variant";
  EXPECT_FALSE(Session(c.model, nullptr, {.budget = 0}).validate().is_ok());
  EXPECT_FALSE(Session(c.model, nullptr, {.budget = speculation::kMaxBudget + 1}).validate().is_ok());
  SessionOptions bad_lookup;
  bad_lookup.lookup.max_tokens = speculation::kMaxBudget + 1;
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
