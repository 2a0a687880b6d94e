// Token trees, the drafting policy's building blocks (proposing and ranking children), context
// lookup, and the acceptance statistics.
#include <algorithm>
#include <cmath>

#include "bitsplit/spec.h"

namespace bitsplit::spec {

TokenTree::TokenTree(int32_t root_token) {
  nodes_.push_back({root_token, -1, 0, 0.0});
  children_.emplace_back();
  proposals_.emplace_back();
}

int32_t TokenTree::add(int32_t parent, int32_t token, double log_prob) {
  BITSPLIT_CHECK(parent >= 0 && parent < size(), "bad parent");
  const int32_t depth = nodes_[size_t(parent)].depth + 1;
  max_depth_ = std::max(max_depth_, depth);
  nodes_.push_back({token, parent, depth, log_prob});
  children_.emplace_back();
  proposals_.emplace_back();
  children_[size_t(parent)].push_back(size() - 1);
  return size() - 1;
}

int32_t TokenTree::child_with_token(int32_t i, int32_t token) const {
  for (int32_t c : children_[size_t(i)])
    if (nodes_[size_t(c)].token == token) return c;
  return -1;
}

std::vector<int32_t> TokenTree::path_to(int32_t i) const {
  std::vector<int32_t> path;
  for (; i >= 0; i = nodes_[size_t(i)].parent) path.push_back(i);
  std::reverse(path.begin(), path.end());
  return path;
}

bool TokenTree::is_ancestor(int32_t ancestor, int32_t node) const {
  for (; node >= 0; node = nodes_[size_t(node)].parent)
    if (node == ancestor) return true;
  return false;
}

Result<std::optional<int32_t>> parse_budget(const std::string& text) {
  if (text == "auto") return std::optional<int32_t>();
  const std::string range = "auto or a whole number from 1 to " + std::to_string(kMaxBudget);
  if (text.empty() || text.size() > 2 || text.find_first_not_of("0123456789") != std::string::npos) {
    return Status::error("the draft budget must be " + range + ", not '" + text + "'");
  }
  const int32_t n = std::stoi(text);
  if (n < 1 || n > kMaxBudget || std::to_string(n) != text) {
    return Status::error("the draft budget must be " + range + ", not '" + text + "'");
  }
  return std::optional<int32_t>(n);
}

std::vector<int32_t> DraftPolicy::level_sizes(int32_t b) const {
  std::vector<int32_t> sizes;
  int32_t frontier = 1, drafted = 0;
  for (int32_t depth = 0; depth < max_depth && drafted < b; ++depth) {
    // In 64 bits: a valid policy's top_k may be any positive int32, and frontier * top_k overflowed.
    const int32_t n = int32_t(std::min<int64_t>(
        {nodes_per_level(), int64_t(frontier) * children_per_node(), int64_t(b) - drafted}));
    sizes.push_back(n);
    drafted += n;
    frontier = n;
  }
  return sizes;
}

Status DraftPolicy::validate(bool allow_no_draft) const {
  if (budget < (allow_no_draft ? 0 : 1) || budget > kMaxBudget) {
    return Status::error("tree budget must be 1.." + std::to_string(kMaxBudget) + " (got " + std::to_string(budget) + ")");
  }
  if (budget > 0 && max_depth < 1) return Status::error("maximum draft depth must be at least 1");
  if (top_k < 1 || width < 1) return Status::error("top-k and width of the draft tree must be at least 1");
  return Status::ok();
}

Status LookupOptions::validate() const {
  if (max_tokens < 0 || max_tokens > kMaxBudget) {
    return Status::error("the lookup length must be 0.." + std::to_string(kMaxBudget) + " (got " +
                         std::to_string(max_tokens) + ")");
  }
  if (min_ngram < 1 || max_ngram < min_ngram) {
    return Status::error("lookup n-gram lengths must satisfy 1 <= min <= max (got " + std::to_string(min_ngram) +
                         ".." + std::to_string(max_ngram) + ")");
  }
  return Status::ok();
}

std::vector<int32_t> lookup_continuation(std::span<const int32_t> history, const LookupOptions& options, int32_t limit) {
  limit = std::min(limit, options.max_tokens);
  const int64_t size = int64_t(history.size());
  if (limit <= 0) return {};
  for (int64_t n = std::min<int64_t>(options.max_ngram, size - 1); n >= options.min_ngram; --n) {
    const int32_t* suffix = history.data() + (size - n);
    // The most recent earlier occurrence (start < size - n): recent text predicts best.
    for (int64_t start = size - n - 1; start >= 0; --start) {
      if (!std::equal(suffix, suffix + n, history.data() + start)) continue;
      const int64_t from = start + n, to = std::min(size, from + limit);
      return std::vector<int32_t>(history.begin() + from, history.begin() + to);
    }
  }
  return {};
}

std::vector<Candidate> propose_children(const TokenTree& tree, int32_t parent, std::span<const float> q, int32_t k,
                                        bool sample, std::mt19937_64& rng) {
  // Keys: log q (greedy) or log q + Gumbel noise (sampling without replacement); the k
  // largest keys in order are the proposals.
  std::vector<std::pair<double, int32_t>> keys;
  keys.reserve(q.size());
  for (size_t t = 0; t < q.size(); ++t) {
    if (!(q[t] > 0.0f)) continue;
    double key = std::log(double(q[t]));
    if (sample) {
      const double u = (double(rng() >> 11) + 0.5) * 0x1.0p-53;  // in (0, 1)
      key += -std::log(-std::log(u));
    }
    keys.push_back({key, int32_t(t)});
  }
  const size_t n = std::min(keys.size(), size_t(std::max(k, 0)));
  std::partial_sort(keys.begin(), keys.begin() + n, keys.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  std::vector<Candidate> out;
  const double base = tree.node(parent).log_prob;
  for (size_t i = 0; i < n; ++i) out.push_back({parent, keys[i].second, base + std::log(double(q[size_t(keys[i].second)]))});
  return out;
}

std::vector<Candidate> best_candidates(std::vector<Candidate> candidates, size_t limit) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.log_prob > b.log_prob; });
  if (candidates.size() > limit) candidates.resize(limit);
  return candidates;
}

