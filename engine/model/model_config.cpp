// Llama-family configuration from GGUF metadata: every key checked, errors naming the key and
// the supported values.
#include "bitsplit/file_kind.h"
#include "bitsplit/model.h"

#include <cmath>
#include <optional>
#include <string>
#include <variant>

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
    {"gemma2", Architecture::kGemma2, cpu::RopeOrder::kNeox},
    {"gemma3", Architecture::kGemma3, cpu::RopeOrder::kNeox},
    {"phi3", Architecture::kPhi3, cpu::RopeOrder::kNeox},
    {"qwen2moe", Architecture::kQwen2Moe, cpu::RopeOrder::kNeox},
    {"qwen3moe", Architecture::kQwen3Moe, cpu::RopeOrder::kNeox},
};

// No dimension of a model reaches 2^31; bounding them keeps every product of two (q_dim, a
// plane's bytes) inside int64 and stops a header from sizing buffers the file cannot fill.
constexpr int64_t kMaxDimension = int64_t(1) << 31;

Status positive(const char* what, int64_t v) {
  if (v <= 0) return Status::error(std::string(what) + " is " + std::to_string(v) + ", must be positive");
  if (v > kMaxDimension) {
    return Status::error(std::string(what) + " is " + std::to_string(v) + ", more than 2^31 (" +
                         std::to_string(kMaxDimension) + ")");
  }
  return Status::ok();
}

// Mixture of experts: the expert counts and widths, whether the chosen experts' weights are
// renormalised (qwen2moe: no; qwen3moe and Mixtral: yes; expert_weights_norm overrides).
Status read_moe_config(const gguf::Metadata& m, const std::string& p, ModelConfig& c) {
  const bool qwen2moe = c.arch == Architecture::kQwen2Moe;
  auto used = m.get_int(p + "expert_used_count");
  if (!used) return used.status();
  // Mixtral (llama) names the expert width feed_forward_length.
  auto width = m.get_int_or(p + "expert_feed_forward_length", -1);
  if (!width) return width.status();
  if (*width < 0) {
    auto ff = m.get_int(p + "feed_forward_length");
    if (!ff) return Status::error(p + "expert_feed_forward_length and " + p + "feed_forward_length are both missing");
    width = *ff;
  }
  auto shared = m.get_int_or(p + "expert_shared_feed_forward_length", 0);
  if (!shared) return shared.status();
  auto norm = m.get_bool_or(p + "expert_weights_norm", !qwen2moe);
  if (!norm) return norm.status();
  if (c.n_expert > 4096) return Status::error(p + "expert_count " + std::to_string(c.n_expert) + " is more than 4096");
  if (*used <= 0 || *used > c.n_expert) {
    return Status::error(p + "expert_used_count " + std::to_string(*used) + " must be in 1.." + std::to_string(c.n_expert));
  }
  if (auto s = positive((p + "expert_feed_forward_length").c_str(), *width); !s) return s;
  if (*shared < 0 || *shared > kMaxDimension) {
    return Status::error(p + "expert_shared_feed_forward_length " + std::to_string(*shared) + " is out of range");
  }
  c.n_expert_used = *used;
  c.n_ff_exp = *width;
  c.n_ff_shexp = *shared;
  c.expert_weights_norm = *norm;
  return Status::ok();
}

// The RoPE of the sliding-window layers: gemma3's local base (10000 unless the file says) without
// scaling; the other families' (gemma2, phi3) are the global base and scaling.
Status read_swa_rope(const gguf::Metadata& m, const std::string& p, ModelConfig& c) {
  const double fallback = c.arch == Architecture::kGemma3 ? 10000.0 : c.rope_base;
  auto base = m.get_float_or(p + "rope.freq_base_swa", fallback);
  if (!base) return base.status();
  if (!(*base > 0.0) || !std::isfinite(*base)) return Status::error(p + "rope.freq_base_swa must be positive");
  c.rope_base_swa = float(*base);
  c.rope_freq_scale_swa = c.arch == Architecture::kGemma3 ? 1.0f : c.rope_freq_scale;
  return Status::ok();
}

