// Plain (non-speculative) decoding over the forward pass, and the pieces it shares with
// speculative decoding: request checks, prefill, token emission.
#include "bitsplit/generate.h"

#include <chrono>
#include <optional>

#include "bitsplit/pass_batcher.h"

namespace bitsplit {

Status check_generation(const ModelConfig& c, size_t prompt_tokens, int32_t n_predict, int32_t prefill_chunk) {
  if (prompt_tokens == 0) return Status::error("the prompt is empty (no tokens to start from)");
  if (n_predict < 0) return Status::error("the number of tokens to generate must be >= 0");
  if (prefill_chunk <= 0) return Status::error("prefill chunk must be positive");
  const int64_t needed = int64_t(prompt_tokens) + n_predict;
  if (needed > c.n_ctx_train) {
    return Status::error("prompt (" + std::to_string(prompt_tokens) + " tokens) + " + std::to_string(n_predict) +
                         " new tokens exceed the model's context length of " + std::to_string(c.n_ctx_train) + " tokens");
  }
  return Status::ok();
}

Result<GenerationCache> generation_cache(const ModelConfig& c, KvCache* given, int64_t reuse, int64_t slots,
                                         int64_t positions, size_t prompt_tokens, std::optional<KvCache>& own) {
  if (!given) {
    own.emplace(c, slots);
    own->set_context(positions);
    return GenerationCache{&*own, 0};
  }
  if (given->n_layers() != c.n_layers || given->kv_dim() != c.kv_dim()) {
    return Status::error("the KV cache given to the generation was made for another model shape");
  }
  if (given->n_slots() < slots) {
    return Status::error("the KV cache given to the generation has " + std::to_string(given->n_slots()) +
                         " slots; this run needs " + std::to_string(slots));
  }
  if (reuse < 0 || reuse >= int64_t(prompt_tokens)) {
    return Status::error("cannot reuse " + std::to_string(reuse) + " cached tokens of a " +
                         std::to_string(prompt_tokens) + "-token prompt (at most all but the last)");
  }
  return GenerationCache{given, reuse};
}

Result<Prefilled> prefill(const Model& model, KvCache& cache, std::span<const int32_t> tokens, int32_t chunk, Pass pass,
                          const Variant* variant, bool last_logits, int32_t start, PassBatcher* batcher,
                          const StopCallback& stop) {
  if (chunk <= 0) return Status::error("prefill chunk must be positive");
  Prefilled done;
  for (size_t i = 0; i < tokens.size(); i += size_t(chunk)) {
    if (stop && stop()) {
      done.stopped = true;
      break;
    }
    const size_t n = std::min(tokens.size() - i, size_t(chunk));
    Batch batch = Batch::causal(tokens.subspan(i, n), start + int32_t(i));
    if (!last_logits || i + n < tokens.size()) batch.want_logits.assign(n, 0);
    BITSPLIT_ASSIGN_OR_RETURN(done.logits, run_forward(batcher, model, cache, batch, pass, variant));
    done.tokens = i + n;
  }
  return done;
}

bool TokenSink::emit(int32_t token) {
  ++stats_.generated_tokens;
  if (!on_token_(token)) return false;
  if (token == eos_) {
    stats_.stopped_at_eos = true;
    return false;
  }
  return stats_.generated_tokens < n_predict_;
}

Result<GenerationStats> generate(const Model& model, std::span<const int32_t> prompt, const GenerateOptions& options,
                                 Sampler& sampler, const TokenCallback& on_token, std::vector<float>* prompt_logits) {
  const ModelConfig& c = model.config();
  BITSPLIT_RETURN_IF_ERROR(check_generation(c, prompt.size(), options.n_predict, options.prefill_chunk));
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };

  const int64_t needed = int64_t(prompt.size()) + options.n_predict;
  std::optional<KvCache> own_cache;
  BITSPLIT_ASSIGN_OR_RETURN(const GenerationCache gc, generation_cache(c, options.cache, options.reuse, needed, needed,
                                                                        prompt.size(), own_cache));
  KvCache& cache = *gc.cache;
  const int64_t reuse = gc.reuse;
  PassBatcher::Membership member(options.batcher);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  GenerationStats stats;
  stats.prompt_tokens = int64_t(prompt.size());
  stats.reused_tokens = reuse;

  const auto t0 = Clock::now();
  BITSPLIT_ASSIGN_OR_RETURN(Prefilled prompt_run,
                            prefill(model, cache, prompt.subspan(size_t(reuse)), options.prefill_chunk, Pass::kDefault,
                                    options.variant, true, int32_t(reuse), options.batcher, options.stop));
  stats.prompt_seconds = seconds(t0, Clock::now());
  if (prompt_run.stopped) {
    stats.stopped = true;
    stats.prompt_tokens = reuse + int64_t(prompt_run.tokens);
    return stats;
  }
  std::vector<float> logits = std::move(prompt_run.logits);
  if (prompt_logits) *prompt_logits = logits;

  const auto t1 = Clock::now();
  TokenSink sink(on_token, options.eos_token, options.n_predict, stats);
  for (bool more = options.n_predict > 0; more;) {
    const int32_t token = sampler.sample(logits, history);
    if (options.on_logits) options.on_logits(token, logits);
    history.push_back(token);
    if (!(more = sink.emit(token))) break;
    const int32_t pos = int32_t(history.size() - 1);
    Batch batch = Batch::causal(std::span<const int32_t>(&history.back(), 1), pos);
    BITSPLIT_ASSIGN_OR_RETURN(logits, run_forward(options.batcher, model, cache, batch, Pass::kDefault, options.variant));
  }
  stats.generate_seconds = seconds(t1, Clock::now());
  return stats;
}

}  // namespace bitsplit
