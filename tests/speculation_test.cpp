// spec/: token trees, proposals, greedy verification, and the statistical proof that
// sampling verification leaves the target distribution unchanged (and that the test can
// tell when it does not).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "bitsplit/speculation.h"

namespace bitsplit::speculation {
namespace {

TEST(TokenTree, PathsAncestorsAndChildren) {
  TokenTree t(7);
  const int a = t.add(0, 1, -0.1), b = t.add(0, 2, -0.5), c = t.add(a, 3, -0.3);
  EXPECT_EQ(t.path_to(c), (std::vector<int32_t>{0, a, c}));
  EXPECT_TRUE(t.is_ancestor(a, c));
  EXPECT_FALSE(t.is_ancestor(b, c));
  EXPECT_EQ(t.child_with_token(0, 2), b);
  EXPECT_EQ(t.child_with_token(0, 9), -1);
  EXPECT_EQ(t.max_depth(), 2);
}

TEST(Proposals, GreedyTakesTopKInOrderSamplingDrawsWithoutReplacement) {
  TokenTree t(0);
  std::mt19937_64 rng(1);
  const std::vector<float> q = {0.1f, 0.4f, 0.05f, 0.3f, 0.15f};
  auto top = propose_children(t, 0, q, 3, false, rng);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);
  EXPECT_EQ(top[1].token, 3);
  EXPECT_EQ(top[2].token, 4);
  EXPECT_NEAR(top[0].log_prob, std::log(0.4), 1e-6);
  std::map<int, int> first;
  for (int i = 0; i < 20000; ++i) {
    auto s = propose_children(t, 0, q, 5, true, rng);
    std::set<int> distinct;
    for (const auto& cand : s) distinct.insert(cand.token);
    ASSERT_EQ(distinct.size(), 5u);
    first[s[0].token]++;
  }
  for (int tok = 0; tok < 5; ++tok) EXPECT_NEAR(first[tok] / 20000.0, q[size_t(tok)], 0.015) << tok;
}

TEST(VerifyGreedy, FollowsArgmaxAndEmitsTheTargetsToken) {
  TokenTree t(5);
  const int a = t.add(0, 1, 0), b = t.add(0, 2, 0);
  const int c = t.add(b, 3, 0);
  (void)a;
  // Target wants 2 after the root, then 3, then 9.
  std::vector<int32_t> argmax(4, -1);
  argmax[0] = 2;
  argmax[size_t(b)] = 3;
  argmax[size_t(c)] = 9;
  argmax[1] = 0;
  const Verdict v = verify_greedy(t, argmax);
  EXPECT_EQ(v.accepted, (std::vector<int32_t>{b, c}));
  EXPECT_EQ(v.next_token, 9);
  argmax[0] = 4;
  const Verdict none = verify_greedy(t, argmax);
  EXPECT_TRUE(none.accepted.empty());
  EXPECT_EQ(none.next_token, 4);
}

// A two-step synthetic model over V tokens: target p(t1), p(t2 | t1); draft q(t1), q(t2 | t1),
// deliberately different. One check drafts a tree (3 proposals at the root drawn from q,
// the best 2 kept, each with 3 proposals of its own), verifies it, and — when the check
// stops after the first token — draws the second from the target (what the next check
// would do exactly). The joint distribution of (t1, t2) must be p(t1) p(t2 | t1).
struct TwoStep {
  static constexpr int V = 6;
  std::vector<float> p1, q1;
  std::vector<std::vector<float>> p2, q2;
  explicit TwoStep(uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto random_dist = [&](double sharpness) {
      std::vector<float> d(V);
      double sum = 0;
      for (auto& x : d) sum += (x = float(std::pow(double(rng() % 1000 + 1), sharpness)));
      for (auto& x : d) x = float(x / sum);
      return d;
    };
    p1 = random_dist(1.5);
    q1 = random_dist(1.0);
    for (int t = 0; t < V; ++t) {
      p2.push_back(random_dist(1.5));
      q2.push_back(random_dist(1.0));
    }
  }
};

double chi_square_two_step(const TwoStep& m, int trials, bool broken, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> counts(TwoStep::V * TwoStep::V, 0);
  SamplingVerifyOptions options;
  options.break_residual_for_testing = broken;
  for (int trial = 0; trial < trials; ++trial) {
    TokenTree tree(0);
    auto root_props = propose_children(tree, 0, m.q1, 3, true, rng);
    std::vector<int32_t> tokens;
    for (const auto& c : root_props) tokens.push_back(c.token);
    tree.set_proposals(0, tokens);
    std::vector<std::vector<float>> p = {m.p1}, q = {m.q1};
    for (const auto& c : best_candidates(root_props, 2)) {
      const int n = tree.add(0, c.token, c.log_prob);
      auto props = propose_children(tree, n, m.q2[size_t(c.token)], 3, true, rng);
      std::vector<int32_t> child_tokens;
      for (const auto& cc : props) child_tokens.push_back(cc.token);
      tree.set_proposals(n, child_tokens);
      p.push_back(m.p2[size_t(c.token)]);
      q.push_back(m.q2[size_t(c.token)]);
    }
    const Verdict v = verify_sampling(tree, p, q, rng, options);
    std::vector<int32_t> emitted;
    for (int32_t n : v.accepted) emitted.push_back(tree.node(n).token);
    emitted.push_back(v.next_token);
    if (emitted.size() == 1) {  // the next check would draw t2 from the target exactly
      const auto& d = m.p2[size_t(emitted[0])];
      double u = double(rng() >> 11) * 0x1.0p-53, cum = 0;
      int32_t t2 = TwoStep::V - 1;
      for (int t = 0; t < TwoStep::V; ++t) {
        cum += d[size_t(t)];
        if (u < cum) {
          t2 = t;
          break;
        }
      }
      emitted.push_back(t2);
    }
    counts[size_t(emitted[0] * TwoStep::V + emitted[1])]++;
  }
  double chi2 = 0;
  for (int a = 0; a < TwoStep::V; ++a) {
    for (int b = 0; b < TwoStep::V; ++b) {
      const double expected = double(trials) * m.p1[size_t(a)] * m.p2[size_t(a)][size_t(b)];
      const double d = double(counts[size_t(a * TwoStep::V + b)]) - expected;
      chi2 += d * d / expected;
    }
  }
  return chi2;
}

// 35 degrees of freedom: P(chi2 > 85) ~ 5e-6, so a correct verifier fails this by chance
// about once in 200 000 seeds; the seed is fixed, so the test is deterministic.
constexpr double kChiSquareLimit = 85.0;

TEST(VerifySampling, PreservesTheTargetDistribution) {
  for (uint64_t model_seed : {1, 2, 3}) {
    const TwoStep m(model_seed);
    const double chi2 = chi_square_two_step(m, 200000, false, 100 + model_seed);
    EXPECT_LT(chi2, kChiSquareLimit) << "model " << model_seed;
  }
}

// The test of the test: without the residual correction the output is biased and the same
// statistic catches it.
TEST(VerifySampling, TestDetectsABrokenRejectionStep) {
  for (uint64_t model_seed : {1, 2, 3}) {
    const TwoStep m(model_seed);
    const double chi2 = chi_square_two_step(m, 200000, true, 100 + model_seed);
    EXPECT_GT(chi2, 10 * kChiSquareLimit) << "model " << model_seed;
  }
}

TEST(DraftPolicy, Validation) {
  DraftPolicy p;
  EXPECT_TRUE(p.validate().is_ok());
  p.budget = 65;
  EXPECT_FALSE(p.validate().is_ok());
  p.budget = 0;
  EXPECT_NE(p.validate().message().find("1..64"), std::string::npos);
}

TEST(DraftPolicy, BudgetTextAndChains) {
  EXPECT_FALSE(parse_budget("auto")->has_value());
  EXPECT_EQ(**parse_budget("1"), 1);
  EXPECT_EQ(**parse_budget("64"), kMaxBudget);
  for (const char* bad : {"0", "65", "-1", "08", "1.5", "", "auto ", "999999999999"}) {
    auto b = parse_budget(bad);
    ASSERT_FALSE(b.is_ok()) << bad;
    EXPECT_NE(b.status().message().find("1 to 64"), std::string::npos) << b.status().message();
  }
  DraftPolicy chain;
  chain.shape = DraftShape::kChain;
  chain.set_budget(5);
  EXPECT_EQ(chain.max_depth, 5) << "a chain's depth is its budget";
  DraftPolicy tree;
  tree.set_budget(5);
  EXPECT_EQ(tree.max_depth, 8) << "a tree keeps its depth";
}

// grow_tree under a fake draft that proposes tokens 10*parent+1.. for each node, with
// cumulative log-probabilities that prefer lower tokens.
std::vector<Candidate> fake_level(TokenTree& t, const std::vector<int32_t>& frontier, int32_t k) {
  std::vector<Candidate> out;
  for (int32_t node : frontier) {
    std::vector<int32_t> tokens;
    for (int32_t j = 0; j < k; ++j) {
      tokens.push_back(10 * t.node(node).token + j + 1);
      out.push_back({node, tokens.back(), t.node(node).log_prob - 0.1 * (j + 1) - 0.01 * node});
    }
    t.set_proposals(node, tokens);
  }
  return out;
}

TEST(GrowTree, ChainTreeBudgetAndDepth) {
  DraftPolicy chain;
  chain.shape = DraftShape::kChain;
  chain.set_budget(4);
  TokenTree c(0);
  auto n = grow_tree(c, chain, 4, fake_level);
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(*n, 4);
  EXPECT_EQ(c.size(), 5);
  EXPECT_EQ(c.max_depth(), 4) << "one node per level";
  EXPECT_EQ(c.node(4).token, 1111);

  DraftPolicy tree;  // top_k 4, width 4, depth 8
  TokenTree t(0);
  n = grow_tree(t, tree, 10, fake_level);
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(*n, 10) << "the budget caps the nodes";
  EXPECT_EQ(t.size(), 11);
  EXPECT_EQ(t.children(0).size(), 4u) << "the first level keeps the width's best";
  EXPECT_EQ(t.max_depth(), 3);

  tree.max_depth = 1;
  TokenTree shallow(0);
  EXPECT_EQ(*grow_tree(shallow, tree, 64, fake_level), 4) << "depth 1: the root's children only";

  TokenTree failing(0);
  auto err = grow_tree(failing, tree, 4, [](TokenTree&, const std::vector<int32_t>&, int32_t) -> Result<std::vector<Candidate>> {
    return Status::error("draft pass failed");
  });
  EXPECT_FALSE(err.is_ok());
}

TEST(AcceptanceStats, Histogram) {
  AcceptanceStats s;
  s.record(2, 16);
  s.record(0, 16);
  s.record(2, 16);
  EXPECT_EQ(s.checks, 3);
  EXPECT_EQ(s.histogram, (std::vector<int64_t>{1, 0, 2}));
  EXPECT_DOUBLE_EQ(s.accepted_per_check(), 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.tokens_per_check(), 7.0 / 3.0);
  AcceptanceStats t;
  t.record(3, 8);
  s.add(t);
  EXPECT_EQ(s.checks, 4);
  EXPECT_EQ(s.accepted, 7);
  EXPECT_EQ(s.histogram, (std::vector<int64_t>{1, 0, 2, 1}));
}

}  // namespace
}  // namespace bitsplit::speculation
