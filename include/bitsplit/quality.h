// Measuring quantisation quality against the f32 model: `bitsplit eval` (perplexity, KL
// divergence, top-1 agreement for each scheme) and `bitsplit imatrix` (per-column
// importance from activations).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bitsplit/convert.h"
#include "bitsplit/model.h"

namespace bitsplit {

struct EvalOptions {
  int32_t ctx = 128;          // tokens per window (the first is BOS)
  int64_t max_tokens = 0;     // 0 = the whole text
  int group = 64;             // group size of the bit-split and min/max schemes
  int32_t bos = -1;           // token that starts every window (-1: none)
  const ImportanceMatrix* imatrix = nullptr;
  std::vector<std::string> schemes;  // empty = all of eval_scheme_names()
};

struct EvalRow {
  std::string scheme;
  double vram_bits_per_weight = 0, ram_bits_per_weight = 0;  // over the split projections
  double perplexity = 0, kl_mean = 0, kl_p99 = 0, top1_agreement = 0;
};

struct EvalReport {
  int64_t tokens = 0;       // scored predictions
  int64_t windows = 0;
  double f32_perplexity = 0;
  std::vector<EvalRow> rows;
};

// "draft(R8)", "draft(R6)", "D+R6", "D+R8" (the engine's plane kernels: int8 activations per
// group, as the target model is defined), "D+R6/w", "D+R8/w" (the same weights with f32
// activations: the quantiser's weight error alone), "Q8_0", "minmax2", "minmax4" (weight
// round trips, f32 activations), "Q8_0/a8" (Q8_0 weights with activations rounded to int8
// per block of 32, as llama.cpp's CPU Q8_0 matmul computes: the fair peer of D+R8).
const std::vector<std::string>& eval_scheme_names();

// Quantises `model` with each scheme (weights dequantised back to f32, so both sides keep
// f32 logits) and compares each with the f32 model over `tokens`.
Result<EvalReport> evaluate_quality(const Model& model, const std::vector<int32_t>& tokens, const EvalOptions& options,
                                    const std::function<void(int64_t done, int64_t total)>& on_progress);

// Mean squared activation of every input column of every projection over `tokens`.
Result<ImportanceMatrix> collect_imatrix(const Model& model, const std::vector<int32_t>& tokens, int32_t ctx,
                                         int32_t bos, const std::function<void(int64_t done, int64_t total)>& on_progress,
                                         int64_t* n_tokens);

}  // namespace bitsplit
