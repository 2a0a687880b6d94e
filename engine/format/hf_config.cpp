// config.json -> GGUF metadata (hf_mapping.h): the keys llama.cpp's converter writes for each
// family, every field checked; an unknown architecture, RoPE scaling or value is an error naming it.
#include <cmath>
#include <numbers>

#include "hf_mapping.h"

namespace bitsplit::hf {
namespace {

using nlohmann::json;
using gguf::Value;

struct FamilyInfo {
  const char* hf;
  Family family;
  const char* gguf;
  double default_rms_eps;  // the transformers config class's defaults
  bool default_tied;
};
constexpr FamilyInfo kFamilies[] = {
    {"LlamaForCausalLM", Family::kLlama, "llama", 1e-6, false},
    {"MistralForCausalLM", Family::kLlama, "llama", 1e-6, false},
    {"Qwen2ForCausalLM", Family::kQwen2, "qwen2", 1e-6, false},
    {"Qwen3ForCausalLM", Family::kQwen3, "qwen3", 1e-6, false},
    {"Gemma2ForCausalLM", Family::kGemma2, "gemma2", 1e-6, true},
    {"Gemma3ForCausalLM", Family::kGemma3, "gemma3", 1e-6, true},
    {"Phi3ForCausalLM", Family::kPhi3, "phi3", 1e-5, false},
    {"MixtralForCausalLM", Family::kMixtral, "llama", 1e-5, false},
    {"Qwen2MoeForCausalLM", Family::kQwen2Moe, "qwen2moe", 1e-6, false},
    {"Qwen3MoeForCausalLM", Family::kQwen3Moe, "qwen3moe", 1e-6, false},
};

std::string supported_list() {
  std::string s;
  for (const auto& f : kFamilies) s += (s.empty() ? "" : ", ") + std::string(f.hf);
  return s;
}

// Typed field reads whose errors name config.json and the field.
class Fields {
 public:
  Fields(const json& j, const std::string& path) : j_(j), path_(path) {}
  const json* find(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  Result<int64_t> integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const json* v = find(key);
    if (!v) {
      if (fallback) return *fallback;
      return error(key, "is missing");
    }
    if (!v->is_number_integer()) return error(key, "is " + v->dump() + ", not an integer");
    const int64_t n = v->get<int64_t>();
    if (n < 0 || n > (int64_t(1) << 31)) return error(key, "is " + std::to_string(n) + ", out of range");
    return n;
  }
  Result<double> number(const char* key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) return error(key, "is " + v->dump() + ", not a number");
    const double d = v->get<double>();
    if (!std::isfinite(d)) return error(key, "is not finite");
    return d;
  }
  Result<bool> boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) return error(key, "is " + v->dump() + ", not true or false");
    return v->get<bool>();
  }
  Status error(const std::string& key, const std::string& what) const {
    return Status::error(path_ + ": \"" + key + "\" " + what);
  }

 private:
  const json& j_;
  const std::string& path_;
};

Result<const FamilyInfo*> read_family(const json& j, const std::string& path) {
  const auto archs = j.find("architectures");
  if (archs == j.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    const std::string type = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
    return Status::error(path + ": has no \"architectures\" list" + (type.empty() ? "" : " (model_type '" + type + "')") +
                         ", so the model class is unknown (supported: " + supported_list() + ")");
  }
  const std::string name = (*archs)[0].get<std::string>();
  for (const auto& f : kFamilies) {
    if (name == f.hf) return &f;
  }
  return Status::error(path + ": architecture '" + name + "' is not supported (supported: " + supported_list() + ")");
}

// rope_scaling (transformers 4) or rope_parameters (transformers 5); for gemma3 the full-attention
// layers' entry. Null when there is none.
json rope_entry(const json& j, const char* layer_kind = "full_attention") {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_object()) continue;
    const auto nested = it->find(layer_kind);
    if (nested != it->end() && nested->is_object()) return *nested;
    return *it;
  }
  return json();
}

