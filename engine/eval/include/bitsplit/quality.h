// Measuring quantisation quality against the f32 model: `bitsplit eval` (perplexity, KL
// divergence, top-1 agreement for each scheme) and `bitsplit imatrix` (per-column
// importance from activations).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bitsplit/imatrix.h"
#include "bitsplit/model.h"
#include "bitsplit/variant.h"
#include "bitsplit/variant_build.h"

namespace bitsplit {

// log-softmax of n logits, in double (the KL divergences here are computed from these).
void log_softmax(const float* logits, int64_t n, std::vector<double>& out);

struct EvalOptions {
  int32_t ctx = 128;          // tokens per window (the first is BOS)
  int64_t max_tokens = 0;     // 0 = the whole text
  int group = 64;             // group size of the bit-split and min/max schemes
  int32_t bos = -1;           // token that starts every window (-1: none)
  // Windows as llama-perplexity makes them, so KL divergences compare with its
  // --kl-divergence at the same -c / --chunks: the text (after a BOS) in chunks of ctx tokens,
  // each chunk's first token replaced by BOS (bos < 0, as for a vocabulary that adds none: no
  // BOS anywhere), only the second half of each chunk scored
  // (positions ctx/2 .. ctx-2); max_tokens > 0 takes max_tokens / (ctx/2) chunks (at least one).
  // false: windows of [BOS] + ctx - 1 text tokens, overlapping by one, every position scored.
  bool llama_windows = false;
  const ImportanceMatrix* imatrix = nullptr;
  // The importance file's input covariances: the bit-split schemes' drafts are fitted with error
  // feedback where a projection's input has one (as convert does with such a file).
  const InputCovariances* covariances = nullptr;
  std::vector<std::string> schemes;  // empty = all of eval_scheme_names()
  // > 0: the bit-split schemes' draft planes get per-tensor bits within this VRAM budget, as
  // `bitsplit convert --draft-bpw` chooses them (measured on this model's weights).
  double draft_bpw = 0.0;
};

struct EvalRow {
  std::string scheme;
  double vram_bits_per_weight = 0, ram_bits_per_weight = 0;  // over the split projections
  double perplexity = 0, kl_mean = 0, kl_p99 = 0, top1_agreement = 0;
};

struct EvalReport {
  std::string draft_bits;   // with draft_bpw: the mix chosen (describe_draft_bits)
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

// One model scored against a reference: a model, the pass to run, and a variant (or null).
struct ScoredModel {
  std::string name;
  const Model* model = nullptr;
  Pass pass = Pass::kDefault;
  const Variant* variant = nullptr;
  // Called before each of its forward passes (eval sets the shared split model's target
  // activations for the scheme); may be empty.
  std::function<void()> prepare;
};
struct Score {
  std::string name;
  double perplexity = 0, kl_mean = 0, kl_p99 = 0, top1_agreement = 0;
};
struct ScoreReport {
  int64_t tokens = 0, windows = 0;
  double reference_perplexity = 0;
  std::vector<Score> rows;  // in the order of the candidates
};
// KL(reference || candidate), perplexity and top-1 agreement over windows of `tokens` ([BOS] +
// up to ctx - 1 tokens each).
// llama_windows: EvalOptions::llama_windows.
Result<ScoreReport> score_against(const Model& reference, const std::vector<ScoredModel>& candidates,
                                  const std::vector<int32_t>& tokens, int32_t ctx, int32_t bos, int64_t max_tokens,
                                  const std::function<void(int64_t done, int64_t total)>& on_progress,
                                  bool llama_windows = false);

// `bitsplit eval --base`: a fine-tuned model's BitDelta variant on its base, scored against
// the f32 fine-tuned model, beside the fine-tuned model converted directly and the base alone.
struct VariantEvalOptions {
  int32_t ctx = 128;
  int64_t max_tokens = 0;
  int group = 64;
  int32_t bos = -1;
  const std::vector<int32_t>* distill_tokens = nullptr;  // adds distilled-scale rows
  int32_t distill_ctx = 128;
  int kl_sweeps = 2;              // then the end-to-end KL refinement (distill_delta_kl); 0: none
  int64_t kl_max_tokens = 256;    // of the distillation text, for that refinement
};
struct VariantEvalReport {
  ScoreReport scores;
  DistillReport distill_row, distill_matrix;  // when distill_tokens
  KlDistillReport distill_kl;                 // per-row scales, refined on the logit KL
  uint64_t delta_bytes_row = 0, delta_bytes_matrix = 0;  // sign planes + scales + full tensors
  uint64_t base_split_bytes_r8 = 0, base_split_bytes_r6 = 0;  // D + R planes of the base
};
Result<VariantEvalReport> evaluate_variant_quality(const Model& base, const Model& finetuned,
                                                   const std::vector<int32_t>& tokens, const VariantEvalOptions& options,
                                                   const std::function<void(int64_t done, int64_t total)>& on_progress);

// Mean squared activation of every input column of every projection over `tokens`; with
// covariances, also each projection input's second-moment matrix E[x x^T] (cols^2 floats per
// distinct input: 2.4 GB for Qwen2.5-0.5B, whose ffn_down reads 4864 columns).
Result<ImportanceMatrix> collect_imatrix(const Model& model, const std::vector<int32_t>& tokens, int32_t ctx,
                                         int32_t bos, const std::function<void(int64_t done, int64_t total)>& on_progress,
                                         int64_t* n_tokens, InputCovariances* covariances = nullptr);

}  // namespace bitsplit
