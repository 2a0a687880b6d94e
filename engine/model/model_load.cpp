// Model::load: the weights of a model file (f32, Q8_0 blocks for the Q8_0 kernel, or bit-split
// planes handed to the backend and packed for the CPU), every tensor checked against the config.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>

#include "bitsplit/imatrix.h"
#include "bitsplit/model.h"
#include "bitsplit/vram_plan.h"

namespace bitsplit {

const char* target_activations_name(TargetActivations a) {
  switch (a) {
    case TargetActivations::kInt8: return "int8";
    case TargetActivations::kDraftRemainder: return "draft-remainder";
    case TargetActivations::kRemainder: return "remainder";
  }
  return "?";
}

namespace {

class TensorLoader {
 public:
  TensorLoader(const WeightSource& source, std::optional<SplitFormat> split, bool draft_only,
               std::map<std::string, SplitProjection>* planes, std::map<std::string, std::vector<uint8_t>>* q8_0)
      : source_(source), split_(split), draft_only_(draft_only), planes_(planes), q8_0_(q8_0) {}
  // Kept planes get their draft packed for the CPU straight from the file (no file-layout copy):
  // for a backend that reads only the packed planes.
  void pack_drafts_with(cpu::CpuContext* ctx) { pack_draft_ = ctx; }

  Status load(const std::string& name, std::vector<int64_t> dims, std::vector<float>* out, bool optional = false) {
    const gguf::TensorInfo* t = source_.find_tensor(name);
    const std::string suffix = ".weight";
    if (!t && split_ && dims.size() == 2 && name.ends_with(suffix)) {
      // A converted file: rebuild the projection from its planes (D + R, or D alone).
      const std::string base = name.substr(0, name.size() - suffix.size());
      if (source_.find_tensor(split_tensor_names(base).draft_codes)) {
        if (planes_) {  // keep the planes; the f32 weights stay empty
          BITSPLIT_ASSIGN_OR_RETURN((*planes_)[name],
                                    load_split_planes(source_, base, dims[0], dims[1], *split_, pack_draft_));
          out->clear();
          return Status::ok();
        }
        BITSPLIT_ASSIGN_OR_RETURN(*out, load_split_f32(source_, base, dims[0], dims[1], *split_, !draft_only_));
        return Status::ok();
      }
    }
    if (!t) {
      if (optional) return Status::ok();
      return Status::error(source_.path() + ": tensor '" + name + "' is missing");
    }
    gguf::TensorInfo expected;
    expected.dims = dims;
    if (t->dims != dims) {
      return Status::error(source_.path() + ": tensor '" + name + "' has shape " + t->shape_string() + ", expected " +
                           expected.shape_string());
    }
    // Q8_0 projections keep their blocks for the Q8_0 kernel (llama.cpp's CPU arithmetic).
    if (q8_0_ && t->type == gguf::TensorType::Q8_0 && dims.size() == 2 && dims[0] % 32 == 0 &&
        is_split_projection(name)) {
      BITSPLIT_ASSIGN_OR_RETURN(auto bytes, source_.raw_bytes(*t));
      (*q8_0_)[name].assign(bytes.begin(), bytes.end());
      out->clear();
      return Status::ok();
    }
    BITSPLIT_ASSIGN_OR_RETURN(*out, source_.load_f32(*t));
    return Status::ok();
  }

 private:
  const WeightSource& source_;
  std::optional<SplitFormat> split_;
  bool draft_only_;
  std::map<std::string, SplitProjection>* planes_;
  std::map<std::string, std::vector<uint8_t>>* q8_0_;
  cpu::CpuContext* pack_draft_ = nullptr;
};

}  // namespace

// Model::load's steps over one file, filling `model` (a friend of Model).
class ModelLoader {
 public:
  ModelLoader(const WeightSource& source, const ModelLoadOptions& options, Model& model)
      : source_(source), options_(options), model_(model) {}

