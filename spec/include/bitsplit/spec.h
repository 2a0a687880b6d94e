// spec/: token trees, drafting policies (which nodes to add) and the level-by-level growth
// of a tree under one, context lookup (drafts from the text itself), verification of a drafted
// tree against the target's distributions (greedy and lossless sampling), and the budget
// controller. Knows nothing of models: the decoding layer runs the forward passes and hands over
// distributions.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit::spec {

// Node 0 is the root: the last committed token, whose target K/V is not in the cache yet.
// Every other node is a drafted token. A parent's index is always smaller than its children's.
// The model draft adds its nodes level by level (grow_tree); a context-lookup chain is appended
// after them, so depth need not be monotone in the index.
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
  // The first child of i carrying `token`, or -1.
  int32_t child_with_token(int32_t i, int32_t token) const;
  int32_t size() const { return int32_t(nodes_.size()); }
  const TreeNode& node(int32_t i) const { return nodes_[size_t(i)]; }
  const std::vector<int32_t>& children(int32_t i) const { return children_[size_t(i)]; }
  int32_t max_depth() const { return max_depth_; }
  // Nodes from the root down to i, root first.
  std::vector<int32_t> path_to(int32_t i) const;
  // Whether node `ancestor` lies on the path from the root to `node` (a node is its own).
  bool is_ancestor(int32_t ancestor, int32_t node) const;

 private:
  std::vector<TreeNode> nodes_;
  std::vector<std::vector<int32_t>> children_;
  std::vector<std::vector<int32_t>> proposals_;
  int32_t max_depth_ = 0;
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
  // Nodes per level grow_tree adds under `budget` when the draft always has enough candidates:
  // level 1 (the root's children) first. A tree of budget b is then the first levels of any
  // larger budget's tree, which the budget controller relies on.
  std::vector<int32_t> level_sizes(int32_t budget) const;
  // Budget 0 (no draft: the check is one plain target step) is valid only with allow_no_draft,
  // which only the budget controller's own choices use; a user's budget is 1..kMaxBudget.
  Status validate(bool allow_no_draft = false) const;
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

// Greedy: follow the target's argmax from the root while a child carries it. When several
// children of a node carry the target's token (a context-lookup chain and the model draft may
// propose the same token), follow the one whose subtree the target accepts furthest (the longest
// accepted continuation; on equal length, the child added first). Every path through the tree
// that agrees with the target's argmax is a correct continuation, so any choice is exact; the
// longest commits the most tokens.
Verdict verify_greedy(const TokenTree& tree, const std::vector<int32_t>& target_argmax);

// How far the target's argmax follows the tree from the root through the nodes `in` accepts
// only (a sub-tree closed under parents: the model draft's nodes, or one lookup chain): the
// depth the walk reaches. What that part of the draft would have been accepted alone.
int32_t accepted_depth(const TokenTree& tree, const std::vector<int32_t>& target_argmax,
                       const std::function<bool(int32_t node)>& in);

// The draft's greedy chain inside a tree: from the root, each node's first proposal (what a
// chain draft takes) while the tree holds it among the nodes `in` accepts. Returns how deep that
// chain lies in the tree and, in *accepted, how far the target's argmax follows it.
int32_t greedy_chain_depth(const TokenTree& tree, const std::vector<int32_t>& target_argmax,
                           const std::function<bool(int32_t node)>& in, int32_t* accepted);

// ---- Context lookup (prompt lookup decoding): drafts that cost no model pass ----

struct LookupOptions {
  int32_t max_tokens = 0;  // the longest continuation proposed (0: lookup off)
  int32_t max_ngram = 3;   // suffix lengths tried, longest first: max_ngram .. min_ngram
  int32_t min_ngram = 1;
  Status validate() const;
};

// The tokens that followed the most recent earlier occurrence of the longest suffix of
// `history` (max_ngram down to min_ngram tokens) that occurred before, at most `limit` of them;
// empty when no suffix recurs. The caller puts them under the tree's root (the last token of
// `history`) as a chain.
std::vector<int32_t> lookup_continuation(std::span<const int32_t> history, const LookupOptions& options, int32_t limit);

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

// One setting of a check's draft: the model draft's shape and budget and whether a context-lookup
// chain joins the tree. Budget 0 without lookup is plain decoding (the check drafts nothing and
// the target's one-row pass emits one token); budget 0 with lookup drafts the lookup chain only.
struct DraftSetting {
  DraftShape shape = DraftShape::kChain;  // ignored when budget is 0
  int32_t budget = 0;                     // model-drafted nodes
  bool lookup = false;
  bool plain() const { return budget == 0 && !lookup; }
  bool operator==(const DraftSetting& o) const {
    return budget == o.budget && lookup == o.lookup && (budget == 0 || shape == o.shape);
  }
  std::string name() const;  // "plain", "lookup", "chain-4", "tree-16+lookup"
};