Result<double> rope_theta(const json& j, const Fields& f, double fallback, const char* layer_kind = "full_attention") {
  const json r = rope_entry(j, layer_kind);
  if (r.is_object() && r.contains("rope_theta")) {
    if (!r["rope_theta"].is_number()) return f.error("rope_theta", "is not a number");
    return r["rope_theta"].get<double>();
  }
  return f.number("rope_theta", fallback);
}

// llama3-style scaling as llama.cpp computes it: per-frequency divisors in rope_freqs.weight.
std::vector<float> llama3_rope_factors(double base, int64_t dim, double factor, double low, double high, double original) {
  std::vector<float> out;
  const double low_wavelen = original / low, high_wavelen = original / high;
  for (int64_t i = 0; i < dim; i += 2) {
    const double freq = 1.0 / std::pow(base, double(i) / double(dim));
    const double wavelen = 2.0 * std::numbers::pi / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(float(factor));
    } else {
      const double smooth = (original / wavelen - low) / (high - low);
      out.push_back(float(1.0 / ((1.0 - smooth) / factor + smooth)));
    }
  }
  return out;
}

Result<std::vector<float>> float_list(const json& r, const char* key, size_t expected, const Fields& f) {
  const auto it = r.find(key);
  if (it == r.end() || !it->is_array()) return f.error(std::string("rope_scaling.") + key, "is missing or not a list");
  std::vector<float> out;
  for (const json& v : *it) {
    if (!v.is_number()) return f.error(std::string("rope_scaling.") + key, "holds a value that is not a number");
    out.push_back(v.get<float>());
  }
  if (out.size() != expected) {
    return f.error(std::string("rope_scaling.") + key, "has " + std::to_string(out.size()) + " entries, expected " +
                                                           std::to_string(expected) + " (half the rotated dimensions)");
  }
  return out;
}

Status read_rope_scaling(const json& j, const Fields& f, int64_t n_rot, ModelMap& m) {
  const json r = rope_entry(j);
  if (!r.is_object()) return Status::ok();
  std::string type = r.value("rope_type", r.value("type", std::string("default")));
  const std::string p = m.gguf_architecture + ".";
  if (type == "default") return Status::ok();
  auto number = [&](const char* key, std::optional<double> fallback) -> Result<double> {
    const auto it = r.find(key);
    if (it == r.end() || it->is_null()) {
      if (fallback) return *fallback;
      return f.error(std::string("rope_scaling.") + key, "is missing");
    }
    if (!it->is_number() || !(it->get<double>() > 0.0)) return f.error(std::string("rope_scaling.") + key, "must be a positive number");
    return it->get<double>();
  };
  if (type == "linear") {
    BITSPLIT_ASSIGN_OR_RETURN(double factor, number("factor", std::nullopt));
    m.metadata.set(p + "rope.scaling.type", Value::string("linear"));
    m.metadata.set(p + "rope.scaling.factor", Value::f32(float(factor)));
    return Status::ok();
  }
  if (type == "llama3" && m.gguf_architecture == "llama") {
    BITSPLIT_ASSIGN_OR_RETURN(double factor, number("factor", std::nullopt));
    BITSPLIT_ASSIGN_OR_RETURN(double low, number("low_freq_factor", 1.0));
    BITSPLIT_ASSIGN_OR_RETURN(double high, number("high_freq_factor", 4.0));
    BITSPLIT_ASSIGN_OR_RETURN(double original, number("original_max_position_embeddings", 8192.0));
    if (!(high > low)) return f.error("rope_scaling.high_freq_factor", "must be greater than low_freq_factor");
    BITSPLIT_ASSIGN_OR_RETURN(double base, rope_theta(j, f, 10000.0));
    m.computed_tensors.emplace_back("rope_freqs.weight", llama3_rope_factors(base, n_rot, factor, low, high, original));
    return Status::ok();
  }
  if ((type == "longrope" || type == "su") && m.family == Family::kPhi3) {
    BITSPLIT_ASSIGN_OR_RETURN(auto lng, float_list(r, "long_factor", size_t(n_rot / 2), f));
    BITSPLIT_ASSIGN_OR_RETURN(auto shrt, float_list(r, "short_factor", size_t(n_rot / 2), f));
    const auto orig_it = r.find("original_max_position_embeddings");
    const json* top = f.find("original_max_position_embeddings");
    const json* orig = orig_it != r.end() && orig_it->is_number_integer() ? &*orig_it : top;
    if (!orig || !orig->is_number_integer() || orig->get<int64_t>() <= 0) {
      return f.error("original_max_position_embeddings", "is missing (LongRoPE needs the context it was trained for)");
    }
    m.metadata.set(p + "rope.scaling.type", Value::string("longrope"));
    m.metadata.set(p + "rope.scaling.original_context_length", Value::u32(uint32_t(orig->get<int64_t>())));
    for (const char* key : {"attention_factor", "attn_factor"}) {
      if (r.contains(key) && r[key].is_number()) m.metadata.set(p + "rope.scaling.attn_factor", Value::f32(r[key].get<float>()));
    }
    m.computed_tensors.emplace_back("rope_factors_long.weight", std::move(lng));
    m.computed_tensors.emplace_back("rope_factors_short.weight", std::move(shrt));
    return Status::ok();
  }
  return f.error("rope_scaling", "type '" + type + "' is not supported for " + m.hf_architecture +
                                     " (supported: linear; llama3 for Llama; longrope for Phi-3)");
}

