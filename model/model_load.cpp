// Llama-family configuration from GGUF metadata and loading of the f32 weights, with every
// tensor's presence and shape checked against the configuration.
#include <tbb/parallel_for.h>

#include "bitsplit/model.h"
#include "bitsplit/vram_plan.h"

namespace bitsplit {
namespace {

struct ArchInfo {
  const char* name;
  Architecture arch;
  cpu::RopeOrder rope_order;
};
constexpr ArchInfo kArchs[] = {
    {"llama", Architecture::kLlama, cpu::RopeOrder::kNormal},
    {"qwen2", Architecture::kQwen2, cpu::RopeOrder::kNeox},
    {"qwen3", Architecture::kQwen3, cpu::RopeOrder::kNeox},
};

Status positive(const char* what, int64_t v) {
  if (v <= 0) return Status::error(std::string(what) + " is " + std::to_string(v) + ", must be positive");
  return Status::ok();
}

}  // namespace

Result<ModelConfig> read_model_config(const WeightSource& source) {
  const gguf::Metadata& m = source.metadata();
  auto ctx = [&](const Status& s) { return s.with_context(source.path()); };
  auto arch_name = m.get_string("general.architecture");
  if (!arch_name) return ctx(arch_name.status());
  ModelConfig c;
  const ArchInfo* info = nullptr;
  for (const auto& a : kArchs) {
    if (*arch_name == a.name) info = &a;
  }
  if (!info) {
    return ctx(Status::error("architecture '" + *arch_name + "' is not supported (supported: " +
                             kSupportedArchitectures + ")"));
  }
  c.arch = info->arch;
  c.arch_name = info->name;
  c.rope_order = info->rope_order;
  c.has_qkv_bias = c.arch == Architecture::kQwen2;
  c.has_qk_norm = c.arch == Architecture::kQwen3;
  const std::string p = c.arch_name + ".";

  Status st = Status::ok();
  auto get = [&](const std::string& key, int64_t* out, std::optional<int64_t> fallback = std::nullopt) {
    if (!st) return;
    auto r = fallback ? m.get_int_or(key, *fallback) : m.get_int(key);
    if (!r) st = r.status(); else *out = *r;
  };
  auto getf = [&](const std::string& key, float* out, double fallback) {
    if (!st) return;
    auto r = m.get_float_or(key, fallback);
    if (!r) st = r.status(); else *out = float(*r);
  };
  get(p + "block_count", &c.n_layers);
  get(p + "embedding_length", &c.n_embd);
  get(p + "attention.head_count", &c.n_heads);
  get(p + "feed_forward_length", &c.n_ff);
  get(p + "context_length", &c.n_ctx_train, 2048);
  getf(p + "attention.layer_norm_rms_epsilon", &c.rms_eps, 1e-5);
  getf(p + "rope.freq_base", &c.rope_base, 10000.0);
  if (!st) return ctx(st);
  get(p + "attention.head_count_kv", &c.n_kv_heads, c.n_heads);
  if (!st) return ctx(st);
  for (auto [what, v] : {std::pair{"block_count", c.n_layers}, {"embedding_length", c.n_embd},
                         {"attention.head_count", c.n_heads}, {"attention.head_count_kv", c.n_kv_heads},
                         {"feed_forward_length", c.n_ff}, {"context_length", c.n_ctx_train}}) {
    if (auto s = positive((p + what).c_str(), v); !s) return ctx(s);
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return ctx(Status::error("head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " +
                             std::to_string(c.n_kv_heads)));
  }
  const int64_t default_head_dim = c.n_embd % c.n_heads == 0 ? c.n_embd / c.n_heads : 0;
  get(p + "attention.key_length", &c.head_dim, default_head_dim);
  if (!st) return ctx(st);
  if (c.head_dim <= 0) {
    return ctx(Status::error("embedding_length " + std::to_string(c.n_embd) + " is not a multiple of head_count " +
                             std::to_string(c.n_heads) + " and attention.key_length is absent"));
  }
  int64_t value_length = c.head_dim;
  get(p + "attention.value_length", &value_length, c.head_dim);
  get(p + "rope.dimension_count", &c.n_rot, c.head_dim);
  if (!st) return ctx(st);
  if (value_length != c.head_dim) {
    return ctx(Status::error("attention.value_length " + std::to_string(value_length) +
                             " differs from key_length " + std::to_string(c.head_dim) + ", which is not supported"));
  }
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    return ctx(Status::error("rope.dimension_count " + std::to_string(c.n_rot) + " must be even and at most the head size " +
                             std::to_string(c.head_dim)));
  }
  auto scaling = m.get_string_or(p + "rope.scaling.type", "none");
  if (!scaling) return ctx(scaling.status());
  if (*scaling == "linear") {
    float factor = 1.0f;
    getf(p + "rope.scaling.factor", &factor, 1.0);
    if (!st) return ctx(st);
    if (!(factor > 0.0f)) return ctx(Status::error("rope.scaling.factor must be positive"));
    c.rope_freq_scale = 1.0f / factor;
  } else if (*scaling != "none") {
    return ctx(Status::error("RoPE scaling type '" + *scaling + "' is not supported (supported: none, linear)"));
  }
  if (!(c.rms_eps > 0.0f)) return ctx(Status::error("attention.layer_norm_rms_epsilon must be positive"));