Result<int32_t> grow_tree(TokenTree& tree, const DraftPolicy& policy, int32_t budget, const LevelExpander& expand) {
  std::vector<int32_t> frontier = {0};
  int32_t drafted = 0;
  for (int32_t depth = 0; depth < policy.max_depth && drafted < budget && !frontier.empty(); ++depth) {
    BITSPLIT_ASSIGN_OR_RETURN(std::vector<Candidate> candidates, expand(tree, frontier, policy.children_per_node()));
    const auto chosen =
        best_candidates(std::move(candidates), size_t(std::min(policy.nodes_per_level(), budget - drafted)));
    frontier.clear();
    for (const Candidate& c : chosen) frontier.push_back(tree.add(c.parent, c.token, c.log_prob));
    drafted += int32_t(chosen.size());
  }
  return drafted;
}

void AcceptanceStats::record(int32_t accepted_in_check, int32_t drafted_in_check, int32_t tree_depth,
                             int32_t lookup_in_check, int32_t lookup_accepted_in_check) {
  ++checks;
  accepted += accepted_in_check;
  emitted += accepted_in_check + 1;
  drafted += drafted_in_check;
  lookup_drafted += lookup_in_check;
  lookup_accepted += lookup_accepted_in_check;
  if (histogram.size() <= size_t(accepted_in_check)) histogram.resize(size_t(accepted_in_check) + 1, 0);
  ++histogram[size_t(accepted_in_check)];
  if (tree_depth < 0) return;
  BITSPLIT_CHECK(accepted_in_check <= tree_depth, "accepted deeper than the tree");
  if (drafted_at_depth.size() < size_t(tree_depth)) {
    drafted_at_depth.resize(size_t(tree_depth), 0);
    accepted_at_depth.resize(size_t(tree_depth), 0);
  }
  for (int32_t d = 0; d < tree_depth; ++d) ++drafted_at_depth[size_t(d)];
  for (int32_t d = 0; d < accepted_in_check; ++d) ++accepted_at_depth[size_t(d)];
}

void AcceptanceStats::add(const AcceptanceStats& o) {
  checks += o.checks;
  accepted += o.accepted;
  emitted += o.emitted;
  drafted += o.drafted;
  lookup_drafted += o.lookup_drafted;
  lookup_accepted += o.lookup_accepted;
  draft_seconds += o.draft_seconds;
  verify_seconds += o.verify_seconds;
  auto merge = [](std::vector<int64_t>& into, const std::vector<int64_t>& from) {
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (size_t k = 0; k < from.size(); ++k) into[k] += from[k];
  };
  merge(histogram, o.histogram);
  merge(accepted_at_depth, o.accepted_at_depth);
  merge(drafted_at_depth, o.drafted_at_depth);
}

}  // namespace bitsplit::spec
