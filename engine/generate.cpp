// Plain (non-speculative) decoding loop over the reference forward pass.
#include "bitsplit/generate.h"

#include <chrono>

namespace bitsplit {

Result<GenerationStats> generate(const Model& model, std::span<const int32_t> prompt, const GenerateOptions& options,
                                 Sampler& sampler, const TokenCallback& on_token, std::vector<float>* prompt_logits) {
  const ModelConfig& c = model.config();
  if (prompt.empty()) return Status::error("the prompt is empty (no tokens to start from)");
  if (options.n_predict < 0) return Status::error("the number of tokens to generate must be >= 0");
  if (options.prefill_chunk <= 0) return Status::error("prefill chunk must be positive");
  const int64_t needed = int64_t(prompt.size()) + options.n_predict;
  if (needed > c.n_ctx_train) {
    return Status::error("prompt (" + std::to_string(prompt.size()) + " tokens) + " + std::to_string(options.n_predict) +
                         " new tokens exceed the model's context length of " + std::to_string(c.n_ctx_train) + " tokens");
  }
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };

  KvCache cache(c, needed);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  GenerationStats stats;
  stats.prompt_tokens = int64_t(prompt.size());

  const auto t0 = Clock::now();
  std::vector<float> logits;
  for (size_t start = 0; start < prompt.size(); start += size_t(options.prefill_chunk)) {
    const size_t n = std::min(prompt.size() - start, size_t(options.prefill_chunk));
    Batch batch = Batch::causal(prompt.subspan(start, n), int32_t(start));
    BITSPLIT_ASSIGN_OR_RETURN(logits, forward_reference(model, cache, batch, nullptr, Tier::kDefault, options.variant));
  }
  stats.prompt_seconds = seconds(t0, Clock::now());
  if (prompt_logits) *prompt_logits = logits;

  const auto t1 = Clock::now();
  for (int32_t i = 0; i < options.n_predict; ++i) {
    const int32_t token = sampler.sample(logits, history);
    history.push_back(token);
    ++stats.generated_tokens;
    if (!on_token(token)) break;
    if (token == options.eos_token) {
      stats.stopped_at_eos = true;
      break;
    }
    if (i + 1 == options.n_predict) break;
    const int32_t pos = int32_t(history.size() - 1);
    Batch batch = Batch::causal(std::span<const int32_t>(&history.back(), 1), pos);
    BITSPLIT_ASSIGN_OR_RETURN(logits, forward_reference(model, cache, batch, nullptr, Tier::kDefault, options.variant));
  }
  stats.generate_seconds = seconds(t1, Clock::now());
  return stats;
}

}  // namespace bitsplit