  // The configuration, the split format, and which kernels the model computes with.
  Status configure() {
    BITSPLIT_ASSIGN_OR_RETURN(model_.config_, read_model_config(source_));
    auto split = read_split_format(source_.metadata());
    if (!split) return split.status().with_context(source_.path());
    if (options_.draft_only && !split->has_value()) {
      return Status::error(source_.path() + ": is not a bit-split model, so it has no draft plane; run `bitsplit convert` first");
    }
    keep_planes_ = split->has_value() && options_.keep_planes;
    q8_0_kernels_ = !split->has_value() && options_.q8_0_kernels;
    tensors_.emplace(source_, *split, options_.draft_only, keep_planes_ ? &model_.splits_ : nullptr,
                     q8_0_kernels_ ? &model_.q8_0_ : nullptr);
    if (keep_planes_ || q8_0_kernels_) {
      model_.cpu_ = options_.cpu ? options_.cpu : std::make_shared<cpu::CpuContext>();
      model_.backend_ = options_.backend ? options_.backend : make_cpu_backend(model_.cpu_);
      model_.default_pass_ = options_.draft_only ? Pass::kDraft : Pass::kTarget;
      model_.target_activations_ = options_.target_activations;
      if (keep_planes_ && !model_.backend_->reads_file_layout()) tensors_->pack_drafts_with(model_.cpu_.get());
    }
    auto from_embd = source_.metadata().get_bool_or("bitsplit.output_from_embedding", false);
    if (!from_embd) return from_embd.status().with_context(source_.path());
    model_.output_from_embedding_ = *from_embd;
    return Status::ok();
  }

  // The token embedding (a bit-split model keeps a Q8_0 one as its blocks), the output norm and head.
  Status load_embedding_and_head() {
    const ModelConfig& c = model_.config_;
    // A bit-split model keeps a Q8_0 embedding (what convert writes) as its blocks: a quarter of
    // the f32 copy's memory; lookups dequantise one row (Model::embed_row).
    const gguf::TensorInfo* embd = source_.find_tensor("token_embd.weight");
    if (keep_planes_ && embd && embd->type == gguf::TensorType::Q8_0 && c.n_embd % quant::BlockQ8_0::kWeights == 0 &&
        embd->dims == std::vector<int64_t>{c.n_embd, c.n_vocab}) {
      BITSPLIT_RETURN_IF_ERROR(keep_q8_0_embedding(*embd));
    } else {
      BITSPLIT_RETURN_IF_ERROR(tensors_->load("token_embd.weight", {c.n_embd, c.n_vocab}, &model_.token_embd_));
    }
    // A tied head over a Q8_0 embedding runs on the Q8_0 kernel too (as llama.cpp's does): the
    // rows stay f32 for the lookup, the blocks serve the head.
    if (q8_0_kernels_ && c.tied_output && embd && embd->type == gguf::TensorType::Q8_0 &&
        c.n_embd % quant::BlockQ8_0::kWeights == 0) {
      BITSPLIT_ASSIGN_OR_RETURN(auto bytes, source_.raw_bytes(*embd));
      model_.q8_0_["output.weight"].assign(bytes.begin(), bytes.end());
    }
    BITSPLIT_RETURN_IF_ERROR(tensors_->load("output_norm.weight", {c.n_embd}, &model_.output_norm_));
    if (!c.tied_output) BITSPLIT_RETURN_IF_ERROR(tensors_->load("output.weight", {c.n_embd, c.n_vocab}, &model_.output_));
    return Status::ok();
  }

  // RoPE's per-frequency divisors: LongRoPE's two sets (read_model_config checked that both are
  // there) or rope_freqs.weight when the file has it.
  Status load_rope_factors() {
    if (model_.config_.rope_original_context > 0) {
      BITSPLIT_RETURN_IF_ERROR(load_rope_factors("rope_factors_short.weight", &model_.rope_freqs_, false));
      return load_rope_factors("rope_factors_long.weight", &model_.rope_freqs_long_, false);
    }
    return load_rope_factors("rope_freqs.weight", &model_.rope_freqs_, /*optional=*/true);
  }

  // Every layer's norms, biases, router and projections, reporting progress after each.
  Status load_layers() {
    const ModelConfig& c = model_.config_;
    model_.layers_.resize(size_t(c.n_layers));
    const std::vector<ProjectionSlot> projections = layer_projections(c);
    const auto [first, last] = options_.only_layers.value_or(std::pair<int64_t, int64_t>{0, c.n_layers});
    for (int64_t i = first; i < last; ++i) {
      BITSPLIT_RETURN_IF_ERROR(load_layer(i, projections));
      if (options_.progress && !options_.progress(i + 1 - first, last - first)) {
        return Status::error(source_.path() + ": loading cancelled");
      }
    }
    return Status::ok();
  }

