// speculation/: token trees, drafting policies (which nodes to add) and the level-by-level growth
// of a tree under one, verification of a drafted tree against the target's distributions
// (greedy and lossless sampling), and the budget controller. Knows nothing of models: the
// decoding layer runs the forward passes and hands over distributions.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit::speculation {

// Node 0 is the root: the last committed token, whose target K/V is not in the cache yet.
// Every other node is a drafted token. Nodes are added in breadth-first order, so a
// parent's index is always smaller than its children's, and depth never decreases.
struct TreeNode {
  int32_t token = -1;
  int32_t parent = -1;
  int32_t depth = 0;
  double log_prob = 0.0;  // cumulative draft log-probability from the root
};

class TokenTree {
 public:
  explicit TokenTree(int32_t root_token);
  int32_t add(int32_t parent, int32_t token, double log_prob);
  // The tokens the draft proposed at node i, in the order they were drawn, whether or not
  // the policy kept them as children. The sampling verifier tries them in this order.
  void set_proposals(int32_t i, std::vector<int32_t> tokens) { proposals_[size_t(i)] = std::move(tokens); }
  const std::vector<int32_t>& proposals(int32_t i) const { return proposals_[size_t(i)]; }
  // The child of i carrying `token`, or -1.
  int32_t child_with_token(int32_t i, int32_t token) const;
  int32_t size() const { return int32_t(nodes_.size()); }
  const TreeNode& node(int32_t i) const { return nodes_[size_t(i)]; }
  const std::vector<int32_t>& children(int32_t i) const { return children_[size_t(i)]; }
  int32_t max_depth() const { return nodes_.back().depth; }
  // Nodes from the root down to i, root first.
  std::vector<int32_t> path_to(int32_t i) const;
  // Whether node `ancestor` lies on the path from the root to `node` (a node is its own).
  bool is_ancestor(int32_t ancestor, int32_t node) const;

 private:
  std::vector<TreeNode> nodes_;
  std::vector<std::vector<int32_t>> children_;
  std::vector<std::vector<int32_t>> proposals_;
};

enum class DraftShape {
  kChain,  // one child per node: k tokens in a row
  kTree,   // dynamic tree: per depth level keep the `width` best children (by cumulative
           // draft probability) among the top_k children of every frontier node
};

// The most nodes one check drafts: the upper bound of every budget, and the rows of the largest
// draft batch (a device draft sizes its scratch for it).
inline constexpr int32_t kMaxBudget = 64;

// A budget as users write it: "auto" (nullopt: chosen online by the BudgetController) or a
// whole number 1..kMaxBudget. The error names the text and the range.
Result<std::optional<int32_t>> parse_budget(const std::string& text);

struct DraftPolicy {
  DraftShape shape = DraftShape::kTree;
  int32_t budget = 16;    // drafted nodes per check (the root not counted), 1..kMaxBudget
  int32_t max_depth = 8;  // levels below the root
  int32_t top_k = 4;      // children considered per node (tree)
  int32_t width = 4;      // nodes kept per level (tree)
  // Sets the budget; a chain's depth is its budget.
  void set_budget(int32_t b) {
    budget = b;
    if (shape == DraftShape::kChain) max_depth = b;
  }
  int32_t children_per_node() const { return shape == DraftShape::kChain ? 1 : top_k; }
  int32_t nodes_per_level() const { return shape == DraftShape::kChain ? 1 : width; }
  Status validate() const;
};

// A candidate child proposed by the draft distribution of its parent.
struct Candidate {
  int32_t parent;
  int32_t token;
  double log_prob;  // cumulative
};

// Children of `parent` from its draft distribution q (after the sampling transforms): for
// greedy decoding the top_k tokens of q; when sampling, top_k tokens drawn from q without
// replacement (Gumbel top-k), so the verifier's rejection rule stays exact.
std::vector<Candidate> propose_children(const TokenTree& tree, int32_t parent, std::span<const float> q, int32_t k,
                                        bool sample, std::mt19937_64& rng);

// Picks the next level from candidates: the `limit` best by cumulative probability (ties by
// order of appearance), in that order.
std::vector<Candidate> best_candidates(std::vector<Candidate> candidates, size_t limit);

