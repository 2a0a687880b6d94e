// engine/model/: a Llama-family model — configuration from GGUF metadata, weights (f32, Q8_0
// blocks or bit-split planes computed on the model's Backend), the KV cache with explicit slots,
// token batches with arbitrary attention masks, and forward_pass: the engine's forward pass, f32
// for f32 weights, the Q8_0 kernel for Q8_0 blocks and the plane kernels' exact arithmetic for
// planes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bitsplit/backend.h"
#include "bitsplit/cpu.h"
#include "bitsplit/imatrix.h"
#include "bitsplit/model_shape.h"
#include "bitsplit/planes.h"
#include "bitsplit/quant.h"
#include "bitsplit/status.h"
#include "bitsplit/weights.h"

namespace bitsplit {

enum class Architecture { kLlama, kQwen2, kQwen3, kGemma2, kGemma3, kPhi3, kQwen2Moe, kQwen3Moe };
inline constexpr const char* kSupportedArchitectures =
    "llama (also Mixtral-style mixture of experts), qwen2, qwen3, gemma2, gemma3, phi3, qwen2moe, qwen3moe";

// A model's configuration: its shape (model_shape.h: widths, heads, RoPE, norms, gemma's scales
// and caps, the sliding window, the experts) and what only the CPU pass and the loader read.
struct ModelConfig : ModelShape {
  Architecture arch = Architecture::kLlama;
  std::string arch_name;
  int64_t n_ctx_train = 0;
  bool tied_output = false;   // no output.weight: logits use token_embd.weight
  bool has_qkv_bias = false;  // qwen2
  bool has_qk_norm = false;   // qwen3, gemma3
  // Gemma: the attention and FFN outputs pass through their own RMSNorm (post_attention_norm,
  // post_ffw_norm) before the residual add.
  bool has_post_norms = false;
  // Sliding-window attention (ModelShape::sliding_window): the layers with swa_layers[l] != 0
  // slide, and use rope_base_swa and rope_freq_scale_swa.
  std::vector<uint8_t> swa_layers;  // n_layers entries, or empty (no sliding window)
  float rope_base_swa = 10000.0f;
  float rope_freq_scale_swa = 1.0f;  // gemma3's local layers take no RoPE scaling; others their own
  // LongRoPE (Phi-3's 128k models: tensors rope_factors_short/long.weight, per-frequency divisors
  // of theta): a sequence meant to reach more than rope_original_context positions
  // (KvCache::context()) turns by the long factors, any other by the short ones
  // (Model::rope_freq_factors(context)); cos and sin are multiplied by rope_attn_factor in every
  // layer either way.
  int64_t rope_original_context = 0;  // > 0 with LongRoPE

