// engine/eval: BitDeltas computed in memory from two loaded models, and the fitting of their
// scales on a text (engine/eval/variant_build.cpp) — what `bitsplit delta` writes and
// `bitsplit eval --base` measures. A Variant is made from the result (variant.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bitsplit/model.h"
#include "bitsplit/quant.h"
#include "bitsplit/status.h"
#include "bitsplit/variant.h"

namespace bitsplit {

// A BitDelta computed in memory from two loaded f32 models of the same shape, as `bitsplit
// delta` writes it: sign planes (α = mean |Δ| per row or per matrix) for the projections and
// the token embedding, full tensors for norms and biases that differ.
struct DeltaParts {
  std::map<std::string, VariantSigns> signs;
  std::map<std::string, std::vector<float>> full;
};
Result<DeltaParts> compute_delta(const Model& base, const Model& finetuned, quant::DeltaAlpha alpha);

// Scale distillation. Each projection's α is refitted so that (α ⊙ S)·x best matches Δ·x over
// the inputs x the fine-tuned model sees on a calibration text (least squares, closed form per
// row, or per matrix for matrix scales). This is a layer-wise fit of the outputs; the end-to-end
// logit-KL step is distill_delta_kl below. `bitsplit eval` measures what each gains in KL.
struct DistillReport {
  int64_t tokens = 0, matrices = 0;
  double rel_error_before = 0, rel_error_after = 0;  // Σ|Δx − α(Sx)|² / Σ|Δx|² over all projections
};
Result<DistillReport> distill_delta_scales(const Model& base, const Model& finetuned, const std::vector<int32_t>& tokens,
                                           int32_t ctx, int32_t bos, DeltaParts& delta,
                                           const std::function<void(int64_t done, int64_t total)>& on_progress);

// End-to-end scale distillation on the logit KL (after distill_delta_scales' layer-wise fit):
// one multiplier per sign matrix (its α vector scaled as a whole), tuned by coordinate search
// to minimise the mean KL(fine-tune ‖ base + delta) over the text, f32 on both sides. `sweeps`
// passes over the matrices with steps ±25 %, ±12.5 %, ...; a change is kept only when the KL
// falls, so kl_after <= kl_before. At most max_tokens tokens of the text are used.
struct KlDistillReport {
  int64_t tokens = 0, evaluations = 0, changed = 0;
  double kl_before = 0, kl_after = 0;
};
Result<KlDistillReport> distill_delta_kl(const Model& base, const Model& finetuned, const std::vector<int32_t>& tokens,
                                         int32_t ctx, int32_t bos, DeltaParts& delta, int sweeps, int64_t max_tokens,
                                         const std::function<void(int64_t done, int64_t total)>& on_progress);

}  // namespace bitsplit
