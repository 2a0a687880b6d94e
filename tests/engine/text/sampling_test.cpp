// Sampling: greedy, filters, penalties, determinism per seed, and parameter validation.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include "bitsplit/sampling.h"

namespace bitsplit {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.0f};

TEST(Sampling, GreedyIsArgmaxWithLowestIndexOnTies) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  EXPECT_EQ(s.sample(kLogits, {}), 1);
}

TEST(Sampling, SameSeedSameTokensDifferentSeedDiffers) {
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temperature = 1.5f;
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(s.sample(kLogits, {}));
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampling, DistributionFollowsFilters) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 3;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  Sampler s(p);
  auto d = s.distribution(kLogits, {});
  EXPECT_NEAR(std::accumulate(d.begin(), d.end(), 0.0), 1.0, 1e-6);
  EXPECT_GT(d[1], 0);
  EXPECT_GT(d[4], 0);
  EXPECT_GT(d[2], 0);
  EXPECT_EQ(d[0], 0);  // top-k = 3 keeps 1, 4, 2
  // Exact softmax over the kept three.
  const double z = std::exp(3.0) * 2 + std::exp(2.5);
  EXPECT_NEAR(d[2], std::exp(2.5) / z, 1e-6);

  p.top_k = 0;
  p.min_p = 0.5f;  // keeps tokens with p >= 0.5 * p_max: logits within ln 2 of the max
  d = Sampler(p).distribution(kLogits, {});
  EXPECT_GT(d[2], 0);
  EXPECT_EQ(d[0], 0);

  p.min_p = 0.0f;
  p.top_p = 0.5f;  // the first of the two tied tokens alone holds < 0.5, so two are kept
  d = Sampler(p).distribution(kLogits, {});
  EXPECT_GT(d[1], 0);
  EXPECT_GT(d[4], 0);
  EXPECT_EQ(d[2], 0);
}

TEST(Sampling, EmpiricalFrequenciesMatchDistribution) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 9;
  Sampler s(p);
  const auto d = s.distribution(kLogits, {});
  std::map<int32_t, int> counts;
  const int n = 40000;
  for (int i = 0; i < n; ++i) counts[s.sample(kLogits, {})]++;
  for (size_t t = 0; t < d.size(); ++t) {
    // 5 standard deviations of a binomial proportion.
    const double sd = std::sqrt(d[t] * (1 - d[t]) / n);
    EXPECT_NEAR(counts[int32_t(t)] / double(n), d[t], 5 * sd + 1e-9) << t;
  }
}

TEST(Sampling, RepetitionPenaltyLowersRecentTokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  const std::vector<int32_t> history = {1, 1, 4};
  // Tokens 1 and 4 (logit 3 -> 1.5) fall below token 2 (2.5).
  EXPECT_EQ(s.sample(kLogits, history), 2);
}

TEST(Sampling, ValidationNamesTheOption) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_NE(p.validate().message().find("top-p"), std::string::npos);
  p = {};
  p.repeat_penalty = 0.0f;
  EXPECT_NE(p.validate().message().find("repetition penalty"), std::string::npos);
  p = {};
  p.temperature = NAN;
  EXPECT_FALSE(p.validate().is_ok());
  EXPECT_TRUE(SamplingParams{}.validate().is_ok());
}

// A negative temperature would sample the least likely tokens first (and overflow to NaN on a
// wide enough row): refused, as the server and the CLI refuse it; 0 (also -0) is greedy.
TEST(Sampling, NegativeTemperatureIsRefused) {
  for (float t : {-1.0f, -1e-6f, -INFINITY}) {
    SamplingParams p;
    p.temperature = t;
    const Status st = p.validate();
    ASSERT_FALSE(st.is_ok()) << t;
    EXPECT_NE(st.message().find("temperature must be a finite number >= 0"), std::string::npos) << st.message();
  }
  for (float t : {0.0f, -0.0f, 1e-6f, 100.0f}) {
    SamplingParams p;
    p.temperature = t;
    EXPECT_TRUE(p.validate().is_ok()) << t;
  }
}

}  // namespace
}  // namespace bitsplit
