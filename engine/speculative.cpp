// The speculative decoding loop over a draft and a target model sharing one KV cache.
#include "bitsplit/speculative.h"

#include "bitsplit/device_draft.h"

#include <chrono>
#include <cmath>
#include <optional>

namespace bitsplit {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A batch over tree nodes `nodes` (scratch slot of node i = committed + i): each sees the
// committed prefix and its own ancestors.
Batch tree_batch(const spec::TokenTree& tree, const std::vector<int32_t>& nodes, int32_t committed, bool logits) {
  Batch b;
  b.kv_len = committed + tree.size();
  b.mask.assign(nodes.size() * size_t(b.kv_len), 0);
  for (size_t r = 0; r < nodes.size(); ++r) {
    const int32_t n = nodes[r];
    b.tokens.push_back(tree.node(n).token);
    b.positions.push_back(committed + tree.node(n).depth);
    b.slots.push_back(committed + n);
    b.want_logits.push_back(logits ? 1 : 0);
    uint8_t* row = b.mask.data() + r * size_t(b.kv_len);
    std::fill(row, row + committed, 1);
    for (int32_t a = n; a >= 0; a = tree.node(a).parent) row[committed + a] = 1;
  }
  return b;
}

std::vector<float> softmax(std::span<const float> logits) {
  std::vector<float> p(logits.begin(), logits.end());
  cpu::softmax_f32(p.data(), int64_t(p.size()));
  return p;
}

// Tokens of the committed history plus the path to `node` (for penalties in the sampler).
// Only the repetition penalty reads it, so without one nothing is copied.
std::vector<int32_t> history_at(const std::vector<int32_t>& history, const spec::TokenTree& tree, int32_t node,
                                const Sampler& sampler) {
  if (sampler.params().repeat_penalty == 1.0f || sampler.params().repeat_last_n == 0) return {};
  std::vector<int32_t> h = history;
  const auto path = tree.path_to(node);
  for (size_t i = 1; i < path.size(); ++i) h.push_back(tree.node(path[i]).token);  // root is already in history
  return h;
}

}  // namespace

