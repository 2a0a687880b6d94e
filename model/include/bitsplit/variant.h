// A fine-tuned variant of a loaded base model: the BitDelta sign planes and scales of one
// delta file, held in memory beside the base and applied inside the kernels (the variant's
// weights are never materialised). Many variants share one base; a forward pass, a plain or a
// speculative generation takes the variant to run as a parameter.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/delta_format.h"
#include "bitsplit/model.h"
#include "bitsplit/variant_cache.h"
#include "bitsplit/status.h"
#include "bitsplit/weights.h"

namespace bitsplit {

// One projection's sign plane and scales, resident in memory.
struct VariantSigns {
  int64_t out = 0, in = 0, row_bytes = 0;
  bool alpha_per_row = true;
  std::vector<uint8_t> signs;  // out x row_bytes; bit set = -1
  std::vector<float> alpha;    // out values, or 1
  cpu::SignPlaneView view() const { return {signs.data(), alpha.data(), out, in, row_bytes, alpha_per_row}; }
  float alpha_of(int64_t row) const { return alpha[alpha_per_row ? size_t(row) : 0]; }
};

class Variant {
 public:
  // Reads every tensor of `delta` into memory and checks it against the loaded base: the
  // delta's base identity against `base_source` (the file `base` was loaded from) and every
  // tensor's shape against the model. Errors name the delta file and the tensor.
  static Result<std::shared_ptr<const Variant>> load(const DeltaFile& delta, const Model& base,
                                                     const WeightSource& base_source, std::string name);
  // A variant built in memory (tests, `eval`): sign planes and full tensors by weight name.
  static Result<std::shared_ptr<const Variant>> make(const Model& base, std::string name,
                                                     std::map<std::string, VariantSigns> signs,
                                                     std::map<std::string, std::vector<float>> full);

  const std::string& name() const { return name_; }
  // The sign plane of a projection ("blk.0.attn_q.weight", "output.weight", "token_embd.weight"), or null.
  const VariantSigns* signs(const std::string& weight) const;
  // A tensor the variant replaces in full (norms, biases), or null.
  const std::vector<float>* full(const std::string& weight) const;
  // `base` unless the variant replaces `weight` in full.
  const std::vector<float>& pick(const std::string& weight, const std::vector<float>& base) const {
    const std::vector<float>* f = full(weight);
    return f ? *f : base;
  }
  // Resident bytes (signs, scales and full tensors).
  uint64_t bytes() const { return bytes_; }
  int64_t sign_weights() const { return sign_weights_; }
  // Which weights the variant touches, for `info`.
  std::vector<std::string> sign_names() const;
  std::vector<std::string> full_names() const;

 private:
  Variant() = default;
  std::string name_;
  std::map<std::string, std::shared_ptr<const VariantSigns>> signs_;
  std::map<std::string, std::vector<float>> full_;
  uint64_t bytes_ = 0;
  int64_t sign_weights_ = 0;
};

// Makes the variant's sign planes resident on the base's backend beside D (nothing on the CPU)
// and returns the handles that keep them there: the signs leave when the last copy goes.
Result<std::vector<std::shared_ptr<const void>>> make_resident(const Model& base, const Variant& variant);

// The variants one loaded base serves: names registered against delta files (opened and
// checked against the base when registered), loaded on first use through a VariantCache
// under a byte budget. Thread-safe; concurrent requests for a variant being loaded share one
// load. Cold loads are timed and reported through `log` (one line each).
class VariantRegistry {
 public:
  VariantRegistry(const Model& base, const WeightSource& base_source, VariantCacheOptions options,
                  std::function<void(const std::string&)> log = nullptr);
  // Registers `name` for the delta file at `path`. Errors: a name used twice, a file that is
  // not a delta, or a delta made against another base (naming both).
  Status add(const std::string& name, const std::string& path);
  // "NAME=FILE", as `--delta` takes it.
  Status add_spec(const std::string& spec);
  Result<std::shared_ptr<const Variant>> get(const std::string& name);
  // Forgets `name`: later get() calls fail; a variant already handed out stays valid (and its
  // signs resident) until its last holder lets it go. An error for a name not registered.
  Status remove(const std::string& name);
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  // Whether `name`'s sign planes are loaded now (in the cache).
  bool resident(const std::string& name) const { return cache_.resident(name); }
  VariantCacheStats stats() const { return cache_.stats(); }

 private:
  const Model& base_;
  const WeightSource& base_source_;
  std::function<void(const std::string&)> log_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const DeltaFile>> files_;
  VariantCache<Variant> cache_;
};

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

// The [out, in] shape of a weight in a model of this configuration ("blk.3.ffn_down.weight"),
// or an error for a name the model does not have.
struct WeightShape {
  int64_t out = 0, in = 0;
};
Result<WeightShape> weight_shape(const Model& model, const std::string& weight);

}  // namespace bitsplit
