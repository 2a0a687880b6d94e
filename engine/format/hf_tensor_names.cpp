// Hugging Face tensor names -> GGUF tensor names (hf_mapping.h), per family, with the value
// transforms llama.cpp's converter applies.
#include <charconv>

#include "hf_mapping.h"

namespace bitsplit::hf {
namespace {

struct Role {
  const char* hf;    // after "model.layers.N."
  const char* gguf;  // after "blk.N."
};

// Roles every family shares (gemma's norms differ: see kGemmaNorms).
constexpr Role kCommon[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};
constexpr Role kPlainNorm[] = {{"post_attention_layernorm.weight", "ffn_norm.weight"}};
constexpr Role kGemmaNorms[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};
// Phi-3's fused projections (fused_tensors.h splits them for every consumer).
constexpr Role kPhi3[] = {{"self_attn.qkv_proj.weight", "attn_qkv.weight"}, {"mlp.gate_up_proj.weight", "ffn_up.weight"}};
constexpr Role kMixtral[] = {{"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"}};
constexpr Role kQwenMoe[] = {
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};
// One expert's projection: "<prefix>E.<hf>" -> "ffn_<kind>.E.weight".
struct ExpertRole {
  const char* hf;
  const char* kind;
};
constexpr ExpertRole kMixtralExperts[] = {{"w1.weight", "ffn_gate"}, {"w2.weight", "ffn_down"}, {"w3.weight", "ffn_up"}};
constexpr ExpertRole kQwenExperts[] = {{"gate_proj.weight", "ffn_gate"}, {"up_proj.weight", "ffn_up"}, {"down_proj.weight", "ffn_down"}};

bool is_gemma(Family f) { return f == Family::kGemma2 || f == Family::kGemma3; }
bool permutes_qk(Family f) { return f == Family::kLlama || f == Family::kMixtral; }

// "12.rest" -> (12, "rest").
std::optional<std::pair<int64_t, std::string>> split_layer(const std::string& s) {
  int64_t n = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end == s.data() || *end != '.' || n < 0) return std::nullopt;
  return std::pair{n, std::string(end + 1)};
}

template <size_t N>
const char* find_role(const Role (&roles)[N], const std::string& rest) {
  for (const auto& r : roles) {
    if (rest == r.hf) return r.gguf;
  }
  return nullptr;
}

std::optional<std::string> expert_name(const std::string& rest, const std::string& prefix, const ExpertRole* roles, size_t n) {
  if (!rest.starts_with(prefix)) return std::nullopt;
  const auto e = split_layer(rest.substr(prefix.size()));
  if (!e) return std::nullopt;
  for (size_t i = 0; i < n; ++i) {
    if (e->second == roles[i].hf) return std::string(roles[i].kind) + "." + std::to_string(e->first) + ".weight";
  }
  return std::nullopt;
}

// The GGUF name of a layer tensor (after "blk.N."), or nullptr.
std::optional<std::string> layer_role(Family family, const std::string& rest) {
  if (const char* g = find_role(kCommon, rest)) return g;
  if (const char* g = is_gemma(family) ? find_role(kGemmaNorms, rest) : find_role(kPlainNorm, rest)) return g;
  if (family == Family::kPhi3) {
    if (const char* g = find_role(kPhi3, rest)) return g;
  }
  if (family == Family::kMixtral) {
    if (const char* g = find_role(kMixtral, rest)) return g;
    return expert_name(rest, "block_sparse_moe.experts.", kMixtralExperts, std::size(kMixtralExperts));
  }
  if (family == Family::kQwen2Moe || family == Family::kQwen3Moe) {
    if (const char* g = find_role(kQwenMoe, rest)) return g;
    return expert_name(rest, "mlp.experts.", kQwenExperts, std::size(kQwenExperts));
  }
  return std::nullopt;
}

Transform layer_transform(Family family, const std::string& gguf_rest) {
  if (is_gemma(family) && gguf_rest.ends_with("norm.weight")) return Transform::kAddOne;
  if (permutes_qk(family) && gguf_rest.starts_with("attn_q.")) return Transform::kPermuteQ;
  if (permutes_qk(family) && gguf_rest.starts_with("attn_k.")) return Transform::kPermuteK;
  return Transform::kNone;
}

}  // namespace

Result<std::optional<MappedTensor>> map_tensor(const ModelMap& model, const std::string& hf_name) {
  const Family family = model.family;
  if (hf_name == "model.embed_tokens.weight") return std::optional(MappedTensor{"token_embd.weight"});
  if (hf_name == "model.norm.weight") {
    return std::optional(MappedTensor{"output_norm.weight", is_gemma(family) ? Transform::kAddOne : Transform::kNone});
  }
  if (hf_name == "lm_head.weight") {
    if (model.tied_embeddings) return std::optional<MappedTensor>();  // the embedding serves as the head
    return std::optional(MappedTensor{"output.weight"});
  }
  if (hf_name.ends_with(".rotary_emb.inv_freq")) return std::optional<MappedTensor>();  // recomputed from config.json
  static const std::string kLayers = "model.layers.";
  if (hf_name.starts_with(kLayers)) {
    if (const auto layer = split_layer(hf_name.substr(kLayers.size()))) {
      if (const auto rest = layer_role(family, layer->second)) {
        return std::optional(MappedTensor{"blk." + std::to_string(layer->first) + "." + *rest, layer_transform(family, *rest)});
      }
    }
  }
  return Status::error("tensor '" + hf_name + "' has no place in a " + model.hf_architecture + " model (" +
                       model.gguf_architecture + " in GGUF terms); is config.json's \"architectures\" right?");
}

}  // namespace bitsplit::hf
