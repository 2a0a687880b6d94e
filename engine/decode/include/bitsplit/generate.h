// Autoregressive generation with the reference model: prompt prefill, then one token at a
// time through the sampler, reporting each token as it is produced.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "bitsplit/model.h"
#include "bitsplit/sampling.h"

namespace bitsplit {
class PassBatcher;
}

namespace bitsplit {

// Called with each generated token; return false to stop.
using TokenCallback = std::function<bool(int32_t token)>;
// Called with each generated token just before the TokenCallback, with the target's logits
// [n_vocab] at the position that chose it (the raw logits: before temperature, penalties and
// filters), for log-probabilities. The span is valid during the call only.
using LogitsCallback = std::function<void(int32_t token, std::span<const float> logits)>;
// Polled before each prompt chunk's forward pass; true stops the generation there, before the
// chunk (GenerationStats::stopped). A long prompt runs in many chunks, so an abort (the C API's
// bitsplit_session_abort) takes effect within one pass instead of after the whole prompt.
using StopCallback = std::function<bool()>;

struct GenerateOptions {
  int32_t n_predict = 64;
  int32_t eos_token = -1;       // generation stops after this token (-1: never)
  int32_t prefill_chunk = 256;  // prompt tokens per forward pass
  const Variant* variant = nullptr;  // a fine-tuned variant of the model (variant.h); null: the base
  // Concurrent generations on the model: passes combined with theirs (pass_batcher.h); null: alone.
  PassBatcher* batcher = nullptr;
  LogitsCallback on_logits;  // optional
  StopCallback stop;         // optional
  // A cache to decode in (null: one of prompt + n_predict slots made for the run), at least
  // prompt + n_predict slots, whose first `reuse` slots already hold this model's (and
  // variant's) K/V of the prompt's first `reuse` tokens at positions 0.. (an earlier generation's:
  // Session keeps them); those are not run again. reuse < prompt size. Its context()
  // (KvCache::set_context) must be prompt + n_predict, as a cache made for the run has: a
  // LongRoPE model picks its factors by it. Session::generate does all this.
  KvCache* cache = nullptr;
  int64_t reuse = 0;
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t reused_tokens = 0;  // of prompt_tokens, those whose K/V came from an earlier generation
  double prompt_seconds = 0.0;
  int64_t generated_tokens = 0;
  double generate_seconds = 0.0;
  bool stopped_at_eos = false;
  // The stop callback ended the generation in its prompt: prompt_tokens then counts the tokens
  // whose K/V were written (the reused ones included), and no token was generated.
  bool stopped = false;
  // Of the prompt tokens run (the reused ones took no time).
  double prompt_tokens_per_second() const {
    return prompt_seconds > 0 ? double(prompt_tokens - reused_tokens) / prompt_seconds : 0.0;
  }
  double generate_tokens_per_second() const { return generate_seconds > 0 ? generated_tokens / generate_seconds : 0.0; }
};


// ---- Pieces plain and speculative generation share ----

// The request against the model: a non-empty prompt, n_predict >= 0, prefill_chunk > 0, and
// prompt + n_predict within the model's context length. Errors say which, with the numbers.
Status check_generation(const ModelConfig& config, size_t prompt_tokens, int32_t n_predict, int32_t prefill_chunk);

// The cache a generation of `positions` positions decodes in, and how many of the prompt's first
// tokens it already holds: `given` with its first `reuse` slots kept (checked: the model's layers
// and kv width, at least `slots` slots, 0 <= reuse < prompt_tokens), or, when null, a fresh
// cache of `slots` slots made in `own` for `positions` positions (its context: the LongRoPE
// factor set plain decoding of that sequence picks) with nothing kept.
struct GenerationCache {
  KvCache* cache = nullptr;
  int64_t reuse = 0;
};
Result<GenerationCache> generation_cache(const ModelConfig& config, KvCache* given, int64_t reuse, int64_t slots,
                                         int64_t positions, size_t prompt_tokens, std::optional<KvCache>& own);

// What prefill ran: its first `tokens` tokens (all of them unless stopped), and with last_logits
// the logits of the last token when it ran.
struct Prefilled {
  std::vector<float> logits;
  size_t tokens = 0;
  bool stopped = false;  // `stop` said so before a chunk
};

// Runs `tokens` through the model at positions and cache slots start.. in batches of `chunk`
// tokens (each sees every slot before it). With last_logits, returns the logits of the last
// token; otherwise computes none. With a batcher, each chunk's pass joins other generations'.
// `stop` (optional) is polled before each chunk; the chunks run before it said stop keep their K/V.
Result<Prefilled> prefill(const Model& model, KvCache& cache, std::span<const int32_t> tokens, int32_t chunk, Pass pass,
                          const Variant* variant, bool last_logits, int32_t start = 0, PassBatcher* batcher = nullptr,
                          const StopCallback& stop = {});

// Hands generated tokens to the callback and counts them; says when generation stops.
class TokenSink {
 public:
  TokenSink(const TokenCallback& on_token, int32_t eos_token, int32_t n_predict, GenerationStats& stats)
      : on_token_(on_token), eos_(eos_token), n_predict_(n_predict), stats_(stats) {}
  // Emits one token; false once generation must stop (the callback asked to, the token was the
  // end-of-sequence token, or n_predict tokens have been emitted).
  bool emit(int32_t token);

 private:
  const TokenCallback& on_token_;
  int32_t eos_, n_predict_;
  GenerationStats& stats_;
};

// Generates up to n_predict tokens after `prompt` (which must be non-empty). Errors if the
// prompt plus n_predict exceed the model's context length. If `prompt_logits` is given, it
// receives the logits at the last prompt position.
Result<GenerationStats> generate(const Model& model, std::span<const int32_t> prompt, const GenerateOptions& options,
                                 Sampler& sampler, const TokenCallback& on_token,
                                 std::vector<float>* prompt_logits = nullptr);

}  // namespace bitsplit