// Expands one level: for every node of `frontier` (in order) it records the node's proposals
// (TokenTree::set_proposals) and returns their candidates, at most k per node.
using LevelExpander =
    std::function<Result<std::vector<Candidate>>(TokenTree& tree, const std::vector<int32_t>& frontier, int32_t k)>;

// Grows `tree` from its root level by level under `policy`, adding at most `budget` nodes: each
// level keeps the nodes_per_level() best candidates (best_candidates) of the expanded frontier,
// which become the next frontier, until the depth, the budget or the candidates run out.
// Returns the number of nodes added.
Result<int32_t> grow_tree(TokenTree& tree, const DraftPolicy& policy, int32_t budget, const LevelExpander& expand);

struct Verdict {
  std::vector<int32_t> accepted;  // accepted drafted nodes, root's child first (root excluded)
  int32_t next_token = -1;        // the target's own token after the accepted path (bonus)
};

// Greedy: follow the target's argmax from the root while a child carries it.
Verdict verify_greedy(const TokenTree& tree, const std::vector<int32_t>& target_argmax);

struct SamplingVerifyOptions {
  // Test-only: drop the residual correction (continue with p instead of max(0, p - q)), which
  // makes the output distribution wrong. Lets the statistical test show it can fail.
  bool break_residual_for_testing = false;
};

// Lossless sampling verification: at each node, try the draft's proposals in the order they
// were drawn (without replacement) from q; proposal x, drawn from q_i (q with the earlier
// proposals removed), is accepted with probability min(1, r(x) / q_i(x)), where r starts as
// the target's p at the node; on rejection r <- normalise(max(0, r - q_i)) and q_{i+1} <-
// q_i without x. An accepted proposal that is a child in the tree continues the walk from
// that child; one the policy pruned is emitted as the next token. When the proposals run
// out, the next token is drawn from r. Each step emits exactly a sample of r, so the output
// is distributed as p. `target_p[n]` and `draft_q[n]` are the distributions (after the same
// sampling transforms) at node n; draft_q may be empty for nodes without proposals.
Verdict verify_sampling(const TokenTree& tree, const std::vector<std::vector<float>>& target_p,
                        const std::vector<std::vector<float>>& draft_q, std::mt19937_64& rng,
                        const SamplingVerifyOptions& options = {});

// Chooses the tree budget online: the budget that maximises measured tokens per second
// (accepted + bonus tokens over draft + verify time). Each candidate is first tried for a
// few checks; afterwards the best is used, and its neighbours are re-measured now and then
// so the choice follows the text. Statistics decay, so old measurements fade.
class BudgetController {
 public:
  explicit BudgetController(std::vector<int32_t> candidates = {1, 2, 4, 8, 16, 32}, int32_t warmup_checks = 3,
                            int32_t probe_every = 32);
  int32_t next();
  void record(int32_t budget, int32_t tokens, double seconds);
  // Current best by tokens/s (the largest measured rate), or the first candidate.
  int32_t best() const;
  double rate(int32_t budget) const;  // tokens/s estimate, 0 if unmeasured

 private:
  struct Estimate {
    double tokens = 0, seconds = 0;
    int32_t checks = 0;
  };
  size_t index_of(int32_t budget) const;
  std::vector<int32_t> candidates_;
  std::vector<Estimate> estimates_;
  int32_t warmup_, probe_every_;
  int64_t checks_ = 0;
};

// Per-run acceptance statistics.
struct AcceptanceStats {
  int64_t checks = 0;
  int64_t accepted = 0;                // drafted tokens accepted
  int64_t emitted = 0;                 // accepted + bonus tokens
  int64_t drafted = 0;                 // nodes drafted
  std::vector<int64_t> histogram;      // histogram[k]: checks that accepted k drafted tokens
  double draft_seconds = 0, verify_seconds = 0;
  void record(int32_t accepted_in_check, int32_t drafted_in_check);
  void add(const AcceptanceStats& other);  // merges another run's statistics
  double accepted_per_check() const { return checks ? double(accepted) / double(checks) : 0.0; }
  double tokens_per_check() const { return checks ? double(emitted) / double(checks) : 0.0; }
};

}  // namespace bitsplit::speculation