// What one check did, as the budget controller learns from it. Depths count levels below the
// root; "accepted" depths are how far the target's argmax (or, sampling, the verifier) followed
// that part of the tree alone (accepted_depth), whatever the verdict chose.
struct CheckRecord {
  DraftSetting setting;
  int32_t model_depth = 0;      // complete levels the model draft grew (0: none)
  int32_t model_accepted = 0;   // how deep the model draft's own nodes were accepted
  // The context lookup's chain, proposed on every check while lookup is on, in the tree or not:
  // its length, and how far the target accepted it. Not in the tree, that is read off the emitted
  // tokens, which for greedy decoding are the target's own: a chain that matches all of them may
  // have gone on matching (censored: `lookup_accepted` is then a lower bound).
  int32_t lookup_nodes = 0;     // lookup-chain nodes in the tree
  int32_t lookup_proposed = 0;  // the chain's length (-1: lookup off, nothing proposed)
  int32_t lookup_accepted = 0;
  bool lookup_censored = false;
  // A tree holds the chain a chain budget would have drafted (each node's first proposal) as far
  // as `chain_depth` (greedy_chain_depth); `chain_accepted`: how far the target accepted it.
  int32_t chain_depth = 0;
  int32_t chain_accepted = 0;
  int32_t verify_rows = 1;      // rows of the verify pass: the tree's nodes, root included
  double draft_seconds = 0;     // drafting, lookup included
  double verify_seconds = 0;
};

struct ControllerOptions {
  bool chain = true;     // shapes to choose from (at least one)
  bool tree = true;
  bool lookup = false;   // lookup may join the tree (greedy decoding with lookup on)
  int32_t lookup_tokens = 8;  // its longest chain
  int32_t warmup = 2;         // plain checks first: the cost every other setting is weighed against
  int32_t probe_every = 16;   // then every probe_every-th check tries a setting other than the best
  double decay = 0.9;         // per update: the last ~10 observations of a statistic dominate
};

// Chooses each check's draft setting online for the most tokens per second, plain decoding
// included. It learns from every check (CheckRecord), all measured:
//  - acceptance per position, per shape (as vLLM's num_accepted_tokens_per_pos): at each depth d,
//    how often the target accepted depth d when it had accepted depth d - 1 and the tree went that
//    deep. A tree of budget b is the first levels of any larger budget's tree, so every check
//    teaches every budget of its shape, and a tree holding the draft's greedy chain teaches the
//    chain budgets too. Each depth's rate is shrunk toward a prior (depth 1: a coin flip; deeper:
//    the rate pooled over the deeper depths, itself shrunk toward depth 1's), so one unlucky
//    check cannot condemn a budget;
//  - the lookup chain's acceptance per position (from every check: when it is not in the tree,
//    from the tokens the check emitted), its length, and what it added on top of each budget
//    (before that is measured: where it would go deeper than the model draft, the two taken as
//    independent);
//  - verify seconds per number of rows, and draft seconds per setting, each measured mean shrunk
//    toward a line fitted over all checks (verify: fixed + per row; draft: per pass + per row,
//    both shapes), so one slow check does not condemn a setting and an untried one has a cost;
// times are kept relative to the machine's current speed (a load factor every check updates), so
// a setting last measured while the machine was busier is not held against it.
// A setting's rate is expected tokens per check over expected seconds per check. After a plain
// warm-up the best estimated rate runs, settings not run yet included; a shape's budgets are
// climbed one rung at a time (a budget is a candidate once the one before it, or a deeper one,
// ran), so a weak draft costs a few cheap checks, not a tour of every budget. Every probe_every-th check tries, in turn, the next deeper budget of the best's
// shape and the best setting of another family (plain, lookup, chain, tree, the families in turn),
// so the choice follows the text and the machine; while the best holds, probes grow rarer (up to
// 4 x probe_every). Statistics decay, so old measurements fade.
//
// Sampling: the setting of a check is fixed from past checks and timings before any of its
// random draws, and every setting's check emits tokens distributed exactly as the target's, so the
// output keeps its distribution whatever the controller picks (which then depends on timing).
class BudgetController {
 public:
  BudgetController(const DraftPolicy& policy, ControllerOptions options = {});
  DraftSetting next();
  void record(const CheckRecord& check);
  // The best by estimated rate among settings measured in some form (plain until anything else is).
  DraftSetting best() const;
  // Estimated tokens/s of a candidate at the machine's current speed; 0 while nothing of it has
  // been measured (its shape never ran; lookup never ran).
  double rate(const DraftSetting& setting) const;
  // Estimated accepted drafted tokens plus the bonus token per check of a candidate.
  double tokens_per_check(const DraftSetting& setting) const;
  const std::vector<DraftSetting>& candidates() const { return candidates_; }
  // Levels below the root the model draft of `setting` grows (0 for plain and lookup alone).
  int32_t depth(const DraftSetting& setting) const;
  // Whether `other` chooses among the same settings with the same schedule, so that this
  // controller's statistics can stand in for it: a generation then continues what earlier
  // generations on the model learned (decode::ControllerMemory) instead of starting over.
  bool chooses_like(const BudgetController& other) const;
  // Checks recorded so far (0 for a new controller).
  int64_t checks_recorded() const { return recorded_; }