  bool is_swa(int64_t layer) const { return !swa_layers.empty() && swa_layers[size_t(layer)] != 0; }
  float layer_rope_base(int64_t layer) const { return is_swa(layer) ? rope_base_swa : rope_base; }
  float layer_rope_freq_scale(int64_t layer) const { return is_swa(layer) ? rope_freq_scale_swa : rope_freq_scale; }
};

// Reads and validates the configuration; errors name the key and the supported values.
Result<ModelConfig> read_model_config(const WeightSource& source);

// One projection of a layer: the kind in its tensor name ("attn_q", "ffn_down"; "ffn_gate.3"
// for expert 3; "ffn_up_shexp" for the shared expert) and its shape [rows x cols].
struct ProjectionSlot {
  std::string kind;
  int64_t rows = 0, cols = 0;
};
// Every projection of a layer in placement order: attention, then the FFN (dense, or each
// expert's gate/up/down in expert order, then the shared expert's).
std::vector<ProjectionSlot> layer_projections(const ModelConfig& c);
// The kinds alone (placement_order takes them).
std::vector<std::string> projection_kinds(const ModelConfig& c);
// Slots in layer_projections' order: the attention's four, then each FFN's gate, up and down at
// ffn_slot(f), +1, +2 (f = 0: the dense FFN, or expert 0; f = e: expert e; f = n_expert: the
// shared expert).
inline constexpr size_t kSlotQ = 0, kSlotK = 1, kSlotV = 2, kSlotOutput = 3;
constexpr size_t ffn_slot(int64_t ffn) { return 4 + 3 * size_t(ffn); }

struct ExpertWeights {
  std::vector<float> w_gate, w_up, w_down;
};

struct LayerWeights {
  std::vector<float> attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm;
  std::vector<float> ffn_norm, w_gate, w_up, w_down;
  std::vector<float> post_attn_norm, post_ffn_norm;  // gemma only
  // Mixture of experts: the router [n_expert x n_embd], the experts, the shared expert and its
  // gate [n_embd] (qwen2moe).
  std::vector<float> ffn_gate_inp;
  std::vector<ExpertWeights> experts;
  std::vector<float> w_gate_shexp, w_up_shexp, w_down_shexp, ffn_gate_inp_shexp;
  // A projection by its kind (layer_projections); aborts on a kind the layer does not have.
  const std::vector<float>& projection(std::string_view kind) const;
  std::vector<float>& projection(std::string_view kind);
};

// Which model a forward pass computes on a model with bit-split planes.
enum class Pass {
  kDefault,  // the model's own (kDraft for a model loaded with draft_only, else kTarget)
  kTarget,   // D + R
  kDraft,    // D alone
};

class Variant;

// How the target pass (D + R) of a bit-split model sees its activations (docs/FORMAT.md,
// "Kernel arithmetic", steps 1 and 1b). The int8 rounding of step 1 costs more KL than the
// planes' weight error; its remainder, quantised to int8 too (step 1b), adds a second row per
// activation row to the planes it is used on.
enum class TargetActivations {
  kInt8 = 0,         // step 1 for D and R: one int8 row per activation row (fastest)
  kDraftRemainder = 1,  // D also multiplies the remainder (D carries most of the weight; the default)
  kRemainder = 2,    // D and R both multiply it (the weights' own error, at twice R's arithmetic)
};
// "int8", "draft-remainder", "remainder" (the CLI's --target-activations values).
const char* target_activations_name(TargetActivations a);

struct ModelLoadOptions {
  // For bit-split files: the draft model D instead of the target D + R.
  bool draft_only = false;
  // For bit-split files: keep the planes and compute projections with the CPU plane kernels
  // (int8 activations, docs/FORMAT.md "Kernel arithmetic") — the engine's target model.
  // false: reconstruct f32 weights and use the f32 reference path.
  bool keep_planes = true;
  // The kernels' execution context; null: the model makes its own.
  std::shared_ptr<cpu::CpuContext> cpu;
  // Where D·X runs; null: the CPU backend.
  std::shared_ptr<Backend> backend;
  // For other files: keep Q8_0 projections as blocks and compute them with the Q8_0 kernel
  // (activations int8 per 32, as llama.cpp's CPU backend does) instead of dequantising.
  // Such a model cannot be transformed() (its projections are not f32): decoding only.
  bool q8_0_kernels = false;
  // The target pass's activation arithmetic (bit-split models; the draft pass is always kInt8).
  TargetActivations target_activations = TargetActivations::kDraftRemainder;
  // Called after each layer's weights are loaded with (layers done, layers); returning false
  // cancels the load (Model::load then fails with "loading cancelled").
  std::function<bool(int64_t done, int64_t total)> progress;
  // A format-3 residual is copied into the process's own plane buffers (huge pages requested,
  // interleaved over NUMA nodes) instead of being used from the file map (`--no-mmap`), and the
  // Q8_0 embedding into the model's memory. The residual's copy is always made on a machine
  // with several NUMA nodes.
  bool copy_residual = false;
  // Only layers [first, last) of a source file are loaded (their norms, biases and f32
  // projections); the token embedding, the output head and every other layer stay empty. A
  // calibration runs a model this way, one block at a time (forward_layers), so its memory is
  // bounded by one block. Unset: the whole model. Errors: a range outside [0, n_layers].
  std::optional<std::pair<int64_t, int64_t>> only_layers;
};

// A projection as a model holds it beyond f32: bit-split planes or Q8_0 blocks (both null: f32).
struct HeldProjection {
  const SplitProjection* planes = nullptr;
  const std::vector<uint8_t>* q8_0 = nullptr;
};

// Applied to one weight matrix [rows x cols] (row-major), returning its replacement.
using WeightTransform =
    std::function<std::vector<float>(const std::string& name, const std::vector<float>& w, int64_t rows, int64_t cols)>;

// A loaded model: its configuration and weights. Projections are held in f32 (dequantised on
// load), as Q8_0 blocks (q8_0_kernels) or as bit-split planes computed on the model's Backend
// (keep_planes; without it a bit-split file's projections are reconstructed to f32); the rest
// (norms, biases, the embedding unless a bit-split model keeps its Q8_0 blocks) in f32.
class Model {
 public:
  static Result<Model> load(const WeightSource& source, const ModelLoadOptions& options = {});
  // A copy whose projections (attention, FFN, output head) pass through `projection` and
  // whose token embedding passes through `embedding`. The copy always has its own output
  // head, even when this model ties it to the embedding.
  Model transformed(const WeightTransform& projection, const WeightTransform& embedding) const;
  // A copy whose projections are split into planes by quant::split_row_ref (as `bitsplit
  // convert` does) and computed with the plane kernels; `importance` (per weight name, may
  // be null) weights the fit. The embedding passes through `embedding`. `draft_bits` (base name
  // "blk.3.attn_v" -> bits, may be null) overrides params.draft_bits per projection. A projection
  // whose input has a matrix in `covariances` (may be null) gets its draft fitted with error
  // feedback (split_projection_gptq; its errors are returned).
  Result<Model> with_split_planes(const quant::SplitParams& params,
                                  const std::map<std::string, std::vector<float>>* importance,
                                  const WeightTransform& embedding, std::shared_ptr<cpu::CpuContext> cpu,
                                  const std::map<std::string, int>* draft_bits = nullptr,
                                  const InputCovariances* covariances = nullptr) const;
  // Planes of a projection ("blk.0.attn_q.weight"), or null when it is held in f32.
  const SplitProjection* split(const std::string& weight) const;
  bool has_planes() const { return !splits_.empty(); }
  // Pins every plane buffer the CPU reads (the residual and the draft planes the CPU keeps) in
  // RAM with mlock(2), so the kernel never pages them out; returns the bytes locked, or an
  // error naming the locked-memory limit (nothing stays locked then). `--mlock`.
  Result<uint64_t> lock_planes() const;
  // A projection held as Q8_0 blocks (ggml layout, [out] rows of in/32 blocks), or null.
  const std::vector<uint8_t>* q8_0(const std::string& weight) const;
  bool has_q8_0() const { return !q8_0_.empty(); }
  // split() and q8_0() of a layer's projection by slot (layer_projections' order), resolved once
  // (on first use; thread-safe), so a pass looks nothing up by name in its layer loop.
  const HeldProjection& held(int64_t layer, size_t slot) const;
  cpu::CpuContext& cpu() const { return *cpu_; }
  bool has_cpu() const { return cpu_ != nullptr; }  // models built in memory (f32 tests) may have none
  Backend& backend() const { return *backend_; }
  Pass default_pass() const { return default_pass_; }
  // Emulates llama.cpp-style int8 activations on the f32 path: each projection's input is
  // rounded to int8 per block of `group` values (scale amax/127) before the f32 matmul.
  // 0 (the default) keeps f32 activations. Used by eval for a fair Q8_0 baseline.
  void set_activation_rounding(int group) { activation_rounding_ = group; }
  int activation_rounding() const { return activation_rounding_; }
  // f32 projections by BLAS sgemm instead of the reference matmul: several times faster over long
  // batches, but a row's result then depends on its batch (not batch invariant), so only a
  // calibration's statistics use it, never decoding or eval's scores. Off by default.
  void set_f32_gemm(bool on) { f32_gemm_ = on; }
  bool f32_gemm() const { return f32_gemm_; }
  // The target pass's activation arithmetic (ModelLoadOptions::target_activations).
  void set_target_activations(TargetActivations a) { target_activations_ = a; }
  TargetActivations target_activations() const { return target_activations_; }
  const ModelConfig& config() const { return config_; }
  // The token embedding in f32, [n_vocab x n_embd]. A bit-split model whose file stores it as Q8_0
  // holds the blocks instead (a quarter of the memory) and makes this f32 copy only on the first
  // call (thread-safe; the GPU draft's upload, transformed()); lookups use embed_row.
  const std::vector<float>& token_embd() const;
  // Row `token` of the embedding (n_embd floats): the f32 row, or the Q8_0 row dequantised (the
  // same values the f32 copy holds).
  void embed_row(int64_t token, float* out) const;
  // The embedding is held as Q8_0 blocks (token_embd() not made yet or not at all).
  bool embedding_in_q8_0() const { return !embedding_q8_0().empty(); }
  // Whether those blocks are read in place from the file's memory map (no copy in the process's
  // own memory; the container keeps the map alive), rather than copied at load.
  bool embedding_mapped() const { return token_embd_q8_0_owner_ != nullptr; }
  const std::vector<float>& output_norm() const { return output_norm_; }
  // The output head (token_embd when tied), [n_vocab x n_embd].
  const std::vector<float>& output() const { return config_.tied_output ? token_embd() : output_; }
  // The output head was made from the token embedding (a tied model split by convert, or by
  // with_split_planes): a variant's embedding delta applies to it too.
  bool output_from_embedding() const { return output_from_embedding_; }
  // RoPE's per-frequency divisors for a sequence of `context` positions (KvCache::context()): LongRoPE's
  // long factors when the model has them and context > config().rope_original_context, else
  // rope_freqs.weight or LongRoPE's short factors (empty: none).
  const std::vector<float>& rope_freq_factors(int64_t context) const {
    return !rope_freqs_long_.empty() && context > config_.rope_original_context ? rope_freqs_long_ : rope_freqs_;
  }
  const std::vector<float>& rope_freq_factors_long() const { return rope_freqs_long_; }
  const LayerWeights& layer(int64_t i) const { return layers_[size_t(i)]; }