// Gemma 2 and 3: soft caps, the sliding window and its layers, the local RoPE base; the query
// scale the engine derives (1/sqrt(head_dim), 27B: 1/sqrt(n_embd / n_heads)) must be the config's.
Status read_gemma(const json& j, const Fields& f, int64_t n_embd, int64_t n_layers, int64_t head_dim, ModelMap& m) {
  const std::string p = m.gguf_architecture + ".";
  const bool gemma3 = m.family == Family::kGemma3;
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    BITSPLIT_ASSIGN_OR_RETURN(double cap, f.number(key, 0.0));
    if (cap < 0.0) return f.error(key, "must be >= 0");
    if (cap > 0.0) m.metadata.set(p + key, Value::f32(float(cap)));
  }
  BITSPLIT_ASSIGN_OR_RETURN(int64_t window, f.integer("sliding_window", 0));
  if (window > 0) m.metadata.set(p + "attention.sliding_window", Value::u32(uint32_t(window)));
  if (const json* types = f.find("layer_types")) {
    if (!types->is_array() || int64_t(types->size()) != n_layers) return f.error("layer_types", "is not one entry per layer");
    std::vector<Value> slides;
    for (const json& t : *types) {
      const std::string s = t.is_string() ? t.get<std::string>() : "";
      if (s != "sliding_attention" && s != "full_attention") return f.error("layer_types", "holds '" + t.dump() + "'");
      slides.push_back(Value::boolean(s == "sliding_attention"));
    }
    m.metadata.set(p + "attention.sliding_window_pattern", Value::array(gguf::ValueType::kBool, std::move(slides)));
  } else if (gemma3) {
    BITSPLIT_ASSIGN_OR_RETURN(int64_t period, f.integer("sliding_window_pattern", 6));
    if (period <= 0) return f.error("sliding_window_pattern", "must be positive");
    m.metadata.set(p + "attention.sliding_window_pattern", Value::u32(uint32_t(period)));
  }
  if (gemma3) {
    const json local = rope_entry(j, "sliding_attention");
    double base = 10000.0;
    if (local.is_object() && local.contains("rope_theta") && local["rope_theta"].is_number() && rope_entry(j) != local) {
      base = local["rope_theta"].get<double>();
    } else {
      BITSPLIT_ASSIGN_OR_RETURN(base, f.number("rope_local_base_freq", 10000.0));
    }
    m.metadata.set(p + "rope.freq_base_swa", Value::f32(float(base)));
  }
  const bool big = n_layers == (gemma3 ? 62 : 46) && n_embd % m.n_heads == 0;
  const int64_t engine_scalar = big ? n_embd / m.n_heads : head_dim;
  BITSPLIT_ASSIGN_OR_RETURN(int64_t scalar, f.integer("query_pre_attn_scalar", engine_scalar));
  if (scalar != engine_scalar) {
    return f.error("query_pre_attn_scalar", "is " + std::to_string(scalar) + "; only " + std::to_string(engine_scalar) +
                                                " (this model size's) is supported");
  }
  return Status::ok();
}

