// A fine-tuned variant of a loaded base model: the BitDelta sign planes and scales of one
// delta file, or the low-rank factors of a LoRA adapter, held in memory beside the base and
// applied inside the passes (the variant's weights are never materialised). Many variants share
// one base; a forward pass, a plain or a speculative generation takes the variant to run as a
// parameter.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/delta_format.h"
#include "bitsplit/lora_format.h"
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

// One projection's LoRA change ΔW = scale · U·V (U: out x rank, V: rank x in, row-major, f32),
// applied beside the base's product: y += scale · U·(V·x), in f32 on the CPU in both tiers
// (each product one dot_f32 per element, so a row's result does not depend on its batch).
struct VariantLora {
  int64_t out = 0, in = 0, rank = 0;
  float scale = 1.0f;
  std::vector<float> up, down;
  // y[r][o] += scale · Σ_k U[o][k] · (Σ_i V[k][i] · x[r][i]) for rows r of x ([rows x in]) and y ([rows x out]).
  void apply(const float* x, int64_t rows, float* y) const;
  // An embedding row's change: row[j] += scale · Σ_k U[token][k] · V[k][j].
  void add_row(int64_t token, float* row) const;
  uint64_t bytes() const { return 4 * (up.size() + down.size()); }
};

// The small tensors of a layer a variant may replace in full: its norms, biases, the router and
// the shared expert's gate (names in layer_tensor_name).
enum class LayerTensor { kAttnNorm, kBiasQ, kBiasK, kBiasV, kQNorm, kKNorm, kFfnNorm, kPostAttnNorm, kPostFfnNorm,
                         kRouter, kShexpGate, kCount };
// "attn_norm.weight", "attn_q.bias", ... (the name after "blk.N.").
const char* layer_tensor_name(LayerTensor t);

// What a variant changes in one projection (either may be null).
struct ProjectionChange {
  const VariantSigns* signs = nullptr;
  const VariantLora* lora = nullptr;
};

// What a variant changes in one layer, resolved from its tensor names once (Variant::make), so a
// pass looks nothing up by name in its layer loop: the small tensors it replaces (null: the
// base's) and each projection's change, by slot (layer_projections' order).
struct VariantLayer {
  std::array<const std::vector<float>*, size_t(LayerTensor::kCount)> full{};
  std::vector<ProjectionChange> projections;
};

class Variant {
 public:
  // Reads every tensor of `delta` into memory and checks it against the loaded base: the
  // delta's base identity against `base_source` (the file `base` was loaded from) and every
  // tensor's shape against the model. Errors name the delta file and the tensor.
  static Result<std::shared_ptr<const Variant>> load(const DeltaFile& delta, const Model& base,
                                                     const WeightSource& base_source, std::string name);
  // Reads a LoRA adapter's factors and checks them against the base (architecture, every
  // adapted weight's shape); `scale` multiplies the adapter's alpha / rank.
  static Result<std::shared_ptr<const Variant>> load(const LoraFile& lora, const Model& base, std::string name,
                                                     float scale);
  // A variant built in memory (tests, `eval`): sign planes, full tensors and LoRA factors by
  // weight name.
  static Result<std::shared_ptr<const Variant>> make(const Model& base, std::string name,
                                                     std::map<std::string, VariantSigns> signs,
                                                     std::map<std::string, std::vector<float>> full,
                                                     std::map<std::string, VariantLora> lora = {});