// The sliding window (attention.sliding_window; absent or 0: none) and which layers use it: by
// default every layer but the last of each `period` (period 0: every layer); a file may say
// otherwise with attention.sliding_window_pattern (the period, or one bool per layer).
Status read_sliding_window(const gguf::Metadata& m, const std::string& p, ModelConfig& c, int64_t period) {
  auto window = m.get_int_or(p + "attention.sliding_window", 0);
  if (!window) return window.status();
  if (*window < 0) return Status::error(p + "attention.sliding_window is " + std::to_string(*window) + ", must be >= 0");
  c.sliding_window = *window;
  if (c.sliding_window == 0) return Status::ok();
  c.swa_layers.assign(size_t(c.n_layers), 0);
  const std::string pattern_key = p + "attention.sliding_window_pattern";
  if (const gguf::Value* v = m.find(pattern_key)) {
    const auto* items = std::get_if<gguf::Array>(&v->data);
    if (items && items->elem_type == gguf::ValueType::kBool) {
      if (int64_t(items->items.size()) != c.n_layers) {
        return Status::error(pattern_key + " has " + std::to_string(items->items.size()) +
                             " entries, expected one per layer (" + std::to_string(c.n_layers) + ")");
      }
      for (int64_t l = 0; l < c.n_layers; ++l) {
        c.swa_layers[size_t(l)] = std::get<bool>(items->items[size_t(l)].data) ? 1 : 0;
      }
      return read_swa_rope(m, p, c);
    }
    auto n = m.get_int(pattern_key);
    if (!n) return Status::error(pattern_key + " must be a period (an integer) or one bool per layer");
    if (*n <= 0) return Status::error(pattern_key + " is " + std::to_string(*n) + ", must be positive");
    period = *n;
  }
  for (int64_t l = 0; l < c.n_layers; ++l) c.swa_layers[size_t(l)] = period == 0 || l % period < period - 1 ? 1 : 0;
  return read_swa_rope(m, p, c);
}

// Gemma 2 and 3: embedding scale, softcaps, the sliding window and which layers use it, the
// local RoPE base, the query scale of the 27B models (their GGUF has no key for it: llama.cpp
// and the reference code both take 1/sqrt(n_embd / n_heads) there, 1/sqrt(head_dim) elsewhere).
Status read_gemma_config(const gguf::Metadata& m, const std::string& p, ModelConfig& c) {
  const bool gemma3 = c.arch == Architecture::kGemma3;
  c.embd_scale = std::sqrt(float(c.n_embd));
  auto soft = [&](const std::string& key, float* out) -> Status {
    auto v = m.get_float_or(p + key, 0.0);
    if (!v) return v.status();
    if (!(*v >= 0.0) || !std::isfinite(*v)) return Status::error(p + key + " must be a finite value >= 0");
    *out = float(*v);
    return Status::ok();
  };
  BITSPLIT_RETURN_IF_ERROR(soft("attn_logit_softcapping", &c.attn_softcap));
  BITSPLIT_RETURN_IF_ERROR(soft("final_logit_softcapping", &c.final_softcap));
  const int64_t layers_27b = gemma3 ? 62 : 46;
  if (c.n_layers == layers_27b && c.n_embd % c.n_heads == 0) c.attn_scale = 1.0f / std::sqrt(float(c.n_embd / c.n_heads));

  // Which layers slide: gemma2 every other one from the first, gemma3 five of every six (the
  // sixth global).
  return read_sliding_window(m, p, c, gemma3 ? 6 : 2);
}

