// Speculative decoding as three steps per check over a draft source (draft_source.h): draft a
// token tree level by level (spec::grow_tree) plus, for greedy decoding, a context-lookup
// chain, verify every node in one target pass, commit the accepted path's K/V; the budget
// controller picks each check's setting. Validation, prefill and stopping are plain generation's.
#include "bitsplit/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "bitsplit/draft_source.h"
#include "bitsplit/pass_batcher.h"

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

// Greedy drafting's children of a row: its k largest logits, best first (ties: the lower token),
// as propose_children ranks softmax(logits), with log-probabilities from one log-sum-exp over
// the row (no softmax copy, no logarithm per token: with a vocabulary of 150 k that was a large
// part of a host draft level). For k = 1 nothing is ranked (a chain keeps its one child), so the
// log-probabilities are left 0.
std::vector<std::pair<int32_t, double>> greedy_top_k(std::span<const float> logits, int32_t k) {
  const std::vector<std::pair<float, int32_t>> top = top_logits(logits, k);
  std::vector<std::pair<int32_t, double>> out;
  double log_sum = 0;
  if (k > 1 && !top.empty()) {
    const float max = top.front().first;
    double sum = 0;
    for (float x : logits) sum += double(std::exp(x - max));
    log_sum = double(max) + std::log(sum);
  }
  for (const auto& [x, t] : top) out.push_back({t, k > 1 ? double(x) - log_sum : 0.0});
  return out;
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

// One generation's state between checks. KV cache discipline: slots [0, committed) hold the
// target's K/V of committed tokens; a check's tree nodes use scratch slots committed + node.
struct Decoder {
  const Model& target;
  const SpeculativeOptions& options;
  Sampler& sampler;
  KvCache& cache;
  DraftSource& draft;
  std::mt19937_64& rng;
  const int64_t n_vocab;
  const bool greedy;
  std::vector<int32_t> history;
  int32_t committed = 0;
  std::vector<float> verify_logits;  // the last verify pass's, row = tree node

  std::span<const float> row(const std::vector<float>& logits, size_t r) const {
    return {logits.data() + r * size_t(n_vocab), size_t(n_vocab)};
  }

  // Step 1: a tree from `tree`'s root, one batched draft pass per level. draft_q gets the
  // proposal distribution of every expanded node (what the sampling verifier needs).
  Result<int32_t> draft_tree(spec::TokenTree& tree, const spec::DraftPolicy& policy, int32_t budget,
                             std::vector<std::vector<float>>& draft_q) {
    draft_q.assign(1, {});
    auto drafted = spec::grow_tree(
        tree, policy, budget,
        [&](spec::TokenTree& t, const std::vector<int32_t>& frontier,
            int32_t k) -> Result<std::vector<spec::Candidate>> {
          draft_q.resize(size_t(t.size()));
          const Batch level = tree_batch(t, frontier, committed, true);
          std::vector<spec::Candidate> candidates;
          if (greedy && k <= draft.max_top_k()) {
            // Greedy needs only each row's top k (a device computes it there).
            DraftTopK top;
            BITSPLIT_RETURN_IF_ERROR(draft.level(level, k, &top, nullptr));
            for (size_t r = 0; r < frontier.size(); ++r) {
              const int32_t node = frontier[r];
              const double base = t.node(node).log_prob;
              std::vector<int32_t> tokens;
              for (int32_t j = 0; j < k; ++j) {
                const float lp = top.log_probs[r * size_t(k) + size_t(j)];
                if (!(std::exp(lp) > 0.0f)) break;  // as propose_children: only tokens with q > 0
                tokens.push_back(top.tokens[r * size_t(k) + size_t(j)]);
                candidates.push_back({node, tokens.back(), base + double(lp)});
              }
              t.set_proposals(node, std::move(tokens));
            }
            return candidates;
          }
          std::vector<float> logits;
          BITSPLIT_RETURN_IF_ERROR(draft.level(level, k, nullptr, &logits));
          if (greedy) {
            for (size_t r = 0; r < frontier.size(); ++r) {
              const int32_t node = frontier[r];
              std::vector<int32_t> tokens;
              for (const auto& [token, lp] : greedy_top_k(row(logits, r), k)) {
                tokens.push_back(token);
                candidates.push_back({node, token, t.node(node).log_prob + lp});
              }
              t.set_proposals(node, std::move(tokens));
            }
            return candidates;
          }
          for (size_t r = 0; r < frontier.size(); ++r) {
            const int32_t node = frontier[r];
            // The proposal distribution: the sampler's own, so acceptance ratios are exact.
            auto q = sampler.distribution(row(logits, r), history_at(history, t, node, sampler));
            auto proposed = spec::propose_children(t, node, q, k, true, rng);
            std::vector<int32_t> tokens;
            for (const auto& cand : proposed) tokens.push_back(cand.token);
            t.set_proposals(node, std::move(tokens));
            draft_q[size_t(node)] = std::move(q);
            candidates.insert(candidates.end(), proposed.begin(), proposed.end());
          }
          return candidates;
        });
    draft_q.resize(size_t(tree.size()));  // the last level's nodes were not expanded
    return drafted;
  }

  // Step 2: every node in one target pass (its K/V overwrite the draft's in the scratch slots),
  // then the verdict: greedy, or lossless sampling against the proposal distributions. For greedy
  // decoding `target_argmax` gets the target's choice at every node.
  Result<spec::Verdict> verify(const spec::TokenTree& tree,
                                      const std::vector<std::vector<float>>& draft_q,
                                      std::vector<int32_t>& target_argmax) {
    std::vector<int32_t> all(size_t(tree.size()));
    for (int32_t i = 0; i < tree.size(); ++i) all[size_t(i)] = i;
    const Batch batch = tree_batch(tree, all, committed, true);
    BITSPLIT_ASSIGN_OR_RETURN(verify_logits, run_forward(options.batcher, target, cache, batch, Pass::kTarget, options.variant));
    const std::vector<float>& logits = verify_logits;
    if (greedy) {
      std::vector<int32_t> best(all.size());
      const bool penalised = sampler.params().repeat_penalty != 1.0f && sampler.params().repeat_last_n > 0;
      for (int32_t i = 0; i < tree.size(); ++i) {
        // The same choice as plain greedy decoding (argmax after the repetition penalty).
        best[size_t(i)] = penalised ? argmax(sampler.distribution(row(logits, size_t(i)), history_at(history, tree, i, sampler)))
                                    : argmax(row(logits, size_t(i)));
      }
      target_argmax = std::move(best);
      return spec::verify_greedy(tree, target_argmax);
    }
    std::vector<std::vector<float>> p(all.size());
    for (int32_t i = 0; i < tree.size(); ++i) {
      p[size_t(i)] = sampler.distribution(row(logits, size_t(i)), history_at(history, tree, i, sampler));
    }
    return spec::verify_sampling(tree, p, draft_q, rng, options.verify);
  }

  // Step 3: the root and the accepted nodes, in path order, to consecutive committed slots;
  // the draft source gets the newly committed K/V.
  Status commit(const spec::Verdict& verdict) {
    cache.move_slot(committed + 0, committed);
    for (size_t k = 0; k < verdict.accepted.size(); ++k) {
      cache.move_slot(committed + verdict.accepted[k], committed + 1 + int32_t(k));
    }
    const int32_t was = committed;
    committed += 1 + int32_t(verdict.accepted.size());
    return draft.committed(cache, was, committed);
  }
};

// Whether context lookup runs: greedy decoding only (sampling: see SpeculativeOptions).
bool lookup_runs(const SpeculativeOptions& options, bool greedy) { return options.lookup.max_tokens > 0 && greedy; }

}  // namespace

