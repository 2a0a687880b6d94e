// Speculative decoding as steps per check over a draft source (draft_source.h): the budget
// controller picks the check's setting; draft a token tree level by level (spec::grow_tree) plus,
// for greedy decoding, a context-lookup chain; verify every node in one target pass; record what
// the check tells the controller and the statistics; commit the accepted path's K/V; emit its
// tokens. Validation, prefill and stopping are plain generation's.
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

// One check's draft: the tree (the root, the model draft's levels, the lookup chain) and what
// the controller and the statistics learn from it.
struct CheckDraft {
  explicit CheckDraft(int32_t root) : tree(root) {}
  spec::DraftSetting setting;
  // Crowded (many sequences in the combined passes): no model draft on this check, and the
  // controller, which models one sequence's costs, does not learn from it.
  bool crowded = false;
  spec::DraftPolicy policy;                 // the setting's shape and budget
  spec::TokenTree tree;
  std::vector<std::vector<float>> draft_q;  // proposal distributions by node (sampling)
  int32_t budget = 0;                       // model-drafted nodes asked for (at most the tokens still wanted)
  int32_t drafted = 0;
  int32_t model_nodes = 0;                  // the root and the model draft's nodes
  int32_t model_depth = 0;                  // the model draft's complete levels
  std::vector<int32_t> proposal;            // the lookup chain found (in the tree or not)
  int32_t lookup_nodes = 0;                 // its nodes in the tree
  double seconds = 0;
};

// One check's verdict and the tokens it emits.
struct CheckVerdict {
  spec::Verdict verdict;
  std::vector<int32_t> target_argmax;  // greedy: the target's choice at every node
  std::vector<int32_t> emitted;        // the accepted path's tokens, then the bonus token
  int32_t lookup_accepted = 0;         // accepted nodes of the lookup chain
  double seconds = 0;
};

// One generation's state between checks. KV cache discipline: slots [0, committed) hold the
// target's K/V of committed tokens; a check's tree nodes use scratch slots committed + node.
struct Decoder {
  const Model& target;
  const SpeculativeOptions& options;
  Sampler& sampler;
  KvCache& cache;
  DraftSource& draft;
  std::mt19937_64& rng;
  spec::BudgetController* controller;  // null: every check uses options.policy
  SpeculativeResult& result;
  const int64_t n_vocab;
  const bool greedy;
  const bool lookup;                   // context lookup runs (lookup_runs)
  const int64_t needed;                // prompt + n_predict tokens
  std::vector<int32_t> history;
  int32_t committed = 0;
  std::vector<float> verify_logits;  // the last verify pass's, row = tree node

  std::span<const float> row(const std::vector<float>& logits, size_t r) const {
    return {logits.data() + r * size_t(n_vocab), size_t(n_vocab)};
  }

  // Checks from `root` until the sink wants no more tokens.
  Status decode(int32_t root, TokenSink& sink) {
    for (bool more = options.n_predict > 0; more;) {
      BITSPLIT_ASSIGN_OR_RETURN(const CheckDraft d, draft_check(root));
      BITSPLIT_ASSIGN_OR_RETURN(const CheckVerdict v, verify(d));
      record(d, v);
      BITSPLIT_RETURN_IF_ERROR(commit(d, v));
      more = emit(v, sink);
      root = v.verdict.next_token;
    }
    return Status::ok();
  }

  // The check's setting: the controller's choice, else the options' policy; no model draft when
  // crowded.
  void plan(CheckDraft& d) {
    d.setting = controller ? controller->next() : spec::DraftSetting{options.policy.shape, options.policy.budget, lookup};
    d.crowded = options.batcher && options.draft_max_sequences > 0 &&
                options.batcher->joined() > options.draft_max_sequences;
    if (d.crowded) d.setting.budget = 0;
    d.policy = options.policy;
    d.policy.shape = d.setting.shape;
    if (d.setting.budget > 0) d.policy.set_budget(d.setting.budget);
    else d.policy.budget = 0;
    BITSPLIT_CHECK(d.policy.validate(/*allow_no_draft=*/true).is_ok(), "the controller chose an invalid setting");
  }

