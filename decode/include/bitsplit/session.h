// One sequence on a loaded model: the variant it decodes (held for the session's lifetime, so a
// registry evicting that variant cannot pull it, or its resident sign planes, from under a
// generation), how it decodes, and generate(), with plain and speculative decoding behind one
// call. Each generate() starts a new sequence with its own KV cache.
//
// Threads: a session is used by one thread at a time. Sessions on one model run one after the
// other (the model's CpuContext is driven by one thread at a time) unless they share a
// PassBatcher (SessionOptions::batcher): then any number of them generate at once, each on its
// own thread, their forward passes combined.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "bitsplit/generate.h"
#include "bitsplit/pass_batcher.h"
#include "bitsplit/speculative.h"
#include "bitsplit/variant.h"

namespace bitsplit {

struct SessionOptions {
  // Speculative decoding on a bit-split model (a model without planes always decodes plainly).
  bool speculative = true;
  // Drafted nodes per check (1..speculation::kMaxBudget); nullopt: chosen online for the most
  // tokens/s (speculation::BudgetController), plain decoding included.
  std::optional<int32_t> budget;
  // With an online budget: choose between a chain and a tree too (false: policy.shape only).
  bool auto_shape = true;
  speculation::DraftPolicy policy;  // shape, depth, top-k and width (its budget is set from `budget`)
  // Context lookup for greedy decoding (SpeculativeOptions::lookup); max_tokens 0 turns it off.
  speculation::LookupOptions lookup;
  bool device_draft = true;         // the whole draft on the backend's device when it offers it
  bool base_draft = false;          // with a variant: draft with the plain base D
  int32_t prefill_chunk = 256;
  // Sessions decoding concurrently on one model share its passes through a batcher
  // (pass_batcher.h): each session's thread calls generate(), their passes run combined. Null:
  // this session's passes run alone (sessions on one model then run one after the other).
  PassBatcher* batcher = nullptr;
  // SpeculativeOptions::draft_max_sequences: no model draft while more generations are joined.
  int32_t draft_max_sequences = 0;
  // Each generated token's target logits (generate.h's LogitsCallback), e.g. for log-probabilities.
  LogitsCallback on_logits;
};

struct SessionResult {
  GenerationStats generation;
  // Set when the generation decoded speculatively: acceptance, budgets, where the draft ran.
  std::optional<SpeculativeResult> speculative;
};

class Session {
 public:
  // `model` must outlive the session. `variant` (null: the base) must have been made for `model`.
  Session(const Model& model, std::shared_ptr<const Variant> variant, SessionOptions options);
  // An error for options that cannot work (a budget out of range, a base draft without a variant).
  Status validate() const;
  // Whether generate() decodes speculatively (a bit-split model and options.speculative).
  bool speculative() const;
  // An error for a request that cannot run (an empty prompt, a prompt and n_predict over the
  // context, n_predict out of range): the check generate() makes first, available before it.
  Status check_request(size_t prompt_tokens, int32_t n_predict) const;
  const Variant* variant() const { return variant_.get(); }
  const SessionOptions& options() const { return options_; }

  // Up to n_predict tokens after `prompt`, each handed to on_token as it is produced; stops
  // after eos_token (-1: never) or when on_token returns false.
  Result<SessionResult> generate(std::span<const int32_t> prompt, int32_t n_predict, int32_t eos_token,
                                 Sampler& sampler, const TokenCallback& on_token);

 private:
  const Model& model_;
  std::shared_ptr<const Variant> variant_;
  SessionOptions options_;
};

}  // namespace bitsplit