 private:
  friend class ModelLoader;  // Model::load's steps (model_load.cpp)
  ModelConfig config_;
  std::vector<float> token_embd_, output_norm_, output_, rope_freqs_, rope_freqs_long_;
  // The embedding as Q8_0 blocks (n_vocab rows of n_embd / 32 blocks) when held so: in the
  // file's map (token_embd_q8_0_map_, kept valid by the owner) or copied; and its f32 copy made
  // on demand (shared by copies of the model: the same values).
  std::span<const uint8_t> embedding_q8_0() const {
    return token_embd_q8_0_owner_ ? token_embd_q8_0_map_ : std::span<const uint8_t>(token_embd_q8_0_copy_);
  }
  std::span<const uint8_t> token_embd_q8_0_map_;
  std::shared_ptr<const void> token_embd_q8_0_owner_;
  std::vector<uint8_t> token_embd_q8_0_copy_;
  struct LazyEmbedding {
    std::once_flag once;
    std::vector<float> values;
  };
  std::shared_ptr<LazyEmbedding> token_embd_lazy_;
  std::vector<LayerWeights> layers_;
  std::map<std::string, SplitProjection> splits_;
  std::map<std::string, std::vector<uint8_t>> q8_0_;
  // held()'s table: [layer * per_layer + slot], empty when every projection is f32. It points
  // into the maps above, so a copy of the model makes its own; a move keeps it (map nodes stay).
  struct HeldTable {
    std::once_flag once;
    std::vector<HeldProjection> slots;
    size_t per_layer = 0;
  };
  struct HeldTableRef {
    std::shared_ptr<HeldTable> table = std::make_shared<HeldTable>();
    HeldTableRef() = default;
    HeldTableRef(const HeldTableRef&) {}
    HeldTableRef(HeldTableRef&& o) noexcept : table(std::exchange(o.table, std::make_shared<HeldTable>())) {}
    HeldTableRef& operator=(const HeldTableRef&) {
      table = std::make_shared<HeldTable>();
      return *this;
    }
    HeldTableRef& operator=(HeldTableRef&& o) noexcept {
      table = std::exchange(o.table, std::make_shared<HeldTable>());
      return *this;
    }
  };
  HeldTableRef held_;
  std::shared_ptr<cpu::CpuContext> cpu_;
  std::shared_ptr<Backend> backend_;
  Pass default_pass_ = Pass::kTarget;
  int activation_rounding_ = 0;
  bool f32_gemm_ = false;
  TargetActivations target_activations_ = TargetActivations::kDraftRemainder;
  bool output_from_embedding_ = false;
};

// K and V of every layer for n_slots cache slots. Keys are stored after RoPE.
class KvCache {
 public:
  KvCache(const ModelConfig& config, int64_t n_slots);
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  KvCache copy() const;  // for tests (comparing caches)
  // Copies slot `from`'s K, V (every layer) and position to slot `to`.
  void move_slot(int64_t from, int64_t to);
  // Copies slots [0, slots) of `other` (same layers and kv width, at least `slots` slots) into
  // this cache's first slots: K, V of every layer and the positions.
  void copy_prefix(const KvCache& other, int64_t slots);
  // The RoPE position of the token last written to a slot (sliding-window attention reads it).
  int32_t position(int64_t slot) const { return pos_[size_t(slot)]; }
  void set_position(int64_t slot, int32_t pos) { pos_[size_t(slot)] = pos; }
  const int32_t* positions_from(int64_t slot) const { return pos_.data() + slot; }