// LongRoPE: two sets of per-frequency factors in the file (rope_factors_short/long.weight, as
// llama.cpp writes Phi-3's 128k models), the context they were trained for, and the factor on cos
// and sin (rope.scaling.attn_factor; absent: sqrt(1 + ln(s) / ln(original)) with s = context_length
// / original, the LongRoPE paper's choice and transformers' default, 1 when s <= 1).
Status read_long_rope(const gguf::Metadata& m, const std::string& p, const WeightSource& source,
                      const std::string& scaling, ModelConfig& c) {
  const bool is_long = source.find_tensor("rope_factors_long.weight") != nullptr;
  const bool is_short = source.find_tensor("rope_factors_short.weight") != nullptr;
  if (!is_long && !is_short) {
    if (scaling == "longrope" || scaling == "su") {
      return Status::error(p + "rope.scaling.type is '" + scaling +
                           "' but the tensors rope_factors_long.weight and rope_factors_short.weight are missing");
    }
    return Status::ok();
  }
  if (is_long != is_short) {
    return Status::error(std::string("tensor '") + (is_long ? "rope_factors_short.weight" : "rope_factors_long.weight") +
                         "' is missing (LongRoPE needs both the short and the long factors)");
  }
  if (source.find_tensor("rope_freqs.weight")) {
    return Status::error("the file has both rope_freqs.weight and LongRoPE's rope_factors_*.weight; only one set of RoPE factors can apply");
  }
  auto original = m.get_int(p + "rope.scaling.original_context_length");
  if (!original) return Status::error(p + "rope.scaling.original_context_length is missing (LongRoPE needs the context it was trained for)");
  if (auto s = positive((p + "rope.scaling.original_context_length").c_str(), *original); !s) return s;
  c.rope_original_context = *original;
  const double factor = double(c.n_ctx_train) / double(*original);
  const double fallback = factor <= 1.0 || *original < 2 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(double(*original)));
  auto attn = m.get_float_or(p + "rope.scaling.attn_factor", fallback);
  if (!attn) return attn.status();
  if (!(*attn > 0.0 && *attn <= 100.0)) return Status::error(p + "rope.scaling.attn_factor must be in (0, 100]");
  c.rope_attn_factor = float(*attn);
  return Status::ok();
}

// Reads integer and float keys one after another, keeping the first error: once a read fails,
// the later ones do nothing, so a run of reads is checked once.
class KeyReader {
 public:
  explicit KeyReader(const gguf::Metadata& m) : m_(m) {}
  void get(const std::string& key, int64_t* out, std::optional<int64_t> fallback = std::nullopt) {
    if (!st_) return;
    auto r = fallback ? m_.get_int_or(key, *fallback) : m_.get_int(key);
    if (!r) st_ = r.status(); else *out = *r;
  }
  void getf(const std::string& key, float* out, double fallback) {
    if (!st_) return;
    auto r = m_.get_float_or(key, fallback);
    if (!r) st_ = r.status(); else *out = float(*r);
  }
  const Status& status() const { return st_; }

 private:
  const gguf::Metadata& m_;
  Status st_ = Status::ok();
};

// general.architecture, one of kArchs.
Result<const ArchInfo*> read_architecture(const gguf::Metadata& m) {
  auto arch_name = m.get_string("general.architecture");
  if (!arch_name) return arch_name.status();
  for (const auto& a : kArchs) {
    if (*arch_name == a.name) return &a;
  }
  return Status::error("architecture '" + *arch_name + "' is not supported (supported: " + kSupportedArchitectures + ")");
}

// What the family fixes: its RoPE order, biases, QK-norm, gemma's norms after each branch and GeGLU.
void set_family(const ArchInfo& info, ModelConfig& c) {
  c.arch = info.arch;
  c.arch_name = info.name;
  c.rope_order = info.rope_order;
  c.has_qkv_bias = c.arch == Architecture::kQwen2 || c.arch == Architecture::kQwen2Moe;
  const bool gemma = c.arch == Architecture::kGemma2 || c.arch == Architecture::kGemma3;
  c.has_qk_norm = c.arch == Architecture::kQwen3 || c.arch == Architecture::kGemma3 || c.arch == Architecture::kQwen3Moe;
  c.has_post_norms = gemma;
  c.ffn_act = gemma ? FfnActivation::kGeluTanh : FfnActivation::kSilu;
}