  const gguf::TensorInfo* embd = source.find_tensor("token_embd.weight");
  if (!embd) return ctx(Status::error("tensor 'token_embd.weight' is missing"));
  if (embd->dims.size() != 2 || embd->dims[0] != c.n_embd) {
    return ctx(Status::error("tensor 'token_embd.weight' has shape " + embd->shape_string() +
                             ", expected [" + std::to_string(c.n_embd) + ", n_vocab]"));
  }
  c.n_vocab = embd->dims[1];
  c.tied_output = source.find_tensor("output.weight") == nullptr && source.find_tensor("output.draft_codes") == nullptr;
  return c;
}

namespace {

class TensorLoader {
 public:
  TensorLoader(const WeightSource& source, std::optional<SplitFormat> split, bool draft_only,
               std::map<std::string, SplitProjection>* planes, std::map<std::string, std::vector<uint8_t>>* q8_0)
      : source_(source), split_(split), draft_only_(draft_only), planes_(planes), q8_0_(q8_0) {}

  Status load(const std::string& name, std::vector<int64_t> dims, std::vector<float>* out, bool optional = false) {
    const gguf::TensorInfo* t = source_.find_tensor(name);
    const std::string suffix = ".weight";
    if (!t && split_ && dims.size() == 2 && name.ends_with(suffix)) {
      // A converted file: rebuild the projection from its planes (D + R, or D alone).
      const std::string base = name.substr(0, name.size() - suffix.size());
      if (source_.find_tensor(split_tensor_names(base).draft_codes)) {
        if (planes_) {  // keep the planes; the f32 weights stay empty
          BITSPLIT_ASSIGN_OR_RETURN((*planes_)[name], load_split_planes(source_, base, dims[0], dims[1], *split_));
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
};

}  // namespace

Result<Model> Model::load(const WeightSource& source, const ModelLoadOptions& options) {
  Model model;
  BITSPLIT_ASSIGN_OR_RETURN(model.config_, read_model_config(source));
  const ModelConfig& c = model.config_;
  auto split = read_split_format(source.metadata());
  if (!split) return split.status().with_context(source.path());
  if (options.draft_only && !split->has_value()) {
    return Status::error(source.path() + ": is not a bit-split model, so it has no draft plane; run `bitsplit convert` first");
  }
  const bool keep_planes = split->has_value() && options.keep_planes;
  const bool q8_0_kernels = !split->has_value() && options.q8_0_kernels;
  TensorLoader t(source, *split, options.draft_only, keep_planes ? &model.splits_ : nullptr,
                 q8_0_kernels ? &model.q8_0_ : nullptr);
  if (keep_planes || q8_0_kernels) {
    model.cpu_ = options.cpu ? options.cpu : std::make_shared<cpu::CpuContext>();
    model.backend_ = options.backend ? options.backend : make_cpu_backend(model.cpu_);
    model.default_pass_ = options.draft_only ? Pass::kDraft : Pass::kTarget;
  }

  auto from_embd = source.metadata().get_bool_or("bitsplit.output_from_embedding", false);
  if (!from_embd) return from_embd.status().with_context(source.path());
  model.output_from_embedding_ = *from_embd;
  BITSPLIT_RETURN_IF_ERROR(t.load("token_embd.weight", {c.n_embd, c.n_vocab}, &model.token_embd_));
  BITSPLIT_RETURN_IF_ERROR(t.load("output_norm.weight", {c.n_embd}, &model.output_norm_));
  if (!c.tied_output) BITSPLIT_RETURN_IF_ERROR(t.load("output.weight", {c.n_embd, c.n_vocab}, &model.output_));
  BITSPLIT_RETURN_IF_ERROR(t.load("rope_freqs.weight", {c.n_rot / 2}, &model.rope_freqs_, /*optional=*/true));
  model.layers_.resize(size_t(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = model.layers_[size_t(i)];
    const std::string b = "blk." + std::to_string(i) + ".";
    BITSPLIT_RETURN_IF_ERROR(t.load(b + "attn_norm.weight", {c.n_embd}, &l.attn_norm));
    BITSPLIT_RETURN_IF_ERROR(t.load(b + "attn_q.weight", {c.n_embd, c.q_dim()}, &l.wq));
    BITSPLIT_RETURN_IF_ERROR(t.load(b + "attn_k.weight", {c.n_embd, c.kv_dim()}, &l.wk));
    BITSPLIT_RETURN_IF_ERROR(t.load(b + "attn_v.weight", {c.n_embd, c.kv_dim()}, &l.wv));
    BITSPLIT_RETURN_IF_ERROR(t.load(b + "attn_output.weight", {c.q_dim(), c.n_embd}, &l.wo));
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
    BITSPLIT_RETURN_IF_ERROR(t.load(b + "ffn_gate.weight", {c.n_embd, c.n_ff}, &l.w_gate));
    BITSPLIT_RETURN_IF_ERROR(t.load(b + "ffn_up.weight", {c.n_embd, c.n_ff}, &l.w_up));
    BITSPLIT_RETURN_IF_ERROR(t.load(b + "ffn_down.weight", {c.n_ff, c.n_embd}, &l.w_down));
  }
  // The backend takes its planes now (a GPU backend uploads them once, never while decoding),
  // in placement order: layer by layer, the output head last (vram_plan.h). Planes live in a
  // std::map, so their addresses survive moving the model.
  for (const std::string& name : placement_order(c.n_layers)) {
    auto it = model.splits_.find(name);
    if (it == model.splits_.end()) continue;
    if (Status st = model.backend_->prepare(it->second); !st) {
      return st.with_context("backend " + model.backend_->name() + ", " + name);
    }
  }
  // Then the CPU kernels' packed copies, replacing the file layout where nothing else reads it:
  // the residual always runs on the CPU; the draft's file layout stays for any other backend (a
  // GPU backend drafts planes that did not fit in VRAM on the CPU from it, a test backend reads it).
  const bool release_draft = model.backend_ && !model.backend_->reads_file_layout();
  for (auto& [name, planes] : model.splits_) planes.pack(*model.cpu_, release_draft, true);
  return model;
}

const std::vector<uint8_t>* Model::q8_0(const std::string& weight) const {
  auto it = q8_0_.find(weight);
  return it == q8_0_.end() ? nullptr : &it->second;
}

const SplitProjection* Model::split(const std::string& weight) const {
  auto it = splits_.find(weight);
  return it == splits_.end() ? nullptr : &it->second;
}

Model Model::with_split_planes(const quant::SplitParams& params,
                               const std::map<std::string, std::vector<float>>* importance,
                               const WeightTransform& embedding, std::shared_ptr<cpu::CpuContext> cpu) const {
  BITSPLIT_CHECK(!has_planes(), "the model already has planes");
  std::map<std::string, SplitProjection> planes;
  // Splits each projection and leaves an empty f32 matrix in its place.
  const WeightTransform split_one = [&](const std::string& name, const std::vector<float>& w, int64_t rows,
                                        int64_t cols) {
    const float* imp = nullptr;
    if (importance) {
      auto it = importance->find(name);
      if (it != importance->end() && int64_t(it->second.size()) == cols) imp = it->second.data();
    }
    SplitProjection p = split_projection(w, rows, cols, params, imp);
    planes.emplace(name, std::move(p));
    return std::vector<float>();
  };
  Model m = transformed(split_one, embedding);
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
  m.token_embd_ = embedding("token_embd.weight", token_embd_, c.n_vocab, c.n_embd);
  m.output_ = projection("output.weight", output(), c.n_vocab, c.n_embd);
  m.config_.tied_output = false;
  m.output_from_embedding_ = output_from_embedding_ || config_.tied_output;
  m.output_norm_ = output_norm_;
  m.rope_freqs_ = rope_freqs_;
  m.layers_.resize(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& src = layers_[i];
    LayerWeights& dst = m.layers_[i];
    dst = src;  // norms and biases as they are
    const std::string b = "blk." + std::to_string(i) + ".";
    dst.wq = projection(b + "attn_q.weight", src.wq, c.q_dim(), c.n_embd);
    dst.wk = projection(b + "attn_k.weight", src.wk, c.kv_dim(), c.n_embd);
    dst.wv = projection(b + "attn_v.weight", src.wv, c.kv_dim(), c.n_embd);
    dst.wo = projection(b + "attn_output.weight", src.wo, c.n_embd, c.q_dim());
    dst.w_gate = projection(b + "ffn_gate.weight", src.w_gate, c.n_ff, c.n_embd);
    dst.w_up = projection(b + "ffn_up.weight", src.w_up, c.n_ff, c.n_embd);
    dst.w_down = projection(b + "ffn_down.weight", src.w_down, c.n_embd, c.n_ff);
  }
  return m;
}

}  // namespace bitsplit