  int64_t n_layers() const { return n_layers_; }
  int64_t n_slots() const { return n_slots_; }
  int64_t kv_dim() const { return kv_dim_; }
  // The positions the sequence is meant to reach (prompt + new tokens; default n_slots): LongRoPE
  // picks its factors by it (Model::rope_freq_factors), so speculative decoding, whose cache has
  // scratch slots beyond the sequence, sets it to plain decoding's size and turns the same way.
  int64_t context() const { return context_; }
  void set_context(int64_t positions) { context_ = positions; }
  float* k(int64_t layer, int64_t slot) { return &k_[size_t((layer * n_slots_ + slot) * kv_dim_)]; }
  float* v(int64_t layer, int64_t slot) { return &v_[size_t((layer * n_slots_ + slot) * kv_dim_)]; }
  const float* k(int64_t layer, int64_t slot) const { return &k_[size_t((layer * n_slots_ + slot) * kv_dim_)]; }
  const float* v(int64_t layer, int64_t slot) const { return &v_[size_t((layer * n_slots_ + slot) * kv_dim_)]; }

 private:
  KvCache() = default;
  int64_t n_layers_ = 0, n_slots_ = 0, kv_dim_ = 0, context_ = 0;
  std::vector<float> k_, v_;
  std::vector<int32_t> pos_;
};

// Tokens evaluated together. Token i is written to cache slot slots[i] at RoPE position
// positions[i] and attends to cache slots j < kv_len where mask[i * kv_len + j] != 0 (its own
// slot included). All K/V of the batch are written before any attention reads the cache.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> slots;
  int64_t kv_len = 0;
  std::vector<uint8_t> mask;
  std::vector<uint8_t> want_logits;  // per token; logits are returned for these rows, in order