int64_t speculative_cache_slots(const SpeculativeOptions& options, size_t prompt_tokens, bool greedy) {
  const bool lookup = lookup_runs(options, greedy);
  return int64_t(prompt_tokens) + options.n_predict + (options.auto_budget || lookup ? spec::kMaxBudget : options.policy.budget) + 1;
}

Result<SpeculativeResult> generate_speculative(const Model& target, const Model& draft, std::span<const int32_t> prompt,
                                               const SpeculativeOptions& options, Sampler& sampler,
                                               const TokenCallback& on_token, KvCache* external_cache) {
  const ModelConfig& c = target.config();
  BITSPLIT_RETURN_IF_ERROR(options.policy.validate());
  if (draft.config().n_vocab != c.n_vocab || draft.config().n_layers != c.n_layers ||
      draft.config().kv_dim() != c.kv_dim()) {
    return Status::error("the draft and target models have different shapes");
  }
  BITSPLIT_RETURN_IF_ERROR(check_generation(c, prompt.size(), options.n_predict, options.prefill_chunk));
  const int64_t needed = int64_t(prompt.size()) + options.n_predict;
  BITSPLIT_RETURN_IF_ERROR(options.lookup.validate());
  const bool greedy = sampler.params().greedy();
  const bool lookup = lookup_runs(options, greedy);
  spec::DraftPolicy policy = options.policy;
  std::optional<spec::BudgetController> controller;
  if (options.auto_budget) {
    spec::ControllerOptions co = options.controller_schedule.value_or(spec::ControllerOptions{});
    co.chain = options.auto_shape || policy.shape == spec::DraftShape::kChain;
    co.tree = options.auto_shape || policy.shape == spec::DraftShape::kTree;
    co.lookup = lookup;
    co.lookup_tokens = options.lookup.max_tokens;
    controller.emplace(policy, co);
  }
  std::mt19937_64 rng(sampler.params().seed ^ 0x9e3779b97f4a7c15ull);
  const int64_t slots = speculative_cache_slots(options, prompt.size(), greedy);
  std::optional<KvCache> own_cache;
  BITSPLIT_ASSIGN_OR_RETURN(const GenerationCache gc, generation_cache(c, external_cache, options.reuse, slots, needed,
                                                                        prompt.size(), own_cache));
  KvCache& cache = *gc.cache;
  SpeculativeResult result;
  GenerationStats& stats = result.generation;
  spec::AcceptanceStats& acc = result.acceptance;
  stats.prompt_tokens = int64_t(prompt.size());
  const int64_t reuse = gc.reuse;
  stats.reused_tokens = reuse;
  const Variant* draft_variant = options.base_draft ? nullptr : options.variant;

  // The whole draft on a device when the model's backend offers it, else on the host.
  PassBatcher::Membership member(options.batcher);
  std::unique_ptr<DraftSource> source;
  std::string host_why = "device draft switched off";
  if (options.device_draft) {
    auto d = make_device_draft(draft, slots, cache.context(), draft_variant, options.batcher);
    if (d) source = std::move(*d);
    else host_why = d.status().message();
  }
  if (!source) source = make_host_draft(draft, cache, draft_variant, options.batcher);
  result.draft_pass = source->where() == "host" ? "host (" + host_why + ")" : source->where();

  // Prefill all but the last prompt token; the last becomes the first root.
  auto t0 = Clock::now();
  const size_t prefix = prompt.size() - 1;
  BITSPLIT_RETURN_IF_ERROR(prefill(target, cache, prompt.first(prefix).subspan(size_t(reuse)), options.prefill_chunk,
                                   Pass::kTarget, options.variant, false, int32_t(reuse), options.batcher)
                               .status());
  BITSPLIT_RETURN_IF_ERROR(source->committed(cache, 0, int64_t(prefix)));
  stats.prompt_seconds = seconds_since(t0);

  Decoder dec{target, options, sampler, cache, *source, rng, c.n_vocab, greedy,
              std::vector<int32_t>(prompt.begin(), prompt.end()), int32_t(prefix)};
  TokenSink sink(on_token, options.eos_token, options.n_predict, stats);
  int32_t root = prompt.back();
  const auto t1 = Clock::now();
  for (bool more = options.n_predict > 0; more;) {
    spec::DraftSetting setting =
        controller ? controller->next() : spec::DraftSetting{policy.shape, policy.budget, lookup};
    // Crowded (many sequences in the combined passes): no model draft on this check, and the
    // controller, which models one sequence's costs, does not learn from it.
    const bool crowded = options.batcher && options.draft_max_sequences > 0 &&
                         options.batcher->joined() > options.draft_max_sequences;
    if (crowded) setting.budget = 0;
    spec::DraftPolicy check = policy;
    check.shape = setting.shape;
    if (setting.budget > 0) check.set_budget(setting.budget);
    else check.budget = 0;
    BITSPLIT_CHECK(check.validate(/*allow_no_draft=*/true).is_ok(), "the controller chose an invalid setting");
    const auto td = Clock::now();
    spec::TokenTree tree(root);
    std::vector<std::vector<float>> draft_q;
    const int32_t remaining = int32_t(needed - int64_t(dec.history.size()));
    const int32_t budget = std::min(check.budget, remaining);
    int32_t drafted = 0;
    if (budget > 0) {
      BITSPLIT_ASSIGN_OR_RETURN(drafted, dec.draft_tree(tree, check, budget, draft_q));
    }
    draft_q.resize(size_t(tree.size()));
    const int32_t model_nodes = tree.size();  // the root and the model draft's nodes
    // A budget cut short by n_predict may leave the last level partial: only full levels count
    // for what smaller budgets would have accepted.
    const int32_t model_depth = tree.max_depth() - (budget < check.budget && tree.max_depth() > 0 ? 1 : 0);
    // The lookup chain is found on every check (it costs no model pass), so the controller learns
    // how well it would do even on checks that leave it out of the tree.
    std::vector<int32_t> proposal;
    if (lookup) {
      proposal = spec::lookup_continuation(dec.history, options.lookup,
                                                  std::min(spec::kMaxBudget - drafted, remaining));
    }
    if (setting.lookup && lookup) {
      int32_t parent = 0;
      for (int32_t token : proposal) parent = tree.add(parent, token, 0.0);
      draft_q.resize(size_t(tree.size()));
    }
    const int32_t lookup_nodes = tree.size() - model_nodes;
    const double draft_seconds = seconds_since(td);
    acc.draft_seconds += draft_seconds;

    const auto tv = Clock::now();
    std::vector<int32_t> target_argmax;
    BITSPLIT_ASSIGN_OR_RETURN(const spec::Verdict verdict, dec.verify(tree, draft_q, target_argmax));
    const double verify_seconds = seconds_since(tv);
    acc.verify_seconds += verify_seconds;
    int32_t lookup_accepted = 0;
    for (int32_t n : verdict.accepted) lookup_accepted += n >= model_nodes ? 1 : 0;
    std::vector<int32_t> emitted;
    for (int32_t n : verdict.accepted) emitted.push_back(tree.node(n).token);
    emitted.push_back(verdict.next_token);
    if (controller) {
      spec::CheckRecord r;
      r.setting = setting;
      r.model_depth = model_depth;
      r.model_accepted = int32_t(verdict.accepted.size());
      r.lookup_nodes = lookup_nodes;
      r.verify_rows = tree.size();
      r.draft_seconds = draft_seconds;
      r.verify_seconds = verify_seconds;
      r.lookup_proposed = lookup ? int32_t(proposal.size()) : -1;
      if (greedy) {  // what each part alone would have had accepted (verify_greedy took the longer)
        auto model = [&](int32_t n) { return n < model_nodes; };
        r.model_accepted = spec::accepted_depth(tree, target_argmax, model);
        if (lookup_nodes > 0) {
          r.lookup_accepted = spec::accepted_depth(tree, target_argmax, [&](int32_t n) { return n >= model_nodes; });
        } else if (lookup) {  // not in the tree: as far as it matches what the target emitted
          const auto end = std::min(proposal.size(), emitted.size());
          r.lookup_accepted = int32_t(std::mismatch(proposal.begin(), proposal.begin() + end, emitted.begin()).first -
                                      proposal.begin());
          r.lookup_censored = size_t(r.lookup_accepted) == emitted.size() && emitted.size() < proposal.size();
        }
        if (check.shape == spec::DraftShape::kTree && budget > 0) {
          r.chain_depth = std::min(model_depth, spec::greedy_chain_depth(tree, target_argmax, model, &r.chain_accepted));
        }
      }
      r.model_accepted = std::min(r.model_accepted, model_depth);
      if (!crowded) controller->record(r);
    }
    const std::string name = setting.name();
    auto used = std::find_if(result.checks_per_setting.begin(), result.checks_per_setting.end(),
                             [&](const auto& e) { return e.first == name; });
    if (used == result.checks_per_setting.end()) result.checks_per_setting.push_back({name, 1});
    else ++used->second;
    result.final_setting = name;

    BITSPLIT_RETURN_IF_ERROR(dec.commit(verdict));
    acc.record(int32_t(verdict.accepted.size()), tree.size() - 1, tree.max_depth(), lookup_nodes, lookup_accepted);

    for (size_t k = 0; k < emitted.size(); ++k) {
      const int32_t token = emitted[k];
      // The k-th token was chosen at the path's k-th node: the root, then each accepted node.
      if (options.on_logits) options.on_logits(token, dec.row(dec.verify_logits, size_t(k == 0 ? 0 : verdict.accepted[k - 1])));
      dec.history.push_back(token);
      if (!(more = sink.emit(token))) break;
    }
    root = verdict.next_token;
  }
  stats.generate_seconds = seconds_since(t1);
  result.device_transfers = source->transfers();
  result.committed = std::min<int64_t>(dec.committed, int64_t(dec.history.size()));  // drop cut-off tokens
  return result;
}

}  // namespace bitsplit