 private:
  struct Mean {  // decayed mean
    double sum = 0, weight = 0;
    void add(double x, double decay) {
      sum = sum * decay + x;
      weight = weight * decay + 1;
    }
    bool known() const { return weight > 0; }
    double value() const { return weight > 0 ? sum / weight : 0.0; }
  };
  static constexpr int32_t kDepths = 16;  // the deepest rung
  struct Shape {
    Mean accepted[kDepths + 1];  // [d]: accepted at depth d, of checks that reached it
    int32_t deepest = 0;         // the deepest depth observed (run, or seen inside a tree)
    bool ran = false;
  };
  // A model-draft setting on a shape's ladder (lookup or not shares these statistics).
  struct Rung {
    DraftShape shape;
    int32_t budget, depth;
    int32_t draft_rows;  // rows of all its draft passes (a level drafts below the one before)
    Mean lookup_gain;    // tokens the lookup chain added on top of this budget's accepted ones
    Mean draft_seconds;  // measured on checks of this rung
  };
  struct Value {
    double rate = -1;  // expected tokens/s in the statistics' time unit; -1: not eligible
    double tokens = 0, seconds = 0;
    bool known = false;
  };
  // seconds ~ a * x + b * y with a, b >= 0, fitted by decayed least squares: draft seconds over
  // (passes, rows), verify seconds over (1, rows).
  struct Fit {
    double xx = 0, xy = 0, yy = 0, xs = 0, ys = 0;
    void add(double x, double y, double seconds, double decay);
    bool known() const { return xx > 0; }
    double predict(double x, double y) const;
  };
  Value value(const DraftSetting& setting) const;
  int32_t rung_of(const DraftSetting& setting) const;  // index into rungs_, -1 for budget 0
  // P(accepted to depth d), d = 1..depth, of a draft with these per-depth statistics.
  static std::vector<double> reach(const Shape& shape, int32_t depth);
  double verify_seconds(double rows) const;
  double draft_seconds(const Rung& rung) const;
  DraftSetting probe();

  DraftPolicy policy_;
  ControllerOptions options_;
  std::vector<Rung> rungs_;  // per shape in ascending budget, chain rungs first
  Shape shapes_[2];          // chain, tree
  std::vector<DraftSetting> candidates_;
  std::vector<Mean> verify_;  // index: rows
  Fit draft_fit_, verify_fit_;
  Mean plain_draft_, lookup_draft_;  // draft seconds of checks without a model draft
  Shape lookup_;        // the lookup chain's acceptance per position
  Mean lookup_nodes_;   // its length
  int64_t plain_checks_ = 0, checks_ = 0, probes_ = 0;
  int probe_family_ = 0;  // the family of the last probe of another family
  int64_t interval_ = 0, next_probe_ = 0;  // probes: the gap now, and the check of the next one
  double load_ = 1.0;  // the machine's slowdown now against the time unit the statistics are kept in
  DraftSetting last_best_;
  int64_t recorded_ = 0;
};

// Per-run acceptance statistics.
struct AcceptanceStats {
  int64_t checks = 0;
  int64_t accepted = 0;                // drafted tokens accepted
  int64_t emitted = 0;                 // accepted + bonus tokens
  int64_t drafted = 0;                 // nodes drafted (model and lookup)
  std::vector<int64_t> histogram;      // histogram[k]: checks that accepted k drafted tokens
  // Per position (as vLLM's num_accepted_tokens_per_pos), index d - 1 for depth d: checks whose
  // accepted path reached depth d, and checks whose tree had a node at depth d. Their ratio is
  // the acceptance rate at that depth.
  std::vector<int64_t> accepted_at_depth, drafted_at_depth;
  // The context lookup's share: its nodes, and accepted tokens that came from its chain.
  int64_t lookup_drafted = 0, lookup_accepted = 0;
  double draft_seconds = 0, verify_seconds = 0;
  // One check: `accepted_in_check` of `drafted_in_check` nodes accepted, the tree `tree_depth`
  // levels deep (-1: unknown, no per-position counts), `lookup_accepted_in_check` of the accepted
  // tokens from the lookup chain of `lookup_in_check` nodes.
  void record(int32_t accepted_in_check, int32_t drafted_in_check, int32_t tree_depth = -1,
              int32_t lookup_in_check = 0, int32_t lookup_accepted_in_check = 0);
  void add(const AcceptanceStats& other);  // merges another run's statistics
  double accepted_per_check() const { return checks ? double(accepted) / double(checks) : 0.0; }
  double tokens_per_check() const { return checks ? double(emitted) / double(checks) : 0.0; }
};

}  // namespace bitsplit::spec