  const std::string& name() const { return name_; }
  // The sign plane of a projection ("blk.0.attn_q.weight", "output.weight", "token_embd.weight"), or null.
  const VariantSigns* signs(const std::string& weight) const;
  // The LoRA change of a projection ("output.weight" on a model whose head is the embedding
  // takes token_embd's), or null.
  const VariantLora* lora(const std::string& weight) const;
  // A tensor the variant replaces in full (norms, biases), or null.
  const std::vector<float>* full(const std::string& weight) const;
  // `base` unless the variant replaces `weight` in full.
  const std::vector<float>& pick(const std::string& weight, const std::vector<float>& base) const {
    const std::vector<float>* f = full(weight);
    return f ? *f : base;
  }
  // Layer `layer`'s changes (by slot and tensor, no names).
  const VariantLayer& layer(int64_t layer) const { return layers_[size_t(layer)]; }
  // A layer's tensor `t`: `base` unless the variant replaces it (a tensor the base lacks stays
  // absent).
  const std::vector<float>& pick(int64_t layer, LayerTensor t, const std::vector<float>& base) const {
    const std::vector<float>* f = layers_[size_t(layer)].full[size_t(t)];
    return f && !base.empty() ? *f : base;
  }
  // Resident bytes (signs, scales, full tensors and LoRA factors).
  uint64_t bytes() const { return bytes_; }
  int64_t sign_weights() const { return sign_weights_; }
  // Which weights the variant touches, for `info`.
  std::vector<std::string> sign_names() const;
  std::vector<std::string> full_names() const;
  std::vector<std::string> lora_names() const;
  // What the variant is, for logs: "BitDelta", "LoRA" (or both).
  std::string kind() const;

 private:
  Variant() = default;
  // Fills layers_ from the maps below (their entries' addresses are stable: the maps never change
  // after make()).
  void resolve_layers(const ModelConfig& c);
  std::string name_;
  std::map<std::string, std::shared_ptr<const VariantSigns>> signs_;
  std::map<std::string, std::vector<float>> full_;
  std::map<std::string, std::shared_ptr<const VariantLora>> lora_;
  std::vector<VariantLayer> layers_;
  uint64_t bytes_ = 0;
  int64_t sign_weights_ = 0;
};

// Makes the variant's sign planes resident on the base's backend beside D (nothing on the CPU)
// and returns the handles that keep them there: the signs leave when the last copy goes.
Result<std::vector<std::shared_ptr<const void>>> make_resident(const Model& base, const Variant& variant);

// Checks an adapter against a loaded base without reading its factors: the architecture and
// every adapted weight's shape. Errors name the adapter file and the tensor.
Status check_lora_base(const LoraFile& lora, const Model& base);

// "NAME=FILE" or "NAME=FILE:SCALE" (the suffix is a scale only when it is a number and
// FILE:SCALE is not itself a file), as --delta and --lora take them.
struct VariantSpec {
  std::string name, path;
  float scale = 1.0f;
};
Result<VariantSpec> parse_variant_spec(const std::string& spec);

// The variants one loaded base serves: names registered against delta files or LoRA adapters
// (opened and checked against the base when registered), loaded on first use through a VariantCache
// under a byte budget. Thread-safe; concurrent requests for a variant being loaded share one
// load. Cold loads are timed and reported through `log` (one line each).
class VariantRegistry {
 public:
  VariantRegistry(const Model& base, const WeightSource& base_source, VariantCacheOptions options,
                  std::function<void(const std::string&)> log = nullptr);
  // Registers `name` for the delta file or LoRA adapter at `path` (told apart by general.type),
  // a LoRA at `scale` (1: as trained). Errors: a name used twice, a file that is neither, a
  // delta made against another base (naming both), an adapter for another architecture or
  // shape, a scale given for a delta or not finite.
  Status add(const std::string& name, const std::string& path, float scale = 1.0f);
  // "NAME=FILE" as `--delta` and `--lora` take it, or "NAME=FILE:SCALE" for an adapter (the
  // suffix is read as a scale only when FILE:SCALE is not itself a file).
  Status add_spec(const std::string& spec);
  // Registers `name` for a variant already built in memory (e.g. a merged adapter of the
  // K-Merge pool).
  Status add_resident(const std::string& name, std::shared_ptr<const Variant> variant);
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
  struct Registered {
    std::shared_ptr<const DeltaFile> delta;  // one of the three
    std::shared_ptr<const LoraFile> lora;
    std::shared_ptr<const Variant> resident;
    float scale = 1.0f;
    std::string path() const { return delta ? delta->path : lora ? lora->path : "in memory"; }
  };
  std::map<std::string, Registered> files_;
  VariantCache<Variant> cache_;
};

// The [out, in] shape of a weight in a model of this configuration ("blk.3.ffn_down.weight"),
// or an error for a name the model does not have.
struct WeightShape {
  int64_t out = 0, in = 0;
};
Result<WeightShape> weight_shape(const Model& model, const std::string& weight);

}  // namespace bitsplit
