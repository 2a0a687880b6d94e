// The session: plain or speculative decoding of one sequence behind one call.
#include "bitsplit/session.h"

#include "bitsplit/generate.h"

namespace bitsplit {

Session::Session(const Model& model, std::shared_ptr<const Variant> variant, SessionOptions options)
    : model_(model), variant_(std::move(variant)), options_(std::move(options)) {}

Status Session::validate() const {
  if (options_.base_draft && !variant_) return Status::error("a base draft needs a variant (the base drafts itself)");
  if (options_.prefill_chunk <= 0) return Status::error("prefill chunk must be positive");
  if (!speculative()) return Status::ok();
  speculation::DraftPolicy policy = options_.policy;
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

Result<SessionResult> Session::generate(std::span<const int32_t> prompt, int32_t n_predict, int32_t eos_token,
                                        Sampler& sampler, const TokenCallback& on_token) {
  BITSPLIT_RETURN_IF_ERROR(validate());
  SessionResult result;
  if (!speculative()) {
    GenerateOptions g;
    g.n_predict = n_predict;
    g.eos_token = eos_token;
    g.prefill_chunk = options_.prefill_chunk;
    g.variant = variant_.get();
    g.batcher = options_.batcher;
    g.on_logits = options_.on_logits;
    BITSPLIT_ASSIGN_OR_RETURN(result.generation, bitsplit::generate(model_, prompt, g, sampler, on_token));
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
  BITSPLIT_ASSIGN_OR_RETURN(SpeculativeResult r, generate_speculative(model_, model_, prompt, s, sampler, on_token));
  result.generation = r.generation;
  result.speculative = std::move(r);
  return result;
}

}  // namespace bitsplit