// Layers, widths, heads (and the experts), the training context, the norm's epsilon and the RoPE
// base, each checked.
Status read_sizes(const gguf::Metadata& m, const std::string& p, const WeightSource& source, ModelConfig& c) {
  KeyReader keys(m);
  keys.get(p + "block_count", &c.n_layers);
  keys.get(p + "embedding_length", &c.n_embd);
  keys.get(p + "attention.head_count", &c.n_heads);
  keys.get(p + "expert_count", &c.n_expert, 0);
  if (keys.status() && c.n_expert > 0) {
    BITSPLIT_RETURN_IF_ERROR(read_moe_config(m, p, c));
  } else if (keys.status() && (c.arch == Architecture::kQwen2Moe || c.arch == Architecture::kQwen3Moe)) {
    return Status::error(p + "expert_count is missing or 0; a " + c.arch_name + " model has experts");
  }
  keys.get(p + "feed_forward_length", &c.n_ff, c.n_expert > 0 ? std::optional<int64_t>(c.n_ff_exp) : std::nullopt);
  keys.get(p + "context_length", &c.n_ctx_train, 2048);
  keys.getf(p + "attention.layer_norm_rms_epsilon", &c.rms_eps, 1e-5);
  keys.getf(p + "rope.freq_base", &c.rope_base, 10000.0);
  BITSPLIT_RETURN_IF_ERROR(keys.status());
  keys.get(p + "attention.head_count_kv", &c.n_kv_heads, c.n_heads);
  BITSPLIT_RETURN_IF_ERROR(keys.status());
  for (auto [what, v] : {std::pair{"block_count", c.n_layers}, {"embedding_length", c.n_embd},
                         {"attention.head_count", c.n_heads}, {"attention.head_count_kv", c.n_kv_heads},
                         {"feed_forward_length", c.n_ff}, {"context_length", c.n_ctx_train}}) {
    BITSPLIT_RETURN_IF_ERROR(positive((p + what).c_str(), v));
  }
  // Every layer has tensors of its own, so a block count above the file's tensor count is
  // rejected before anything is sized by it (a short file gets "tensor ... is missing" instead).
  if (c.n_layers > int64_t(source.tensors().size())) {
    return Status::error(p + "block_count " + std::to_string(c.n_layers) + " is more layers than the file has tensors (" +
                         std::to_string(source.tensors().size()) + ")");
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return Status::error("head_count " + std::to_string(c.n_heads) + " is not a multiple of head_count_kv " +
                         std::to_string(c.n_kv_heads));
  }
  return Status::ok();
}

// The head size (key and value lengths, which must agree) and RoPE's dimensions per head.
Status read_head_size(const gguf::Metadata& m, const std::string& p, ModelConfig& c) {
  KeyReader keys(m);
  const int64_t default_head_dim = c.n_embd % c.n_heads == 0 ? c.n_embd / c.n_heads : 0;
  keys.get(p + "attention.key_length", &c.head_dim, default_head_dim);
  BITSPLIT_RETURN_IF_ERROR(keys.status());
  if (c.head_dim <= 0) {
    return Status::error("embedding_length " + std::to_string(c.n_embd) + " is not a multiple of head_count " +
                         std::to_string(c.n_heads) + " and attention.key_length is absent");
  }
  BITSPLIT_RETURN_IF_ERROR(positive((p + "attention.key_length").c_str(), c.head_dim));
  int64_t value_length = c.head_dim;
  keys.get(p + "attention.value_length", &value_length, c.head_dim);
  keys.get(p + "rope.dimension_count", &c.n_rot, c.head_dim);
  BITSPLIT_RETURN_IF_ERROR(keys.status());
  if (value_length != c.head_dim) {
    return Status::error("attention.value_length " + std::to_string(value_length) + " differs from key_length " +
                         std::to_string(c.head_dim) + ", which is not supported");
  }
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    return Status::error("rope.dimension_count " + std::to_string(c.n_rot) + " must be even and at most the head size " +
                         std::to_string(c.head_dim));
  }
  return Status::ok();
}