  // Plain causal batch: token i at position and slot start + i, seeing slots [0, start + i].
  static Batch causal(std::span<const int32_t> tokens, int32_t start, bool all_logits = false);
  int64_t size() const { return int64_t(tokens.size()); }
  Status validate(const ModelConfig& config, const KvCache& cache) const;
};

// The batch as a device draft takes it (pointers into the batch).
inline DraftRows draft_rows(const Batch& b) {
  return {b.tokens.data(), b.positions.data(), b.slots.data(), b.mask.data(), b.size(), b.kv_len};
}

// Sees the input rows of every projection (for importance statistics): weight name such
// as "blk.0.attn_q.weight", the activations [rows x cols].
using ActivationObserver = std::function<void(const std::string& weight, const float* x, int64_t rows, int64_t cols)>;

// Runs the batch through the model; returns [n_wanted x n_vocab] logits. Projections with
// bit-split planes run the plane kernels for `pass`, Q8_0 blocks the Q8_0 kernel; all else is f32.
// With a variant (variant.h), the pass computes that fine-tuned variant: its sign planes join
// D in every projection and the tensors it replaces in full stand in for the base's.
Result<std::vector<float>> forward_pass(const Model& model, KvCache& cache, const Batch& batch,
                                        const ActivationObserver* observer = nullptr, Pass pass = Pass::kDefault,
                                        const Variant* variant = nullptr);

// The pass of forward_pass cut at layer boundaries: runs layers [first, last) over the batch.
// `hidden` is the residual stream entering layer `first`, [batch.size() x n_embd] (empty with
// first == 0: the batch's token embeddings, scaled as the pass scales them), and becomes the
// stream leaving layer last - 1. With last == n_layers and `logits` given, the wanted rows'
// logits too. Pieces [0, k) then [k, n_layers) give what one forward_pass gives, bit for bit;
// the model needs only the layers it runs (ModelLoadOptions::only_layers), plus the embedding
// when it embeds and the head when it makes logits.
Status forward_layers(const Model& model, KvCache& cache, const Batch& batch, int64_t first, int64_t last,
                      std::vector<float>& hidden, const ActivationObserver* observer = nullptr,
                      Pass pass = Pass::kDefault, std::vector<float>* logits = nullptr);

// One sequence's part of a combined pass (forward_passes): its cache, its batch, its variant.
struct SequencePass {
  KvCache* cache = nullptr;
  const Batch* batch = nullptr;
  const Variant* variant = nullptr;  // null: the base
};

// Several sequences' batches in one pass, as a server decodes concurrent requests: every
// projection runs once over the rows of all of them — the residual R streamed once for all
// (sequences on different variants share the base planes; D runs per variant with its signs) —
// while the K/V writes, attention and each variant's own tensors stay per sequence. Returns the
// logits of each sequence's wanted rows, in the order given, each equal bit for bit to
// forward_pass on that sequence alone. Each sequence needs its own cache. Mixture-of-experts
// models (routing is per row) run the sequences one after another.
Result<std::vector<std::vector<float>>> forward_passes(const Model& model, std::span<const SequencePass> sequences,
                                                       Pass pass = Pass::kDefault);

}  // namespace bitsplit