  // Step 1: the check's tree from `root`: the model draft (draft_tree) within the tokens still
  // wanted, then the lookup chain when the setting has it.
  Result<CheckDraft> draft_check(int32_t root) {
    CheckDraft d(root);
    plan(d);
    const auto td = Clock::now();
    const int32_t remaining = int32_t(needed - int64_t(history.size()));
    d.budget = std::min(d.policy.budget, remaining);
    if (d.budget > 0) {
      BITSPLIT_ASSIGN_OR_RETURN(d.drafted, draft_tree(d.tree, d.policy, d.budget, d.draft_q));
    }
    d.draft_q.resize(size_t(d.tree.size()));
    d.model_nodes = d.tree.size();
    // A budget cut short by n_predict may leave the last level partial: only full levels count
    // for what smaller budgets would have accepted.
    d.model_depth = d.tree.max_depth() - (d.budget < d.policy.budget && d.tree.max_depth() > 0 ? 1 : 0);
    // The lookup chain is found on every check (it costs no model pass), so the controller learns
    // how well it would do even on checks that leave it out of the tree.
    if (lookup) {
      d.proposal = spec::lookup_continuation(history, options.lookup, std::min(spec::kMaxBudget - d.drafted, remaining));
    }
    if (d.setting.lookup && lookup) {
      int32_t parent = 0;
      for (int32_t token : d.proposal) parent = d.tree.add(parent, token, 0.0);
      d.draft_q.resize(size_t(d.tree.size()));
    }
    d.lookup_nodes = d.tree.size() - d.model_nodes;
    d.seconds = seconds_since(td);
    result.acceptance.draft_seconds += d.seconds;
    return d;
  }

  // The model draft: a tree from `tree`'s root, one batched draft pass per level. draft_q gets
  // the proposal distribution of every expanded node (what the sampling verifier needs).
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
  // decoding the verdict keeps the target's choice at every node.
  Result<CheckVerdict> verify(const CheckDraft& d) {
    const auto tv = Clock::now();
    CheckVerdict v;
    BITSPLIT_ASSIGN_OR_RETURN(v.verdict, target_verdict(d.tree, d.draft_q, v.target_argmax));
    v.seconds = seconds_since(tv);
    result.acceptance.verify_seconds += v.seconds;
    for (int32_t n : v.verdict.accepted) v.lookup_accepted += n >= d.model_nodes ? 1 : 0;
    for (int32_t n : v.verdict.accepted) v.emitted.push_back(d.tree.node(n).token);
    v.emitted.push_back(v.verdict.next_token);
    return v;
  }

