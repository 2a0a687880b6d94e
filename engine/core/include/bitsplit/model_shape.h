// ModelShape: the hyperparameters of a Llama-family forward pass, one definition for the CPU pass
// (bitsplit::ModelConfig derives from it), the device draft's description (gpu::DraftModelHost)
// and the device kernels' shape (gpu/draft_forward.cuh). C++17 and free of CUDA types, because
// the CUDA sources include it.
#pragma once

#include <cstdint>

namespace bitsplit {

enum class RopeOrder {
  kNormal,  // rotates adjacent pairs (x[2i], x[2i+1])   — llama
  kNeox,    // rotates halves (x[i], x[i + n/2])           — qwen2, qwen3, gpt-neox
};

// The FFN's gate activation: SwiGLU (llama, qwen) or GeGLU with the tanh GELU (gemma).
enum class FfnActivation { kSilu, kGeluTanh };

struct ModelShape {
  int64_t n_layers = 0;
  int64_t n_embd = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t n_vocab = 0;
  int64_t n_rot = 0;  // RoPE dimensions per head (== head_dim for every supported model)
  float rope_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // linear RoPE scaling: positions are multiplied by this
  RopeOrder rope_order = RopeOrder::kNormal;
  float rope_attn_factor = 1.0f;  // LongRoPE's factor on cos and sin in every layer (1 otherwise)
  float rms_eps = 1e-5f;
  // Gemma: the embedding row is multiplied by embd_scale (sqrt(n_embd)); the FFN is GeGLU.
  float embd_scale = 1.0f;
  FfnActivation ffn_act = FfnActivation::kSilu;
  float attn_scale = 0.0f;     // scores = q·k · attn_scale (1/sqrt(head_dim) unless the family says otherwise)
  float attn_softcap = 0.0f;   // > 0: scores = c · tanh(scores / c) before the mask (gemma2)
  float final_softcap = 0.0f;  // > 0: logits = c · tanh(logits / c) (gemma2)
  // Sliding-window attention (gemma2, gemma3, phi3): in the sliding-window layers a token at
  // position p sees only cache slots at positions > p - sliding_window (which layers slide, and
  // their RoPE: ModelConfig per layer; the device draft's Layer::swa).
  int64_t sliding_window = 0;
  // Mixture of experts (qwen2moe, qwen3moe, llama with expert_count = Mixtral): each layer's FFN
  // is n_expert FFNs of width n_ff_exp; the router (ffn_gate_inp) picks n_expert_used per token
  // by softmax probability, weighted by those probabilities (renormalised over the chosen when
  // expert_weights_norm); qwen2moe adds a shared expert of width n_ff_shexp gated by
  // sigmoid(x · ffn_gate_inp_shexp).
  int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
  bool expert_weights_norm = false;

  constexpr int64_t q_dim() const { return n_heads * head_dim; }
  constexpr int64_t kv_dim() const { return n_kv_heads * head_dim; }
  constexpr bool is_moe() const { return n_expert > 0; }
};

}  // namespace bitsplit