// rope.scaling.type (returned: "none", "linear", "longrope" or "su") and linear scaling's factor.
Result<std::string> read_rope_scaling(const gguf::Metadata& m, const std::string& p, ModelConfig& c) {
  BITSPLIT_ASSIGN_OR_RETURN(std::string scaling, m.get_string_or(p + "rope.scaling.type", "none"));
  if (scaling == "linear") {
    KeyReader keys(m);
    float factor = 1.0f;
    keys.getf(p + "rope.scaling.factor", &factor, 1.0);
    BITSPLIT_RETURN_IF_ERROR(keys.status());
    if (!(factor > 0.0f)) return Status::error("rope.scaling.factor must be positive");
    c.rope_freq_scale = 1.0f / factor;
  } else if (scaling != "none" && scaling != "longrope" && scaling != "su") {
    return Status::error("RoPE scaling type '" + scaling + "' is not supported (supported: none, linear, longrope)");
  }
  return scaling;
}

// What only some families have: gemma's (read_gemma_config), LongRoPE (any family whose file has
// the factors), phi3's sliding window.
Status read_family_config(const gguf::Metadata& m, const std::string& p, const WeightSource& source,
                          const std::string& scaling, ModelConfig& c) {
  if (c.arch == Architecture::kGemma2 || c.arch == Architecture::kGemma3) BITSPLIT_RETURN_IF_ERROR(read_gemma_config(m, p, c));
  BITSPLIT_RETURN_IF_ERROR(read_long_rope(m, p, source, scaling, c));
  // phi3: every layer slides when the file names a window (Phi-3-mini: 2047).
  if (c.arch == Architecture::kPhi3) BITSPLIT_RETURN_IF_ERROR(read_sliding_window(m, p, c, 0));
  return Status::ok();
}

// The vocabulary from the embedding's shape, and whether the head is tied to it.
Status read_vocab(const WeightSource& source, ModelConfig& c) {
  const gguf::TensorInfo* embd = source.find_tensor("token_embd.weight");
  if (!embd) return Status::error("tensor 'token_embd.weight' is missing");
  if (embd->dims.size() != 2 || embd->dims[0] != c.n_embd) {
    return Status::error("tensor 'token_embd.weight' has shape " + embd->shape_string() + ", expected [" +
                         std::to_string(c.n_embd) + ", n_vocab]");
  }
  c.n_vocab = embd->dims[1];
  c.tied_output = source.find_tensor("output.weight") == nullptr && source.find_tensor("output.draft_codes") == nullptr;
  return Status::ok();
}

}  // namespace

Result<ModelConfig> read_model_config(const WeightSource& source) {
  BITSPLIT_RETURN_IF_ERROR(require_model(source, ModelUse::kAny));
  const gguf::Metadata& m = source.metadata();
  auto ctx = [&](const Status& s) { return s.with_context(source.path()); };
  auto info = read_architecture(m);
  if (!info) return ctx(info.status());
  ModelConfig c;
  set_family(**info, c);
  const std::string p = c.arch_name + ".";
  if (auto s = read_sizes(m, p, source, c); !s) return ctx(s);
  if (auto s = read_head_size(m, p, c); !s) return ctx(s);
  auto scaling = read_rope_scaling(m, p, c);
  if (!scaling) return ctx(scaling.status());
  if (!(c.rms_eps > 0.0f)) return ctx(Status::error("attention.layer_norm_rms_epsilon must be positive"));
  c.attn_scale = 1.0f / std::sqrt(float(c.head_dim));
  if (auto s = read_family_config(m, p, source, *scaling, c); !s) return ctx(s);
  if (auto s = read_vocab(source, c); !s) return ctx(s);
  return c;
}

}  // namespace bitsplit