// Experts: counts, widths and whether the chosen experts' weights are renormalised.
Status read_moe(const Fields& f, ModelMap& m) {
  const std::string p = m.gguf_architecture + ".";
  const bool mixtral = m.family == Family::kMixtral;
  BITSPLIT_ASSIGN_OR_RETURN(int64_t experts, f.integer(mixtral ? "num_local_experts" : "num_experts"));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t used, f.integer("num_experts_per_tok"));
  m.metadata.set(p + "expert_count", Value::u32(uint32_t(experts)));
  m.metadata.set(p + "expert_used_count", Value::u32(uint32_t(used)));
  if (mixtral) return Status::ok();
  BITSPLIT_ASSIGN_OR_RETURN(int64_t width, f.integer("moe_intermediate_size"));
  m.metadata.set(p + "expert_feed_forward_length", Value::u32(uint32_t(width)));
  if (m.family == Family::kQwen2Moe) {
    BITSPLIT_ASSIGN_OR_RETURN(int64_t shared, f.integer("shared_expert_intermediate_size", 0));
    if (shared > 0) m.metadata.set(p + "expert_shared_feed_forward_length", Value::u32(uint32_t(shared)));
  }
  BITSPLIT_ASSIGN_OR_RETURN(bool norm, f.boolean("norm_topk_prob", m.family != Family::kQwen2Moe));
  m.metadata.set(p + "expert_weights_norm", Value::boolean(norm));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t step, f.integer("decoder_sparse_step", 1));
  const json* dense = f.find("mlp_only_layers");
  if (step != 1 || (dense && (!dense->is_array() || !dense->empty()))) {
    return f.error(step != 1 ? "decoder_sparse_step" : "mlp_only_layers", "makes some layers dense, which is not supported");
  }
  return Status::ok();
}

