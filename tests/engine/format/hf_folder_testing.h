// A GGUF model written as a transformers-layout Hugging Face folder (HF tensor names, q/k rows in
// transformers' order, gemma's norms as w rather than 1 + w, two F32 shards and an index,
// config.json), for the tests of engine/format/hf_folder.h and of the CLI on a folder.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "bitsplit/weights.h"
#include "safetensors_testing.h"

namespace bitsplit::testing {

// GGUF layer roles -> transformers' (after "model.layers.N.").
inline std::string hf_layer_name(const std::string& rest, bool gemma, bool mixtral, bool qwen_moe) {
  static const std::map<std::string, std::string> kCommon = {
      {"attn_norm.weight", "input_layernorm.weight"},      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},        {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},            {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},            {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},   {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},         {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
      {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"}};
  if (gemma && rest == "post_attention_norm.weight") return "post_attention_layernorm.weight";
  if (gemma && rest == "ffn_norm.weight") return "pre_feedforward_layernorm.weight";
  if (gemma && rest == "post_ffw_norm.weight") return "post_feedforward_layernorm.weight";
  if (!gemma && rest == "ffn_norm.weight") return "post_attention_layernorm.weight";
  if (mixtral && rest == "ffn_gate_inp.weight") return "block_sparse_moe.gate.weight";
  // Per-expert views: ffn_gate.E.weight.
  for (const auto& [kind, w, proj] : {std::tuple{"ffn_gate.", "w1", "gate_proj"}, {"ffn_down.", "w2", "down_proj"}, {"ffn_up.", "w3", "up_proj"}}) {
    if (rest.starts_with(kind) && rest != std::string(kind) + "weight") {
      const std::string e = rest.substr(std::strlen(kind), rest.size() - std::strlen(kind) - 7);
      if (mixtral) return "block_sparse_moe.experts." + e + "." + w + ".weight";
      if (qwen_moe) return "mlp.experts." + e + "." + proj + ".weight";
    }
  }
  return kCommon.at(rest);
}

// Transformers' q/k row order from llama.cpp's: row h·d + s·d/2 + i comes from row h·d + 2i + s.
inline std::vector<float> unpermute(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t heads) {
  const int64_t d = rows / heads;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t s = 0; s < 2; ++s)
        std::copy_n(w.data() + (h * d + 2 * i + s) * cols, cols, out.data() + (h * d + s * (d / 2) + i) * cols);
  return out;
}

inline nlohmann::json hf_config(const WeightSource& g) {
  const gguf::Metadata& m = g.metadata();
  const std::string arch = *m.get_string("general.architecture");
  const std::string p = arch + ".";
  auto i = [&](const std::string& k) { return *m.get_int(p + k); };
  nlohmann::json c;
  const bool experts = m.contains(p + "expert_count");
  c["architectures"] = {arch == "llama" ? (experts ? "MixtralForCausalLM" : "LlamaForCausalLM")
                        : arch == "gemma2" ? "Gemma2ForCausalLM" : arch == "qwen2moe" ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM"};
  c["hidden_size"] = i("embedding_length");
  c["num_hidden_layers"] = i("block_count");
  c["intermediate_size"] = i("feed_forward_length");
  c["num_attention_heads"] = i("attention.head_count");
  c["num_key_value_heads"] = *m.get_int_or(p + "attention.head_count_kv", i("attention.head_count"));
  c["max_position_embeddings"] = *m.get_int_or(p + "context_length", 2048);
  c["rms_norm_eps"] = *m.get_float(p + "attention.layer_norm_rms_epsilon");
  c["rope_theta"] = *m.get_float_or(p + "rope.freq_base", 10000.0);
  if (m.contains(p + "attention.key_length")) c["head_dim"] = i("attention.key_length");
  c["tie_word_embeddings"] = g.find_tensor("output.weight") == nullptr;
  c["hidden_act"] = arch == "gemma2" ? "gelu_pytorch_tanh" : "silu";
  if (arch == "gemma2") {
    c["sliding_window"] = i("attention.sliding_window");
    for (const char* k : {"attn_logit_softcapping", "final_logit_softcapping"}) {
      if (m.contains(p + k)) c[k] = *m.get_float(p + k);
    }
  }
  if (experts) {
    c[arch == "llama" ? "num_local_experts" : "num_experts"] = i("expert_count");
    c["num_experts_per_tok"] = i("expert_used_count");
    if (arch != "llama") c["moe_intermediate_size"] = i("expert_feed_forward_length");
    if (m.contains(p + "expert_shared_feed_forward_length")) c["shared_expert_intermediate_size"] = i("expert_shared_feed_forward_length");
    if (m.contains(p + "expert_weights_norm")) c["norm_topk_prob"] = *m.get_bool_or(p + "expert_weights_norm", false);
  }
  return c;
}

// Writes `g` as a transformers-layout folder of two F32 shards with an index.
inline void write_hf_folder(const WeightSource& g, const std::string& dir) {
  const nlohmann::json config = hf_config(g);
  const std::string arch = *g.metadata().get_string("general.architecture");
  const bool gemma = arch.starts_with("gemma"), mixtral = config["architectures"][0] == "MixtralForCausalLM";
  const bool permute = arch == "llama";
  std::vector<StTensor> shards[2];
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  size_t n = 0;
  for (const auto& t : g.tensors()) {
    std::string name;
    if (t.name == "token_embd.weight") name = "model.embed_tokens.weight";
    else if (t.name == "output_norm.weight") name = "model.norm.weight";
    else if (t.name == "output.weight") name = "lm_head.weight";
    else {
      const size_t dot = t.name.find('.', 4);
      name = "model.layers." + t.name.substr(4, dot - 4) + "." + hf_layer_name(t.name.substr(dot + 1), gemma, mixtral, !mixtral && arch.ends_with("moe"));
    }
    std::vector<float> v = *g.load_f32(t);
    if (gemma && t.name.ends_with("norm.weight")) for (float& x : v) x -= 1.0f;
    const bool q = t.name.ends_with("attn_q.weight"), k = t.name.ends_with("attn_k.weight");
    if (permute && (q || k)) v = unpermute(v, t.dims[1], t.dims[0], config[q ? "num_attention_heads" : "num_key_value_heads"].get<int64_t>());
    std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend());
    if (t.name.ends_with("ffn_gate_inp_shexp.weight")) shape = {1, t.dims[0]};
    const int s = n++ % 2;
    index["weight_map"][name] = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    shards[s].push_back({name, "F32", shape, f32_bytes(v)});
  }
  for (int s = 0; s < 2; ++s) {
    write_bytes(dir + "/model-0000" + std::to_string(s + 1) + "-of-00002.safetensors", safetensors_bytes(shards[s]));
  }
  write_text(dir + "/model.safetensors.index.json", index.dump());
  write_text(dir + "/config.json", config.dump(2));
}

}  // namespace bitsplit::testing