  // The backend takes its planes, then the CPU kernels' packed copies replace the file layout.
  Status prepare_planes() {
    const ModelConfig& c = model_.config_;
    // The backend takes its planes now (a GPU backend uploads them once, never while decoding),
    // in placement order: layer by layer, the output head last (vram_plan.h). Planes live in a
    // std::map, so their addresses survive moving the model.
    for (const std::string& name : placement_order(c.n_layers, projection_kinds(c))) {
      auto it = model_.splits_.find(name);
      if (it == model_.splits_.end()) continue;
      if (Status st = model_.backend_->prepare(it->second); !st) {
        return st.with_context("backend " + model_.backend_->name() + ", " + name);
      }
    }
    // Then the CPU kernels' packed copies, replacing the file layout where nothing else reads it:
    // the residual always runs on the CPU; the draft's file layout stays for any other backend (a
    // GPU backend drafts planes that did not fit in VRAM on the CPU from it, a test backend reads it).
    const bool release_draft = model_.backend_ && !model_.backend_->reads_file_layout();
    for (auto& [name, planes] : model_.splits_) planes.pack(*model_.cpu_, release_draft, true);
    copy_residuals();
    return Status::ok();
  }

 private:
  // Lookups read a row per token: from the map when the container keeps it alive (pages come in
  // as tokens need them; no copy), else (or with copy_residual: `--no-mmap`) from a copy.
  Status keep_q8_0_embedding(const gguf::TensorInfo& embd) {
    BITSPLIT_ASSIGN_OR_RETURN(auto bytes, source_.raw_bytes(embd));
    if (auto owner = options_.copy_residual ? nullptr : source_.keep_alive()) {
      model_.token_embd_q8_0_map_ = bytes;
      model_.token_embd_q8_0_owner_ = std::move(owner);
    } else {
      model_.token_embd_q8_0_copy_.assign(bytes.begin(), bytes.end());
      source_.release(embd);
    }
    model_.token_embd_lazy_ = std::make_shared<Model::LazyEmbedding>();
    return Status::ok();
  }

  // Zero, tiny, negative or non-finite divisors would turn by inf or NaN, so each is checked as
  // it is loaded.
  Status load_rope_factors(const char* name, std::vector<float>* out, bool optional) {
    BITSPLIT_RETURN_IF_ERROR(tensors_->load(name, {model_.config_.n_rot / 2}, out, optional));
    for (size_t i = 0; i < out->size(); ++i) {
      if (!((*out)[i] >= 1e-6f) || !std::isfinite((*out)[i])) {
        return Status::error(std::string("tensor '") + name + "': factor " + std::to_string(i) + " is " +
                             std::to_string((*out)[i]) + "; RoPE factors must be finite and >= 1e-6")
            .with_context(source_.path());
      }
    }
    return Status::ok();
  }

  Status load_layer(int64_t i, const std::vector<ProjectionSlot>& projections) {
    const ModelConfig& c = model_.config_;
    TensorLoader& t = *tensors_;
    LayerWeights& l = model_.layers_[size_t(i)];
    const std::string b = "blk." + std::to_string(i) + ".";
    BITSPLIT_RETURN_IF_ERROR(t.load(b + "attn_norm.weight", {c.n_embd}, &l.attn_norm));
    if (c.has_qkv_bias) {
      BITSPLIT_RETURN_IF_ERROR(t.load(b + "attn_q.bias", {c.q_dim()}, &l.bq));
      BITSPLIT_RETURN_IF_ERROR(t.load(b + "attn_k.bias", {c.kv_dim()}, &l.bk));
      BITSPLIT_RETURN_IF_ERROR(t.load(b + "attn_v.bias", {c.kv_dim()}, &l.bv));
    }
    if (c.has_qk_norm) {
      BITSPLIT_RETURN_IF_ERROR(t.load(b + "attn_q_norm.weight", {c.head_dim}, &l.q_norm));
      BITSPLIT_RETURN_IF_ERROR(t.load(b + "attn_k_norm.weight", {c.head_dim}, &l.k_norm));
    }
    BITSPLIT_RETURN_IF_ERROR(t.load(b + "ffn_norm.weight", {c.n_embd}, &l.ffn_norm));
    if (c.has_post_norms) {
      BITSPLIT_RETURN_IF_ERROR(t.load(b + "post_attention_norm.weight", {c.n_embd}, &l.post_attn_norm));
      BITSPLIT_RETURN_IF_ERROR(t.load(b + "post_ffw_norm.weight", {c.n_embd}, &l.post_ffn_norm));
    }
    if (c.is_moe()) {
      l.experts.resize(size_t(c.n_expert));
      BITSPLIT_RETURN_IF_ERROR(t.load(b + "ffn_gate_inp.weight", {c.n_embd, c.n_expert}, &l.ffn_gate_inp));
      if (c.n_ff_shexp > 0) {
        BITSPLIT_RETURN_IF_ERROR(t.load(b + "ffn_gate_inp_shexp.weight", {c.n_embd}, &l.ffn_gate_inp_shexp));
      }
    }
    // Every projection (a mixture of experts: each expert's, read from the stacked tensors'
    // per-expert views, fused_tensors.h).
    for (const ProjectionSlot& p : projections) {
      BITSPLIT_RETURN_IF_ERROR(t.load(b + p.kind + ".weight", {p.cols, p.rows}, &l.projection(p.kind)));
    }
    return Status::ok();
  }