Result<SpeculativeResult> generate_speculative(const Model& target, const Model& draft, std::span<const int32_t> prompt,
                                               const SpeculativeOptions& options, Sampler& sampler,
                                               const TokenCallback& on_token, KvCache* external_cache) {
  const ModelConfig& c = target.config();
  BITSPLIT_RETURN_IF_ERROR(options.policy.validate());
  if (draft.config().n_vocab != c.n_vocab || draft.config().n_layers != c.n_layers ||
      draft.config().kv_dim() != c.kv_dim()) {
    return Status::error("the draft and target models have different shapes");
  }
  if (prompt.empty()) return Status::error("the prompt is empty (no tokens to start from)");
  if (options.n_predict < 0) return Status::error("the number of tokens to generate must be >= 0");
  const int64_t needed = int64_t(prompt.size()) + options.n_predict;
  if (needed > c.n_ctx_train) {
    return Status::error("prompt (" + std::to_string(prompt.size()) + " tokens) + " + std::to_string(options.n_predict) +
                         " new tokens exceed the model's context length of " + std::to_string(c.n_ctx_train) + " tokens");
  }
  spec::DraftPolicy policy = options.policy;
  spec::BudgetController controller;
  const bool greedy = sampler.params().greedy();
  std::mt19937_64 rng(sampler.params().seed ^ 0x9e3779b97f4a7c15ull);
  const int64_t slots = needed + (options.auto_budget ? 64 : policy.budget) + 1;
  std::optional<KvCache> own_cache;
  if (external_cache) {
    if (external_cache->n_slots() < slots || external_cache->kv_dim() != c.kv_dim()) {
      return Status::error("the KV cache given to speculative decoding is too small for this run");
    }
  } else {
    own_cache.emplace(c, slots);
  }
  KvCache& cache = external_cache ? *external_cache : *own_cache;
  SpeculativeResult result;
  GenerationStats& stats = result.generation;
  spec::AcceptanceStats& acc = result.acceptance;
  stats.prompt_tokens = int64_t(prompt.size());
  const Variant* draft_variant = options.base_draft ? nullptr : options.variant;

  // The whole draft on a device, when the draft tier offers it.
  std::shared_ptr<DeviceDraft> device;
  DraftTier::Transfers device_start;
  if (!options.device_draft) {
    result.draft_pass = "host (device draft switched off)";
  } else if (!draft.has_planes()) {
    result.draft_pass = "host (the draft has no bit-split planes)";
  } else {
    auto d = draft.draft_tier().make_device_draft(draft, slots, draft_variant);
    if (d) {
      device = *d;
      result.draft_pass = "device (" + device->name() + ")";
      device_start = device->transfers();  // a device draft may be reused across generations
    } else {
      result.draft_pass = "host (" + d.status().message() + ")";
    }
  }

  // Prefill all but the last prompt token; the last becomes the first root.
  auto t0 = Clock::now();
  const size_t prefix = prompt.size() - 1;
  for (size_t start = 0; start < prefix; start += size_t(options.prefill_chunk)) {
    const size_t n = std::min(prefix - start, size_t(options.prefill_chunk));
    Batch b = Batch::causal(prompt.subspan(start, n), int32_t(start));
    b.want_logits.assign(n, 0);
    BITSPLIT_RETURN_IF_ERROR(forward_reference(target, cache, b, nullptr, Tier::kTarget, options.variant));
  }
  if (device) BITSPLIT_RETURN_IF_ERROR(device->sync_cache(cache, 0, int64_t(prefix)));
  stats.prompt_seconds = seconds_since(t0);

  std::vector<int32_t> history(prompt.begin(), prompt.end());
  int32_t committed = int32_t(prefix);
  int32_t root = prompt.back();
  const auto t1 = Clock::now();
  bool done = options.n_predict == 0;
  result.checks_per_budget.assign(65, 0);
  while (!done) {
    if (options.auto_budget) {
      policy.budget = controller.next();
      if (policy.shape == spec::DraftShape::kChain) policy.max_depth = policy.budget;
    }
    // Draft: expand level by level with one batched draft pass per level.
    const auto td = Clock::now();
    spec::TokenTree tree(root);
    std::vector<std::vector<float>> draft_q(1);
    std::vector<int32_t> frontier = {0};
    const int32_t budget = std::min<int32_t>(policy.budget, int32_t(needed - int64_t(history.size())));
    int32_t drafted = 0;
    for (int32_t depth = 0; depth < policy.max_depth && drafted < budget && !frontier.empty(); ++depth) {
      const int32_t k = policy.shape == spec::DraftShape::kChain ? 1 : policy.top_k;
      const Batch level = tree_batch(tree, frontier, committed, true);
      std::vector<spec::Candidate> candidates;
      std::vector<float> logits;
      if (device && greedy && k <= DeviceDraft::kMaxTopK) {
        // Greedy needs only each row's top k, computed on the device.
        DraftTopK top;
        BITSPLIT_RETURN_IF_ERROR(device->forward(level, k, top, nullptr));
        for (size_t r = 0; r < frontier.size(); ++r) {
          const int32_t node = frontier[r];
          const double base = tree.node(node).log_prob;
          std::vector<int32_t> tokens;
          for (int32_t j = 0; j < k; ++j) {
            const float lp = top.log_probs[r * size_t(k) + size_t(j)];
            if (!(std::exp(lp) > 0.0f)) break;  // as propose_children: only tokens with q > 0
            tokens.push_back(top.tokens[r * size_t(k) + size_t(j)]);
            candidates.push_back({node, tokens.back(), base + double(lp)});
          }
          tree.set_proposals(node, std::move(tokens));
        }
      } else if (device) {
        DraftTopK none;
        BITSPLIT_RETURN_IF_ERROR(device->forward(level, 0, none, &logits));
      } else {
        BITSPLIT_ASSIGN_OR_RETURN(logits, forward_reference(draft, cache, level, nullptr, Tier::kDraft, draft_variant));
      }
      for (size_t r = 0; r < frontier.size() && !logits.empty(); ++r) {
        const std::span<const float> l(logits.data() + r * size_t(c.n_vocab), size_t(c.n_vocab));
        const int32_t node = frontier[r];
        // The proposal distribution: the sampler's own (so acceptance ratios are exact) or,
        // for greedy decoding, the plain softmax (only the ranking matters there).
        auto q = greedy ? softmax(l) : sampler.distribution(l, history_at(history, tree, node, sampler));
        auto proposed = spec::propose_children(tree, node, q, k, !greedy, rng);
        std::vector<int32_t> tokens;
        for (const auto& cand : proposed) tokens.push_back(cand.token);
        tree.set_proposals(node, std::move(tokens));
        draft_q[size_t(node)] = std::move(q);
        candidates.insert(candidates.end(), proposed.begin(), proposed.end());
      }
      const int32_t width = policy.shape == spec::DraftShape::kChain ? 1 : policy.width;
      const auto chosen = spec::best_candidates(std::move(candidates), size_t(std::min(width, budget - drafted)));
      frontier.clear();
      for (const auto& cand : chosen) {
        frontier.push_back(tree.add(cand.parent, cand.token, cand.log_prob));
        draft_q.emplace_back();
      }
      drafted += int32_t(chosen.size());
    }
    acc.draft_seconds += seconds_since(td);

    // Verify every node in one target pass; its K/V overwrite the draft's in the scratch slots.
    const auto tv = Clock::now();
    std::vector<int32_t> all(size_t(tree.size()));
    for (int32_t i = 0; i < tree.size(); ++i) all[size_t(i)] = i;
    BITSPLIT_ASSIGN_OR_RETURN(auto logits, forward_reference(target, cache, tree_batch(tree, all, committed, true),
                                                              nullptr, Tier::kTarget, options.variant));
    spec::Verdict verdict;
    if (greedy) {
      std::vector<int32_t> best(all.size());
      const bool penalised = sampler.params().repeat_penalty != 1.0f && sampler.params().repeat_last_n > 0;
      for (int32_t i = 0; i < tree.size(); ++i) {
        const std::span<const float> l(logits.data() + size_t(i) * size_t(c.n_vocab), size_t(c.n_vocab));
        // The same choice as plain greedy decoding (argmax after the repetition penalty).
        best[size_t(i)] = penalised ? argmax(sampler.distribution(l, history_at(history, tree, i, sampler))) : argmax(l);
      }
      verdict = spec::verify_greedy(tree, best);
    } else {
      std::vector<std::vector<float>> p(all.size());
      for (int32_t i = 0; i < tree.size(); ++i) {
        const std::span<const float> l(logits.data() + size_t(i) * size_t(c.n_vocab), size_t(c.n_vocab));
        p[size_t(i)] = sampler.distribution(l, history_at(history, tree, i, sampler));
      }
      verdict = spec::verify_sampling(tree, p, draft_q, rng, options.verify);
    }
    acc.verify_seconds += seconds_since(tv);
    if (options.auto_budget) controller.record(policy.budget, int32_t(verdict.accepted.size()) + 1, seconds_since(td));
    ++result.checks_per_budget[size_t(policy.budget)];
    result.final_budget = policy.budget;

    // Commit: the root and the accepted nodes, in path order, to consecutive positions.
    cache.move_slot(committed + 0, committed);
    for (size_t k = 0; k < verdict.accepted.size(); ++k) cache.move_slot(committed + verdict.accepted[k], committed + 1 + int32_t(k));
    const int32_t was_committed = committed;
    committed += 1 + int32_t(verdict.accepted.size());
    if (device) BITSPLIT_RETURN_IF_ERROR(device->sync_cache(cache, was_committed, committed));
    acc.record(int32_t(verdict.accepted.size()), drafted);

    std::vector<int32_t> emitted;
    for (int32_t n : verdict.accepted) emitted.push_back(tree.node(n).token);
    emitted.push_back(verdict.next_token);
    for (int32_t token : emitted) {
      history.push_back(token);
      ++stats.generated_tokens;
      if (!on_token(token)) {
        done = true;
        break;
      }
      if (token == options.eos_token) {
        stats.stopped_at_eos = true;
        done = true;
        break;
      }
      if (stats.generated_tokens >= options.n_predict) {
        done = true;
        break;
      }
    }
    root = verdict.next_token;
  }
  stats.generate_seconds = seconds_since(t1);
  if (device) {
    const DraftTier::Transfers t = device->transfers();
    result.device_transfers = {t.weight_bytes - device_start.weight_bytes, t.activation_bytes - device_start.activation_bytes,
                               t.result_bytes - device_start.result_bytes, t.calls - device_start.calls};
  }
  result.committed = std::min<int64_t>(committed, int64_t(history.size()));  // drop cut-off tokens
  return result;
}

}  // namespace bitsplit