  // The target pass over every node, and the verifier's walk of the tree over its logits.
  Result<spec::Verdict> target_verdict(const spec::TokenTree& tree, const std::vector<std::vector<float>>& draft_q,
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

  // Step 3: what the check tells the controller (unless crowded) and the statistics.
  void record(const CheckDraft& d, const CheckVerdict& v) {
    if (controller && !d.crowded) controller->record(check_record(d, v));
    const std::string name = d.setting.name();
    auto used = std::find_if(result.checks_per_setting.begin(), result.checks_per_setting.end(),
                             [&](const auto& e) { return e.first == name; });
    if (used == result.checks_per_setting.end()) result.checks_per_setting.push_back({name, 1});
    else ++used->second;
    result.final_setting = name;
  }

  // What the controller learns from the check.
  spec::CheckRecord check_record(const CheckDraft& d, const CheckVerdict& v) const {
    spec::CheckRecord r;
    r.setting = d.setting;
    r.model_depth = d.model_depth;
    r.model_accepted = int32_t(v.verdict.accepted.size());
    r.lookup_nodes = d.lookup_nodes;
    r.verify_rows = d.tree.size();
    r.draft_seconds = d.seconds;
    r.verify_seconds = v.seconds;
    r.lookup_proposed = lookup ? int32_t(d.proposal.size()) : -1;
    if (greedy) {  // what each part alone would have had accepted (verify_greedy took the longer)
      auto model = [&](int32_t n) { return n < d.model_nodes; };
      r.model_accepted = spec::accepted_depth(d.tree, v.target_argmax, model);
      if (d.lookup_nodes > 0) {
        r.lookup_accepted = spec::accepted_depth(d.tree, v.target_argmax, [&](int32_t n) { return n >= d.model_nodes; });
      } else if (lookup) {  // not in the tree: as far as it matches what the target emitted
        const auto& proposal = d.proposal;
        const auto end = std::min(proposal.size(), v.emitted.size());
        r.lookup_accepted = int32_t(std::mismatch(proposal.begin(), proposal.begin() + end, v.emitted.begin()).first -
                                    proposal.begin());
        r.lookup_censored = size_t(r.lookup_accepted) == v.emitted.size() && v.emitted.size() < proposal.size();
      }
      if (d.policy.shape == spec::DraftShape::kTree && d.budget > 0) {
        r.chain_depth = std::min(d.model_depth, spec::greedy_chain_depth(d.tree, v.target_argmax, model, &r.chain_accepted));
      }
    }
    r.model_accepted = std::min(r.model_accepted, d.model_depth);
    return r;
  }

  // Step 4: the root and the accepted nodes, in path order, to consecutive committed slots;
  // the draft source gets the newly committed K/V.
  Status commit(const CheckDraft& d, const CheckVerdict& v) {
    const spec::Verdict& verdict = v.verdict;
    cache.move_slot(committed + 0, committed);
    for (size_t k = 0; k < verdict.accepted.size(); ++k) {
      cache.move_slot(committed + verdict.accepted[k], committed + 1 + int32_t(k));
    }
    const int32_t was = committed;
    committed += 1 + int32_t(verdict.accepted.size());
    BITSPLIT_RETURN_IF_ERROR(draft.committed(cache, was, committed));
    result.acceptance.record(int32_t(verdict.accepted.size()), d.tree.size() - 1, d.tree.max_depth(), d.lookup_nodes,
                             v.lookup_accepted);
    return Status::ok();
  }

  // Step 5: the check's tokens to the sink in order; false once it wants no more.
  bool emit(const CheckVerdict& v, TokenSink& sink) {
    for (size_t k = 0; k < v.emitted.size(); ++k) {
      const int32_t token = v.emitted[k];
      // The k-th token was chosen at the path's k-th node: the root, then each accepted node.
      if (options.on_logits) options.on_logits(token, row(verify_logits, size_t(k == 0 ? 0 : v.verdict.accepted[k - 1])));
      history.push_back(token);
      if (!sink.emit(token)) return false;
    }
    return true;
  }
};

// Whether context lookup runs: greedy decoding only (sampling: see SpeculativeOptions).
bool lookup_runs(const SpeculativeOptions& options, bool greedy) { return options.lookup.max_tokens > 0 && greedy; }

// The request's options, the models' shapes and the prompt's room in the context.
Status check_speculative(const Model& target, const Model& draft, std::span<const int32_t> prompt,
                         const SpeculativeOptions& options) {
  const ModelConfig& c = target.config();
  BITSPLIT_RETURN_IF_ERROR(options.policy.validate());
  if (draft.config().n_vocab != c.n_vocab || draft.config().n_layers != c.n_layers ||
      draft.config().kv_dim() != c.kv_dim()) {
    return Status::error("the draft and target models have different shapes");
  }
  BITSPLIT_RETURN_IF_ERROR(check_generation(c, prompt.size(), options.n_predict, options.prefill_chunk));
  return options.lookup.validate();
}

// With an online budget, the controller choosing each check's setting among the shapes allowed:
// the one options.controller_state carries when it chooses alike (what earlier generations
// learned), else a new one — kept in `own`, or in the carried state for the next generation.
spec::BudgetController* budget_controller(const SpeculativeOptions& options, bool lookup,
                                          std::optional<spec::BudgetController>& own) {
  if (!options.auto_budget) return nullptr;
  const spec::DraftPolicy& policy = options.policy;
  spec::ControllerOptions co = options.controller_schedule.value_or(spec::ControllerOptions{});
  co.chain = options.auto_shape || policy.shape == spec::DraftShape::kChain;
  co.tree = options.auto_shape || policy.shape == spec::DraftShape::kTree;
  co.lookup = lookup;
  co.lookup_tokens = options.lookup.max_tokens;
  spec::BudgetController fresh(policy, co);
  std::optional<spec::BudgetController>& held = options.controller_state ? *options.controller_state : own;
  if (!held || !held->chooses_like(fresh)) held = std::move(fresh);
  return &*held;
}

// The whole draft on a device when the model's backend offers it, else on the host; `where`
// says which (and, on the host, why).
std::unique_ptr<DraftSource> open_draft_source(const Model& draft, KvCache& cache, int64_t slots,
                                               const SpeculativeOptions& options, std::string& where) {
  const Variant* draft_variant = options.base_draft ? nullptr : options.variant;
  std::unique_ptr<DraftSource> source;
  std::string host_why = "device draft switched off";
  if (options.device_draft) {
    auto d = make_device_draft(draft, slots, cache.context(), draft_variant, options.batcher);
    if (d) source = std::move(*d);
    else host_why = d.status().message();
  }
  if (!source) source = make_host_draft(draft, cache, draft_variant, options.batcher);
  where = source->where() == "host" ? "host (" + host_why + ")" : source->where();
  return source;
}

// All but the last prompt token, past the `reuse` the cache holds already (the last becomes the
// first check's root); the draft source gets their K/V. When options.stop stops it, stats say so
// and how many prompt tokens ran, and the draft gets nothing (no check follows).
Status prefill_prompt(const Model& target, KvCache& cache, DraftSource& source, std::span<const int32_t> prompt,
                      int64_t reuse, const SpeculativeOptions& options, GenerationStats& stats) {
  const auto t0 = Clock::now();
  const size_t prefix = prompt.size() - 1;
  BITSPLIT_ASSIGN_OR_RETURN(const Prefilled run,
                            prefill(target, cache, prompt.first(prefix).subspan(size_t(reuse)), options.prefill_chunk,
                                    Pass::kTarget, options.variant, false, int32_t(reuse), options.batcher, options.stop));
  if (run.stopped) {
    stats.stopped = true;
    stats.prompt_tokens = reuse + int64_t(run.tokens);
  } else {
    BITSPLIT_RETURN_IF_ERROR(source.committed(cache, 0, int64_t(prefix)));
  }
  stats.prompt_seconds = seconds_since(t0);
  return Status::ok();
}

}  // namespace