  // On a machine with several NUMA nodes a residual used from the file map would sit wherever
  // the page cache put it (usually one node), and every other node's cores would stream it
  // remotely: it is copied into plane buffers interleaved over the nodes instead, and the map's
  // pages let go. The same copy when asked for (copy_residual).
  void copy_residuals() {
    if (model_.splits_.empty() || !(options_.copy_residual || model_.cpu_->topology().numa_nodes > 1)) return;
    for (auto& [name, planes] : model_.splits_) {
      if (!planes.packed_residual || !planes.packed_residual->borrowed()) continue;
      const cpu::PackedPlane& borrowed = *planes.packed_residual;
      planes.packed_residual =
          std::make_shared<const cpu::PackedPlane>(cpu::PackedPlane::copy(*model_.cpu_, borrowed.shape(), borrowed.data()));
      if (const gguf::TensorInfo* t = source_.find_tensor(split_tensor_names(split_base_name(name)).resid_packed)) {
        source_.release(*t);
      }
    }
  }

  const WeightSource& source_;
  const ModelLoadOptions& options_;
  Model& model_;
  std::optional<TensorLoader> tensors_;
  bool keep_planes_ = false, q8_0_kernels_ = false;
};

Result<Model> Model::load(const WeightSource& source, const ModelLoadOptions& options) {
  Model model;
  ModelLoader loader(source, options, model);
  BITSPLIT_RETURN_IF_ERROR(loader.configure());
  if (const auto& range = options.only_layers) {
    const int64_t n = model.config().n_layers;
    if (range->first < 0 || range->first > range->second || range->second > n) {
      return Status::error(source.path() + ": layers [" + std::to_string(range->first) + ", " +
                           std::to_string(range->second) + ") are not within the model's " + std::to_string(n));
    }
  } else {
    BITSPLIT_RETURN_IF_ERROR(loader.load_embedding_and_head());
  }
  BITSPLIT_RETURN_IF_ERROR(loader.load_rope_factors());
  BITSPLIT_RETURN_IF_ERROR(loader.load_layers());
  BITSPLIT_RETURN_IF_ERROR(loader.prepare_planes());
  return model;
}

const std::vector<float>& Model::token_embd() const {
  if (!embedding_in_q8_0()) return token_embd_;
  std::call_once(token_embd_lazy_->once, [&] {
    std::vector<float>& v = token_embd_lazy_->values;
    v.resize(size_t(config_.n_vocab * config_.n_embd));
    tbb::parallel_for(int64_t{0}, config_.n_vocab, [&](int64_t token) { embed_row(token, v.data() + token * config_.n_embd); });
  });
  return token_embd_lazy_->values;
}

void Model::embed_row(int64_t token, float* out) const {
  const int64_t n = config_.n_embd;
  const std::span<const uint8_t> blocks = embedding_q8_0();
  if (blocks.empty()) {
    std::copy_n(token_embd_.data() + token * n, n, out);
    return;
  }
  const size_t row_bytes = size_t(n / quant::BlockQ8_0::kWeights) * sizeof(quant::BlockQ8_0);
  const Status st = quant::dequantize_ggml_row(uint32_t(gguf::TensorType::Q8_0),
                                               blocks.subspan(size_t(token) * row_bytes, row_bytes),
                                               std::span<float>(out, size_t(n)));
  BITSPLIT_CHECK(st.is_ok(), st.message());
}

const std::vector<uint8_t>* Model::q8_0(const std::string& weight) const {
  auto it = q8_0_.find(weight);
  return it == q8_0_.end() ? nullptr : &it->second;
}

const SplitProjection* Model::split(const std::string& weight) const {
  auto it = splits_.find(weight);
  return it == splits_.end() ? nullptr : &it->second;
}

const HeldProjection& Model::held(int64_t layer, size_t slot) const {
  HeldTable& t = *held_.table;
  std::call_once(t.once, [&] {
    if (splits_.empty() && q8_0_.empty()) return;
    const std::vector<std::string> kinds = projection_kinds(config_);
    t.per_layer = kinds.size();
    t.slots.reserve(size_t(config_.n_layers) * kinds.size());
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      for (const std::string& kind : kinds) t.slots.push_back({split(b + kind + ".weight"), q8_0(b + kind + ".weight")});
    }
  });
  static const HeldProjection kF32;
  return t.slots.empty() ? kF32 : t.slots[size_t(layer) * t.per_layer + slot];
}

