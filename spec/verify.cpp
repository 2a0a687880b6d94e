// Verification of a drafted tree: greedy (follow the target's argmax) and lossless
// multi-draft rejection sampling.
#include <algorithm>
#include <cmath>

#include "bitsplit/spec.h"

namespace bitsplit::spec {
namespace {

double uniform(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

// Draws from an unnormalised non-negative distribution; -1 if it has no mass.
int32_t draw(const std::vector<double>& w, std::mt19937_64& rng) {
  double total = 0;
  for (double x : w) total += x;
  if (!(total > 0)) return -1;
  const double u = uniform(rng) * total;
  double cum = 0;
  int32_t last = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0) continue;
    cum += w[i];
    last = int32_t(i);
    if (u < cum) return last;
  }
  return last;
}

}  // namespace

Verdict verify_greedy(const TokenTree& tree, const std::vector<int32_t>& target_argmax) {
  BITSPLIT_CHECK(int32_t(target_argmax.size()) == tree.size());
  // run[n]: how many nodes the target accepts below n (the longest accepted continuation).
  // Children come after their parents, so one pass from the last node up fills it.
  std::vector<int32_t> run(size_t(tree.size()), 0), next(size_t(tree.size()), -1);
  for (int32_t n = tree.size() - 1; n >= 0; --n) {
    const int32_t want = target_argmax[size_t(n)];
    for (int32_t c : tree.children(n)) {
      if (tree.node(c).token == want && (next[size_t(n)] < 0 || run[size_t(c)] + 1 > run[size_t(n)])) {
        next[size_t(n)] = c;
        run[size_t(n)] = run[size_t(c)] + 1;
      }
    }
  }
  Verdict v;
  int32_t node = 0;
  for (; next[size_t(node)] >= 0; node = next[size_t(node)]) v.accepted.push_back(next[size_t(node)]);
  v.next_token = target_argmax[size_t(node)];
  return v;
}

int32_t accepted_depth(const TokenTree& tree, const std::vector<int32_t>& target_argmax,
                       const std::function<bool(int32_t node)>& in) {
  BITSPLIT_CHECK(int32_t(target_argmax.size()) == tree.size());
  int32_t depth = 0;
  for (int32_t node = 0;;) {
    int32_t found = -1;
    for (int32_t c : tree.children(node)) {
      if (in(c) && tree.node(c).token == target_argmax[size_t(node)]) {
        found = c;
        break;
      }
    }
    if (found < 0) return depth;
    node = found;
    ++depth;
  }
}

int32_t greedy_chain_depth(const TokenTree& tree, const std::vector<int32_t>& target_argmax,
                           const std::function<bool(int32_t node)>& in, int32_t* accepted) {
  BITSPLIT_CHECK(int32_t(target_argmax.size()) == tree.size());
  int32_t depth = 0;
  *accepted = 0;
  bool following = true;
  for (int32_t node = 0;;) {
    if (tree.proposals(node).empty()) return depth;
    const int32_t token = tree.proposals(node).front();
    int32_t child = -1;
    for (int32_t c : tree.children(node)) {
      if (in(c) && tree.node(c).token == token) {
        child = c;
        break;
      }
    }
    if (child < 0) return depth;
    ++depth;
    if (following && target_argmax[size_t(node)] == token) ++*accepted;
    else following = false;
    node = child;
  }
}

Verdict verify_sampling(const TokenTree& tree, const std::vector<std::vector<float>>& target_p,
                        const std::vector<std::vector<float>>& draft_q, std::mt19937_64& rng,
                        const SamplingVerifyOptions& options) {
  BITSPLIT_CHECK(int32_t(target_p.size()) == tree.size() && int32_t(draft_q.size()) == tree.size());
  Verdict v;
  int32_t node = 0;
  while (true) {
    const auto& p = target_p[size_t(node)];
    std::vector<double> r(p.begin(), p.end());
    const auto& proposals = tree.proposals(node);
    std::vector<double> q;
    if (!proposals.empty()) q.assign(draft_q[size_t(node)].begin(), draft_q[size_t(node)].end());
    int32_t accepted_token = -1;
    for (int32_t x : proposals) {
      double q_sum = 0;
      for (double w : q) q_sum += w;
      if (!(q_sum > 0) || !(q[size_t(x)] > 0)) break;  // q cannot have proposed x
      double r_sum = 0;
      for (double w : r) r_sum += w;
      const double qx = q[size_t(x)] / q_sum, rx = r[size_t(x)] / r_sum;
      if (uniform(rng) * qx < rx) {  // accept with probability min(1, r(x) / q(x))
        accepted_token = x;
        break;
      }
      if (!options.break_residual_for_testing) {
        // r <- max(0, r/|r| - q/|q|) (left unnormalised; draws normalise).
        for (size_t t = 0; t < r.size(); ++t) r[t] = std::max(0.0, r[t] / r_sum - q[t] / q_sum);
      }
      q[size_t(x)] = 0;  // the next proposal was drawn without x
    }
    if (accepted_token < 0) {
      v.next_token = draw(r, rng);
      if (v.next_token < 0) v.next_token = int32_t(std::max_element(p.begin(), p.end()) - p.begin());
      return v;
    }
    const int32_t child = tree.child_with_token(node, accepted_token);
    if (child < 0) {  // accepted, but the policy pruned it: it is the next token
      v.next_token = accepted_token;
      return v;
    }
    v.accepted.push_back(child);
    node = child;
  }
}

}  // namespace bitsplit::spec