int64_t speculative_cache_slots(const SpeculativeOptions& options, size_t prompt_tokens, bool greedy) {
  const bool lookup = lookup_runs(options, greedy);
  return int64_t(prompt_tokens) + options.n_predict + (options.auto_budget || lookup ? spec::kMaxBudget : options.policy.budget) + 1;
}

Result<SpeculativeResult> generate_speculative(const Model& target, const Model& draft, std::span<const int32_t> prompt,
                                               const SpeculativeOptions& options, Sampler& sampler,
                                               const TokenCallback& on_token, KvCache* external_cache) {
  BITSPLIT_RETURN_IF_ERROR(check_speculative(target, draft, prompt, options));
  const int64_t needed = int64_t(prompt.size()) + options.n_predict;
  const bool greedy = sampler.params().greedy();
  const bool lookup = lookup_runs(options, greedy);
  std::optional<spec::BudgetController> own_controller;
  spec::BudgetController* controller = budget_controller(options, lookup, own_controller);
  std::mt19937_64 rng(sampler.params().seed ^ 0x9e3779b97f4a7c15ull);
  const int64_t slots = speculative_cache_slots(options, prompt.size(), greedy);
  std::optional<KvCache> own_cache;
  BITSPLIT_ASSIGN_OR_RETURN(const GenerationCache gc, generation_cache(target.config(), external_cache, options.reuse,
                                                                        slots, needed, prompt.size(), own_cache));
  KvCache& cache = *gc.cache;
  SpeculativeResult result;
  result.controller_checks_before = controller ? controller->checks_recorded() : 0;
  result.generation.prompt_tokens = int64_t(prompt.size());
  result.generation.reused_tokens = gc.reuse;

  PassBatcher::Membership member(options.batcher);
  std::unique_ptr<DraftSource> source = open_draft_source(draft, cache, slots, options, result.draft_pass);
  BITSPLIT_RETURN_IF_ERROR(prefill_prompt(target, cache, *source, prompt, gc.reuse, options, result.generation));
  if (result.generation.stopped) {
    result.committed = result.generation.prompt_tokens;
    return result;
  }

  Decoder dec{.target = target, .options = options, .sampler = sampler, .cache = cache, .draft = *source, .rng = rng,
              .controller = controller, .result = result,
              .n_vocab = target.config().n_vocab, .greedy = greedy, .lookup = lookup, .needed = needed,
              .history = std::vector<int32_t>(prompt.begin(), prompt.end()), .committed = int32_t(prompt.size() - 1)};
  TokenSink sink(on_token, options.eos_token, options.n_predict, result.generation);
  const auto t1 = Clock::now();
  BITSPLIT_RETURN_IF_ERROR(dec.decode(prompt.back(), sink));
  result.generation.generate_seconds = seconds_since(t1);
  result.device_transfers = source->transfers();
  result.committed = std::min<int64_t>(dec.committed, int64_t(dec.history.size()));  // drop cut-off tokens
  return result;
}

}  // namespace bitsplit