Result<Model> Model::with_split_planes(const quant::SplitParams& params,
                                       const std::map<std::string, std::vector<float>>* importance,
                                       const WeightTransform& embedding, std::shared_ptr<cpu::CpuContext> cpu,
                                       const std::map<std::string, int>* draft_bits,
                                       const InputCovariances* covariances) const {
  BITSPLIT_CHECK(!has_planes(), "the model already has planes");
  std::map<std::string, SplitProjection> planes;
  Status failure = Status::ok();
  // Splits each projection and leaves an empty f32 matrix in its place.
  const WeightTransform split_one = [&](const std::string& name, const std::vector<float>& w, int64_t rows,
                                        int64_t cols) {
    const float* imp = importance_columns(importance, name, cols);
    quant::SplitParams tensor_params = params;
    if (draft_bits) {
      auto it = draft_bits->find(split_base_name(name));
      if (it != draft_bits->end()) tensor_params.draft_bits = it->second;
    }
    auto p = fit_projection(w, rows, cols, tensor_params, imp, input_covariance(covariances, name, cols));
    if (p) planes.emplace(name, std::move(*p));
    else if (failure.is_ok()) failure = Status::error(name + ": " + p.status().message());
    return std::vector<float>();
  };
  Model m = transformed(split_one, embedding);
  if (!failure.is_ok()) return failure;
  m.splits_ = std::move(planes);
  m.cpu_ = cpu ? std::move(cpu) : std::make_shared<cpu::CpuContext>();
  m.backend_ = make_cpu_backend(m.cpu_);
  return m;
}

Model Model::transformed(const WeightTransform& projection, const WeightTransform& embedding) const {
  BITSPLIT_CHECK(!has_planes() && !has_q8_0(), "transformed() needs f32 projections");
  Model m;
  m.config_ = config_;
  const ModelConfig& c = config_;
  m.token_embd_ = embedding("token_embd.weight", token_embd(), c.n_vocab, c.n_embd);
  m.output_ = projection("output.weight", output(), c.n_vocab, c.n_embd);
  m.config_.tied_output = false;
  m.output_from_embedding_ = output_from_embedding_ || config_.tied_output;
  m.output_norm_ = output_norm_;
  m.rope_freqs_ = rope_freqs_;
  m.rope_freqs_long_ = rope_freqs_long_;
  m.layers_.resize(layers_.size());
  const std::vector<ProjectionSlot> projections = layer_projections(c);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& src = layers_[i];
    LayerWeights& dst = m.layers_[i];
    dst = src;  // norms and biases as they are
    const std::string b = "blk." + std::to_string(i) + ".";
    for (const ProjectionSlot& p : projections) {
      dst.projection(p.kind) = projection(b + p.kind + ".weight", src.projection(p.kind), p.rows, p.cols);
    }
  }
  return m;
}

}  // namespace bitsplit
