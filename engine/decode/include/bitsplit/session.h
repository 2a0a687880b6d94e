// One sequence on a loaded model: the variant it decodes (held for the session's lifetime, so a
// registry evicting that variant cannot pull it, or its resident sign planes, from under a
// generation), how it decodes, and generate(), with plain and speculative decoding behind one
// call. Each generate() decodes a new sequence; with SessionOptions::reuse_prefix (the default)
// the session keeps the KV cache of the last one, and the next prompt's tokens that start the
// same way (a chat's history, a document asked about again) are not run again: their K/V
// are the same bits a new prefill would compute (a row's result does not depend on the batch it
// was computed in), so the output is exactly what a fresh session gives.
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
  // Drafted nodes per check (1..spec::kMaxBudget); nullopt: chosen online for the most
  // tokens/s (spec::BudgetController), plain decoding included.
  std::optional<int32_t> budget;
  // With an online budget: choose between a chain and a tree too (false: policy.shape only).
  bool auto_shape = true;
  spec::DraftPolicy policy;  // shape, depth, top-k and width (its budget is set from `budget`)
  // Context lookup for greedy decoding (SpeculativeOptions::lookup); max_tokens 0 turns it off.
  spec::LookupOptions lookup;
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
  // With an online budget: what the controller learned (acceptance per depth, costs, its probing
  // schedule), carried between the generations of every session holding this memory — a
  // server's requests on one model and variant, bench accept's prompts of one setting — so a
  // generation does not start over with warm-up checks. Null: the session keeps its own, carried
  // between its own generations only (a chat's turns).
  std::shared_ptr<ControllerMemory> controller_memory;
  // Keep the last generation's KV cache (prompt and generated tokens: about
  // 2 x layers x kv width x 4 bytes per token) and start the next from the longest common prefix.
  bool reuse_prefix = true;
  // Polled before each prompt chunk of every generation (generate.h's StopCallback): true ends
  // the generation there (SessionResult::generation.stopped); the prompt tokens run so far are
  // kept for the next generation as any others. Null: never stops in the prompt.
  StopCallback stop;
};

// How many of `prompt`'s first tokens a generation can take from a cache holding the K/V of
// `cached`: their common prefix, but never the prompt's last token (it runs to give the first
// logits).
int64_t reusable_prefix(std::span<const int32_t> cached, std::span<const int32_t> prompt);

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
  // The result's generation.reused_tokens says how many prompt tokens came from the kept cache.
  Result<SessionResult> generate(std::span<const int32_t> prompt, int32_t n_predict, int32_t eos_token,
                                 Sampler& sampler, const TokenCallback& on_token);

  // Tokens whose K/V the session holds from its last generation (0: none kept).
  int64_t cached_tokens() const { return int64_t(kept_.tokens.size()); }
  // Drops the kept KV cache (its memory with it).
  void forget();

  // A kept cache and the tokens of its first slots, to move between sessions on the same model
  // and variant (a server's pool of finished requests' caches). A cache with no tokens is only
  // memory to decode in.
  struct Kept {
    std::optional<KvCache> cache;
    std::vector<int32_t> tokens;
  };
  // Moves the kept cache out (the session keeps nothing).
  Kept release_cache();
  // Takes `kept` as its own kept cache (dropping any it had).
  void adopt_cache(Kept kept);

 private:
  // Prompt tokens of the kept cache a generation of `prompt` needing `slots` slots (and
  // `positions` positions) can start from; makes the cache (copying those) when it is missing,
  // too small or made for another model shape.
  int64_t prepare_cache(std::span<const int32_t> prompt, int64_t slots, int64_t positions);

  const Model& model_;
  std::shared_ptr<const Variant> variant_;
  SessionOptions options_;
  Kept kept_;
  std::shared_ptr<ControllerMemory> controller_memory_;  // options_.controller_memory, or its own
};

}  // namespace bitsplit
