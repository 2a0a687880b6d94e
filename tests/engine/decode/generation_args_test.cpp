// generation_config: the one place a front end's arguments become session options — the
// defaults (context lookup with an online budget only, the policy's shape) and the checks of the
// budget, lookup, draft shape and sampling, made even where the model would decode plainly.
#include <gtest/gtest.h>

#include <string>

#include "bitsplit/generation_args.h"

namespace bitsplit {
namespace {

std::string error_of(const GenerationArgs& args) {
  auto config = generation_config(args);
  return config ? std::string() : config.status().message();
}

TEST(GenerationArgs, AnOnlineBudgetGetsTheDefaultLookupAndAFixedOneNone) {
  GenerationArgs args;
  auto online = generation_config(args);
  ASSERT_TRUE(online) << online.status().message();
  EXPECT_FALSE(online->session.budget.has_value());
  EXPECT_EQ(online->session.lookup.max_tokens, kDefaultLookup);
  EXPECT_TRUE(online->session.auto_shape);
  EXPECT_EQ(online->session.policy.shape, spec::DraftShape::kTree);

  args.budget = 4;
  auto fixed = generation_config(args);
  ASSERT_TRUE(fixed) << fixed.status().message();
  EXPECT_EQ(fixed->session.budget, 4);
  EXPECT_EQ(fixed->session.lookup.max_tokens, 0) << "a fixed budget is exactly what was asked for";

  for (int32_t lookup : {0, 3, 16}) {  // asked for: kept, with either budget
    args.lookup = lookup;
    args.budget = lookup == 3 ? std::optional<int32_t>() : std::optional<int32_t>(8);
    auto c = generation_config(args);
    ASSERT_TRUE(c) << c.status().message();
    EXPECT_EQ(c->session.lookup.max_tokens, lookup);
  }
}

TEST(GenerationArgs, ShapeDepthTopKAndFlagsReachTheSessionOptions) {
  GenerationArgs args;
  args.shape = spec::DraftShape::kChain;
  args.shape_given = true;
  args.depth = 5;
  args.tree_top_k = 3;
  args.speculative = false;
  args.device_draft = false;
  args.base_draft = true;
  args.reuse_prefix = false;
  args.draft_max_sequences = 2;
  auto c = generation_config(args);
  ASSERT_TRUE(c) << c.status().message();
  const SessionOptions& s = c->session;
  EXPECT_EQ(s.policy.shape, spec::DraftShape::kChain);
  EXPECT_FALSE(s.auto_shape);
  EXPECT_EQ(s.policy.max_depth, 5);
  EXPECT_EQ(s.policy.top_k, 3);
  EXPECT_EQ(s.policy.width, 3);
  EXPECT_FALSE(s.speculative);
  EXPECT_FALSE(s.device_draft);
  EXPECT_TRUE(s.base_draft);
  EXPECT_FALSE(s.reuse_prefix);
  EXPECT_EQ(s.draft_max_sequences, 2);
}

TEST(GenerationArgs, TheSeedIsTheOneGivenAndTheSamplingIsKept) {
  GenerationArgs args;
  args.sampling.temperature = 0.5f;
  args.sampling.top_k = 7;
  args.sampling.seed = 1;  // `seed` decides
  args.seed = 12345;
  auto c = generation_config(args);
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->sampling.seed, 12345u);
  EXPECT_EQ(c->sampling.temperature, 0.5f);
  EXPECT_EQ(c->sampling.top_k, 7);
}

TEST(GenerationArgs, BadValuesAreRefusedEvenForPlainDecoding) {
  for (bool speculative : {true, false}) {
    SCOPED_TRACE(speculative ? "speculative" : "plain");
    GenerationArgs args;
    args.speculative = speculative;
    for (int32_t budget : {0, -1, spec::kMaxBudget + 1}) {
      args.budget = budget;
      EXPECT_NE(error_of(args).find("budget"), std::string::npos) << budget;
    }
    args.budget.reset();
    for (int32_t lookup : {-2, spec::kMaxBudget + 1}) {
      args.lookup = lookup;
      EXPECT_NE(error_of(args).find("lookup"), std::string::npos) << lookup;
    }
    args.lookup.reset();
    args.depth = 0;
    EXPECT_NE(error_of(args).find("depth"), std::string::npos);
    args.depth = 8;
    args.tree_top_k = 0;
    EXPECT_NE(error_of(args).find("top-k"), std::string::npos);
    args.tree_top_k = 4;
    args.sampling.top_p = 2.0f;
    EXPECT_NE(error_of(args).find("top-p"), std::string::npos);
    args.sampling.top_p = 0.9f;
    EXPECT_EQ(error_of(args), "");
  }
}

}  // namespace
}  // namespace bitsplit
