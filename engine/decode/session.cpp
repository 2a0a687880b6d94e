// The session: plain or speculative decoding of one sequence behind one call.
#include "bitsplit/session.h"

#include <algorithm>
#include <utility>

#include "bitsplit/generate.h"

namespace bitsplit {

Session::Session(const Model& model, std::shared_ptr<const Variant> variant, SessionOptions options)
    : model_(model),
      variant_(std::move(variant)),
      options_(std::move(options)),
      controller_memory_(options_.controller_memory ? options_.controller_memory
                                                    : std::make_shared<ControllerMemory>()) {}

Status Session::validate() const {
  if (options_.base_draft && !variant_) return Status::error("a base draft needs a variant (the base drafts itself)");
  if (options_.prefill_chunk <= 0) return Status::error("prefill chunk must be positive");
  if (!speculative()) return Status::ok();
  spec::DraftPolicy policy = options_.policy;
  policy.set_budget(options_.budget.value_or(policy.budget));
  BITSPLIT_RETURN_IF_ERROR(options_.lookup.validate());
  return policy.validate();
}

Status Session::check_request(size_t prompt_tokens, int32_t n_predict) const {
  return check_generation(model_.config(), prompt_tokens, n_predict, options_.prefill_chunk);
}

bool Session::speculative() const {
  return options_.speculative && model_.has_planes() && model_.default_pass() == Pass::kTarget;
}

int64_t reusable_prefix(std::span<const int32_t> cached, std::span<const int32_t> prompt) {
  if (prompt.empty()) return 0;
  const size_t most = std::min(cached.size(), prompt.size() - 1);
  return int64_t(std::mismatch(cached.begin(), cached.begin() + int64_t(most), prompt.begin()).first - cached.begin());
}

void Session::forget() { kept_ = {}; }

Session::Kept Session::release_cache() { return std::exchange(kept_, {}); }

void Session::adopt_cache(Kept kept) {
  kept_ = std::move(kept);
  if (!kept_.cache) kept_.tokens.clear();  // tokens without their K/V say nothing
}

int64_t Session::prepare_cache(std::span<const int32_t> prompt, int64_t slots, int64_t positions) {
  std::optional<KvCache>& cache = kept_.cache;
  const ModelConfig& c = model_.config();
  // A cache adopted from elsewhere may be of another model's shape. A LongRoPE model turns its
  // positions by a factor set the sequence's length picks: K/V made under another set are not
  // this run's.
  if (cache && (cache->n_layers() != c.n_layers || cache->kv_dim() != c.kv_dim())) cache.reset();
  const bool same_factors = cache && &model_.rope_freq_factors(cache->context()) == &model_.rope_freq_factors(positions);
  const int64_t reuse = same_factors ? reusable_prefix(kept_.tokens, prompt) : 0;
  kept_.tokens.clear();  // until this run ends well
  if (!cache || cache->n_slots() < slots) {
    if (reuse == 0) cache.reset();  // (nothing to copy: the old memory goes first)
    KvCache fresh(c, slots);
    if (reuse > 0) fresh.copy_prefix(*cache, reuse);
    cache = std::move(fresh);
  }
  cache->set_context(positions);
  return reuse;
}

Result<SessionResult> Session::generate(std::span<const int32_t> prompt, int32_t n_predict, int32_t eos_token,
                                        Sampler& sampler, const TokenCallback& on_token) {
  BITSPLIT_RETURN_IF_ERROR(validate());
  BITSPLIT_RETURN_IF_ERROR(check_request(prompt.size(), n_predict));
  const bool reuse = options_.reuse_prefix;
  if (!reuse) forget();
  const int64_t positions = int64_t(prompt.size()) + n_predict;
  // The tokens of the sequence, for the next generation's prefix: the first `valid` are kept.
  // Without reuse the caller's callback is passed on as it is.
  std::vector<int32_t> sequence;
  if (reuse) sequence.assign(prompt.begin(), prompt.end());
  const TokenCallback recording = [&](int32_t token) {
    sequence.push_back(token);
    return on_token(token);
  };
  const TokenCallback& keep = reuse ? recording : on_token;
  auto keep_tokens = [&](int64_t valid) {
    if (!reuse) return;
    sequence.resize(std::min(sequence.size(), size_t(valid)));
    kept_.tokens = std::move(sequence);
  };
  SessionResult result;
  if (!speculative()) {
    GenerateOptions g;
    g.n_predict = n_predict;
    g.eos_token = eos_token;
    g.prefill_chunk = options_.prefill_chunk;
    g.variant = variant_.get();
    g.batcher = options_.batcher;
    g.on_logits = options_.on_logits;
    g.stop = options_.stop;
    if (reuse) {
      g.reuse = prepare_cache(prompt, positions, positions);
      g.cache = &*kept_.cache;
    }
    BITSPLIT_ASSIGN_OR_RETURN(result.generation, bitsplit::generate(model_, prompt, g, sampler, keep));
    // Every token but the last generated one went through the model (of a stopped prompt, the
    // tokens run).
    keep_tokens(result.generation.prompt_tokens + std::max<int64_t>(result.generation.generated_tokens - 1, 0));
    return result;
  }
  SpeculativeOptions s;
  s.policy = options_.policy;
  s.auto_budget = !options_.budget.has_value();
  s.auto_shape = options_.auto_shape;
  s.lookup = options_.lookup;
  s.policy.set_budget(options_.budget.value_or(s.policy.budget));
  s.n_predict = n_predict;
  s.eos_token = eos_token;
  s.prefill_chunk = options_.prefill_chunk;
  s.variant = variant_.get();
  s.base_draft = options_.base_draft;
  s.device_draft = options_.device_draft;
  s.batcher = options_.batcher;
  s.draft_max_sequences = options_.draft_max_sequences;
  s.on_logits = options_.on_logits;
  s.stop = options_.stop;
  KvCache* cache = nullptr;
  if (reuse) {
    s.reuse = prepare_cache(prompt, speculative_cache_slots(s, prompt.size(), sampler.params().greedy()), positions);
    cache = &*kept_.cache;
  }
  // Only an online budget has a controller to continue and keep.
  std::optional<spec::BudgetController> controller;
  if (s.auto_budget) {
    controller = controller_memory_->recall();
    s.controller_state = &controller;
  }
  BITSPLIT_ASSIGN_OR_RETURN(SpeculativeResult r, generate_speculative(model_, model_, prompt, s, sampler, keep, cache));
  if (controller) controller_memory_->keep(std::move(*controller));
  keep_tokens(r.committed);  // the committed slots' tokens
  result.generation = r.generation;
  result.speculative = std::move(r);
  return result;
}

}  // namespace bitsplit
