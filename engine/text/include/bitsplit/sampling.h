// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition penalty; deterministic
// for a given seed.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit {

// The repetition penalty's range: a logit (|logit| < 3e35) divided or multiplied by it stays finite.
inline constexpr float kMinRepeatPenalty = 1e-3f;
inline constexpr float kMaxRepeatPenalty = 1e3f;

struct SamplingParams {
  float temperature = 0.8f;  // 0: greedy (argmax); >= 0 (validate)
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off; kMinRepeatPenalty .. kMaxRepeatPenalty
  int32_t repeat_last_n = 64;
  uint64_t seed = 0;

  bool greedy() const { return temperature <= 0.0f; }
  // Errors name the option and the allowed range. The one check of these values: every front
  // end (CLI, server, C API) reaches it through generation_config (generation_args.h).
  Status validate() const;
};

// Index of the largest logit; the lowest index wins ties.
int32_t argmax(std::span<const float> logits);

// The k largest logits as (logit, token), best first; the lower token wins ties; -inf and NaN
// are never taken (fewer than k come back when the row has fewer finite logits). O(n·k): for
// the small k of drafting and log-probability alternatives.
std::vector<std::pair<float, int32_t>> top_logits(std::span<const float> logits, int32_t k);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  const SamplingParams& params() const { return params_; }
  // Picks the next token. `history` is the context so far (for the repetition penalty).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The distribution sample() draws from (after penalties, filters and temperature); zero
  // outside the kept candidates. For greedy, one-hot at the argmax.
  std::vector<float> distribution(std::span<const float> logits, std::span<const int32_t> history) const;

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace bitsplit