Status read_sizes(const json& j, const Fields& f, const FamilyInfo& info, ModelMap& m) {
  const std::string p = m.gguf_architecture + ".";
  BITSPLIT_ASSIGN_OR_RETURN(int64_t n_layers, f.integer("num_hidden_layers"));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t n_embd, f.integer("hidden_size"));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t n_ff, f.integer("intermediate_size"));
  BITSPLIT_ASSIGN_OR_RETURN(m.n_heads, f.integer("num_attention_heads"));
  BITSPLIT_ASSIGN_OR_RETURN(m.n_kv_heads, f.integer("num_key_value_heads", m.n_heads));
  BITSPLIT_ASSIGN_OR_RETURN(int64_t n_ctx, f.integer("max_position_embeddings", 2048));
  BITSPLIT_ASSIGN_OR_RETURN(double eps, f.number("rms_norm_eps", info.default_rms_eps));
  BITSPLIT_ASSIGN_OR_RETURN(double theta, rope_theta(j, f, m.family == Family::kGemma3 ? 1e6 : 10000.0));
  if (m.n_heads <= 0 || m.n_kv_heads <= 0) return f.error("num_attention_heads", "and num_key_value_heads must be positive");
  const bool has_head_dim = f.find("head_dim") != nullptr;
  BITSPLIT_ASSIGN_OR_RETURN(int64_t head_dim, f.integer("head_dim", n_embd / m.n_heads));
  BITSPLIT_ASSIGN_OR_RETURN(double partial, f.number("partial_rotary_factor", 1.0));
  if (!(partial > 0.0 && partial <= 1.0)) return f.error("partial_rotary_factor", "must be in (0, 1]");
  const int64_t n_rot = int64_t(std::llround(double(head_dim) * partial));

  m.metadata.set(p + "context_length", Value::u32(uint32_t(n_ctx)));
  m.metadata.set(p + "embedding_length", Value::u32(uint32_t(n_embd)));
  m.metadata.set(p + "block_count", Value::u32(uint32_t(n_layers)));
  m.metadata.set(p + "feed_forward_length", Value::u32(uint32_t(n_ff)));
  m.metadata.set(p + "attention.head_count", Value::u32(uint32_t(m.n_heads)));
  m.metadata.set(p + "attention.head_count_kv", Value::u32(uint32_t(m.n_kv_heads)));
  m.metadata.set(p + "rope.freq_base", Value::f32(float(theta)));
  m.metadata.set(p + "attention.layer_norm_rms_epsilon", Value::f32(float(eps)));
  if (has_head_dim) {
    m.metadata.set(p + "attention.key_length", Value::u32(uint32_t(head_dim)));
    m.metadata.set(p + "attention.value_length", Value::u32(uint32_t(head_dim)));
  }
  m.metadata.set(p + "rope.dimension_count", Value::u32(uint32_t(n_rot)));  // as llama.cpp's converter writes it
  BITSPLIT_RETURN_IF_ERROR(read_rope_scaling(j, f, n_rot, m));
  if (m.family == Family::kGemma2 || m.family == Family::kGemma3) {
    BITSPLIT_RETURN_IF_ERROR(read_gemma(j, f, n_embd, n_layers, head_dim, m));
  }
  if (m.family == Family::kPhi3) {
    BITSPLIT_ASSIGN_OR_RETURN(int64_t window, f.integer("sliding_window", 0));
    if (window > 0) m.metadata.set(p + "attention.sliding_window", Value::u32(uint32_t(window)));
  }
  if (m.family == Family::kLlama) {
    // Mistral's sliding window: the llama family here has none; a window at least the context is none.
    BITSPLIT_ASSIGN_OR_RETURN(int64_t window, f.integer("sliding_window", 0));
    if (window > 0 && window < n_ctx) return f.error("sliding_window", "is " + std::to_string(window) + ", which llama-family models here do not support");
  }
  if (m.family == Family::kMixtral || m.family == Family::kQwen2Moe || m.family == Family::kQwen3Moe) {
    BITSPLIT_RETURN_IF_ERROR(read_moe(f, m));
  }
  return Status::ok();
}

// The activation must be the family's (SiLU; gemma's tanh-approximated GELU).
Status check_activation(const Fields& f, const ModelMap& m) {
  const bool gemma = m.family == Family::kGemma2 || m.family == Family::kGemma3;
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    const json* v = f.find(key);
    if (!v) continue;
    const std::string act = v->is_string() ? v->get<std::string>() : v->dump();
    const bool ok = gemma ? (act == "gelu_pytorch_tanh" || act == "gelu_tanh") : act == "silu";
    if (!ok) return f.error(key, "is '" + act + "'; " + m.hf_architecture + " is run with " + (gemma ? "gelu_pytorch_tanh" : "silu"));
  }
  return Status::ok();
}

}  // namespace

Result<ModelMap> map_config(const std::string& text, const std::string& path) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::error(path + ": not a JSON object");
  try {
    BITSPLIT_ASSIGN_OR_RETURN(const FamilyInfo* info, read_family(j, path));
    ModelMap m;
    m.family = info->family;
    m.hf_architecture = info->hf;
    m.gguf_architecture = info->gguf;
    const Fields f(j, path);
    m.metadata.set("general.architecture", Value::string(m.gguf_architecture));
    if (const json* name = f.find("_name_or_path"); name && name->is_string() && !name->get<std::string>().empty()) {
      m.metadata.set("general.name", Value::string(name->get<std::string>()));
    }
    BITSPLIT_RETURN_IF_ERROR(read_sizes(j, f, *info, m));
    BITSPLIT_RETURN_IF_ERROR(check_activation(f, m));
    BITSPLIT_ASSIGN_OR_RETURN(m.tied_embeddings, f.boolean("tie_word_embeddings", info->default_tied));
    BITSPLIT_ASSIGN_OR_RETURN(m.vocab_size, f.integer("vocab_size", 0));
    return m;
  } catch (const json::exception& e) {  // a value of an unexpected type deep inside
    return Status::error(path + ": unexpected content: " + e.what());
  }
}

}  // namespace bitsplit::hf
