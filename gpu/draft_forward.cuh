// The draft model's whole forward pass on the device, as a sequence of launches of
// gpu/draft_kernels.cuh on one stream: embedding gather, then per layer RMSNorm, int8
// quantisation, the 2-bit q/k/v projections (+ biases, QK-norm, RoPE), K/V into the device
// cache, tree-masked attention (sliding-window layers also by position), the output projection,
// the SwiGLU or GeGLU FFN or a mixture of experts (gemma's norms after each branch) and the
// residual adds; then the output norm and the 2-bit head (soft-capped for gemma2), whose top-k
// gpu/draft_model.cu takes. The same order of operations as forward_pass() with Pass::kDraft,
// so the logits agree with the CPU draft up to the device's libm (expf, powf, sinf, cosf).
//
// Everything here takes device pointers and only launches kernels; gpu/draft_model.cu owns the
// memory. Under tests/gpu/cuda_emulation.h the same code runs on host memory (the CI test of the
// whole pass against forward_pass).
#pragma once

#include <cstring>
#include <vector>

#include "bitsplit/expert_routing.h"
#include "bitsplit/gpu.h"
#include "draft_kernels.cuh"

namespace bitsplit::gpu::kernels {

// A draft plane of 2, 3 or 4 bits on the device (docs/FORMAT.md "Bit-split planes").
struct PlaneDev {
  const uint8_t* codes = nullptr;
  const uint16_t* scales = nullptr;
  const uint16_t* offsets = nullptr;
  int64_t out = 0, in = 0, groups = 0;
  int group = 0;
  int bits = 2;
  // A variant's sign plane fused into the kernel (rows padded to whole groups), or null.
  const uint8_t* signs = nullptr;
  const float* alpha = nullptr;
  bool alpha_per_row = true;
  // A variant's LoRA change (DraftModelHost::Plane::Lora), or null.
  const float* lora_up = nullptr;
  const float* lora_down = nullptr;
  int64_t lora_rank = 0;
  float lora_scale = 1.0f;
};

struct LayerDev {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* post_attn_norm = nullptr;  // gemma: null without the norms after each branch
  const float* post_ffn_norm = nullptr;
  const float* q_norm = nullptr;  // null without QK-norm
  const float* k_norm = nullptr;
  const float* bq = nullptr;  // null without biases
  const float* bk = nullptr;
  const float* bv = nullptr;
  PlaneDev wq, wk, wv, wo, gate, up, down;
  float* k_cache = nullptr;  // [n_slots x kv_dim], keys after RoPE
  float* v_cache = nullptr;
  bool swa = false;  // a sliding-window layer (ShapeDev::sliding_window)
  float rope_base = 10000.0f, rope_freq_scale = 1.0f;
  // A mixture of experts (ShapeDev::n_expert > 0) instead of gate/up/down: the router [n_expert x
  // n_embd], the experts' planes (a host array of n_expert x {gate, up, down}) and qwen2moe's
  // shared expert with its gate vector (null without).
  const float* router = nullptr;
  const PlaneDev* experts = nullptr;
  PlaneDev shexp_gate, shexp_up, shexp_down;
  const float* shexp_gate_inp = nullptr;
};

// The model's shape (ModelShape, as describe_device_draft takes it from the ModelConfig) and what
// only the device pass needs beside it.
struct ShapeDev : ModelShape {
  int group = 64;             // every plane's group (the activations are quantised once per input)
  int64_t max_lora_rank = 0;  // a variant's largest LoRA rank (scratch), 0 without
};

static_assert(kMaxTopK == DraftModel::kMaxTopK, "the top-k kernel's limit is the API's");

inline ShapeDev shape_of(const DraftModelHost& m) {
  ShapeDev s;
  static_cast<ModelShape&>(s) = m.shape;
  s.group = m.group;
  s.max_lora_rank = m.max_lora_rank;
  return s;
}

// A layer's norms, RoPE and window as the host describes them (the planes and cache are the
// owner's to fill in).
inline LayerDev layer_of(const DraftModelHost::Layer& w) {
  LayerDev d;
  d.attn_norm = w.attn_norm;
  d.ffn_norm = w.ffn_norm;
  d.post_attn_norm = w.post_attn_norm;
  d.post_ffn_norm = w.post_ffn_norm;
  d.q_norm = w.q_norm;
  d.k_norm = w.k_norm;
  d.bq = w.bq;
  d.bk = w.bk;
  d.bv = w.bv;
  d.swa = w.swa;
  d.rope_base = w.rope_base;
  d.rope_freq_scale = w.rope_freq_scale;
  d.router = w.router;
  d.shexp_gate_inp = w.shexp_gate_inp;
  return d;
}

// A sign plane's rows (row_bytes each, bit set = −1) repacked to whole groups of `group` bits,
// zero past `in`, as the kernels read them (they never read past a row).
inline std::vector<uint8_t> pad_sign_rows(const SignPlaneView& s, int group) {
  const int64_t padded_row = (s.in + group - 1) / group * group / 8, used = (s.in + 7) / 8;
  std::vector<uint8_t> rows(static_cast<size_t>(s.out * padded_row), 0);
  for (int64_t o = 0; o < s.out; ++o) {
    uint8_t* row = rows.data() + o * padded_row;
    std::memcpy(row, s.signs + o * s.row_bytes, size_t(used));
    if (s.in % 8) row[used - 1] &= uint8_t((1u << (s.in % 8)) - 1);
  }
  return rows;
}

struct ModelDev {
  ShapeDev shape;
  const float* token_embd = nullptr;  // [n_vocab x n_embd]
  const float* output_norm = nullptr;
  const float* rope_freq_factors = nullptr;  // n_rot / 2, or null
  PlaneDev head;
  // A variant's embedding signs ([n_vocab x embd_row_bytes], bit set = −1) and α, or null.
  const uint8_t* embd_signs = nullptr;
  const float* embd_alpha = nullptr;
  bool embd_alpha_per_row = true;
  int64_t embd_row_bytes = 0;
  // A variant's embedding LoRA (U [n_vocab x rank], V [rank x n_embd]), or null.
  const float* embd_lora_up = nullptr;
  const float* embd_lora_down = nullptr;
  int64_t embd_lora_rank = 0;
  float embd_lora_scale = 1.0f;
  const LayerDev* layers = nullptr;  // host array of n_layers (its pointers are device pointers)
  int32_t* slot_pos = nullptr;        // [n_slots]: the position of each slot's token (sliding window)
  // Group-64 planes on draft_matmul_g64 (16-byte loads, dp4a); false: the plain kernel for all
  // (same results bit for bit; the CPU emulation runs the plain one where speed matters).
  bool g64_kernel = true;
};

// Scratch for up to max_rows rows and max_kv_len cache slots (draft_scratch_floats()).
struct ScratchDev {
  float *x, *h, *q, *k, *v, *attn, *proj, *gate, *up, *logits, *scores, *lora;
  // A mixture of experts: router logits, an expert's gathered rows and its output, the routed
  // rows' weights and indices (expert by expert).
  float *router, *xe, *ye, *moe_weights;
  int8_t* qa;
  float* qa_scale;
  int32_t* qa_sum;
  int32_t* moe_rows;
};

// One draft batch on the device: tokens/positions/slots per row, mask [rows x kv_len].
struct BatchDev {
  const int32_t* tokens;
  const int32_t* positions;
  const int32_t* slots;
  const uint8_t* mask;
  int64_t rows, kv_len;
};

inline int64_t padded_width(int64_t in, int group) { return (in + group - 1) / group * group; }

inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

// Element counts of ScratchDev's arrays, in its order (the owner allocates them).
struct ScratchSizes {
  int64_t x, h, q, k, v, attn, proj, gate, up, logits, scores, qa, qa_groups, lora;
  int64_t router = 0, xe = 0, ye = 0, moe_weights = 0, moe_rows = 0;  // a mixture of experts
  // The float arrays together (qa_scale has qa_groups values).
  int64_t floats() const {
    return x + h + q + k + v + attn + proj + gate + up + logits + scores + qa_groups + lora + router + xe + ye + moe_weights;
  }
  // The int32 arrays together (qa_sum, then moe_rows).
  int64_t ints() const { return qa_groups + moe_rows; }
};
// The widest FFN of the model: its dense one, an expert, the shared expert.
inline int64_t widest_ffn(const ShapeDev& s) {
  int64_t w = s.n_ff;
  if (s.n_expert > 0) w = s.n_ff_exp > s.n_ff_shexp ? s.n_ff_exp : s.n_ff_shexp;
  return w;
}
inline ScratchSizes scratch_sizes(const ShapeDev& s, int64_t rows, int64_t kv_len) {
  const int64_t ff = widest_ffn(s);
  const int64_t widest = ff > s.q_dim() ? (ff > s.n_embd ? ff : s.n_embd) : (s.q_dim() > s.n_embd ? s.q_dim() : s.n_embd);
  const int64_t padded = padded_width(widest, s.group);
  ScratchSizes z{rows * s.n_embd, rows * s.n_embd, rows * s.q_dim(), rows * s.kv_dim(), rows * s.kv_dim(),
                 rows * s.q_dim(), rows * s.n_embd, rows * ff,        rows * ff,          rows * s.n_vocab,
                 rows * s.n_heads * kv_len, rows * padded, rows * (padded / s.group), rows * s.max_lora_rank};
  if (s.n_expert > 0) {
    z.router = rows * s.n_expert;
    z.xe = z.ye = rows * s.n_embd;
    z.moe_weights = z.moe_rows = rows * s.n_expert_used;
  }
  return z;
}

// ScratchDev over one block of sizes.floats() floats, the int8 array and sizes.ints() int32s.
inline ScratchDev carve_scratch(float* f, int8_t* qa, int32_t* ints, const ScratchSizes& z) {
  ScratchDev t{};
  for (auto [dst, n] : {std::pair{&t.x, z.x}, {&t.h, z.h}, {&t.q, z.q}, {&t.k, z.k}, {&t.v, z.v}, {&t.attn, z.attn},
                        {&t.proj, z.proj}, {&t.gate, z.gate}, {&t.up, z.up}, {&t.logits, z.logits},
                        {&t.scores, z.scores}, {&t.qa_scale, z.qa_groups}, {&t.lora, z.lora}, {&t.router, z.router},
                        {&t.xe, z.xe}, {&t.ye, z.ye}, {&t.moe_weights, z.moe_weights}}) {
    *dst = f;
    f += n;
  }
  t.qa = qa;
  t.qa_sum = ints;
  t.moe_rows = ints + z.qa_groups;
  return t;
}
// Quantises x [rows x in] into the scratch's int8 activations for planes of width `in`.
inline void quantize_input(const ShapeDev& s, const float* x, int64_t rows, int64_t in, ScratchDev& t, Stream stream) {
  (void)stream;  // unused under the emulation
  const int64_t groups = (in + s.group - 1) / s.group;
  BS_LAUNCH(quantize_rows, blocks_for(rows * groups, 128), 128, stream, x, rows, in, s.group, groups,
            groups * s.group, t.qa, t.qa_scale, t.qa_sum);
}

// y [rows x out] = D · X for the activations last quantised (their width is the plane's in).
inline void matmul(const PlaneDev& p, int64_t rows, const ScratchDev& t, float* y, Stream stream, bool g64) {
  (void)stream;
  if (g64 && p.bits == 2 && p.group == 64 && g64_rows_per_pass(p.groups) > 0) {
    BS_LAUNCH_SHARED(draft_matmul_g64, blocks_for(p.out, kG64Warps), kG64Threads, g64_shared_bytes(p.groups), stream,
                     p.codes, p.scales, p.offsets, p.out, p.groups, t.qa, t.qa_scale, t.qa_sum, rows,
                     p.groups * p.group, p.signs, p.alpha, p.alpha_per_row, y);
    return;
  }
  BS_LAUNCH(draft_matmul, p.out, kMatmulThreads, stream, p.codes, p.scales, p.offsets, p.out, p.groups, p.group, p.bits, t.qa,
            t.qa_scale, t.qa_sum, rows, p.groups * p.group, p.signs, p.alpha, p.alpha_per_row, y);
}

// y += scale · U·(V·x) when the plane carries a variant's LoRA; x is the projection's f32
// input [rows x p.in] (before its int8 quantisation), as forward_pass applies it.
inline void add_lora(const PlaneDev& p, const float* x, int64_t rows, const ScratchDev& t, float* y, Stream stream) {
  (void)stream;
  if (!p.lora_up) return;
  BS_LAUNCH(lora_down_rows, blocks_for(rows * p.lora_rank, 128), 128, stream, p.lora_down, x, rows, p.in, p.lora_rank,
            t.lora);
  BS_LAUNCH(lora_up_add, blocks_for(rows * p.out, 128), 128, stream, p.lora_up, t.lora, rows, p.out, p.lora_rank,
            p.lora_scale, y);
}

// y [n x n_embd] = down(act(gate(x)) ⊙ up(x)) of width ff over x [n x n_embd] (the dense FFN, an
// expert, the shared expert), as the CPU pass's ForwardPass::gated_ffn.
inline void gated_ffn(const ShapeDev& s, const PlaneDev& gate, const PlaneDev& up, const PlaneDev& down, const float* x,
                      int64_t n, int64_t ff, ScratchDev& t, float* y, Stream stream, bool g64) {
  quantize_input(s, x, n, s.n_embd, t, stream);
  matmul(gate, n, t, t.gate, stream, g64);
  matmul(up, n, t, t.up, stream, g64);
  add_lora(gate, x, n, t, t.gate, stream);
  add_lora(up, x, n, t, t.up, stream);
  if (s.ffn_act == FfnActivation::kGeluTanh) {
    BS_LAUNCH(gelu_mul, blocks_for(n * ff, 128), 128, stream, t.gate, t.up, n * ff);
  } else {
    BS_LAUNCH(silu_mul, blocks_for(n * ff, 128), 128, stream, t.gate, t.up, n * ff);
  }
  quantize_input(s, t.gate, n, ff, t, stream);
  matmul(down, n, t, y, stream, g64);
  add_lora(down, t.gate, n, t, y, stream);
}

// A mixture of experts into t.proj, from t.h: the router's logits (f32, as cpu::matmul_f32) come
// back to the host, which routes them as the CPU pass does (route_experts) and sends each routed
// expert's rows and weights; each expert then runs on its rows alone (gathered, its three planes,
// added back with the rows' weights, in expert order as the CPU adds them), so a pass reads only
// the routed experts' planes; qwen2moe's shared expert runs on every row, sigmoid-gated. One
// host round trip per layer.
inline void moe_ffn(const ModelDev& m, const LayerDev& w, int64_t n, ScratchDev& t, Stream stream) {
  const ShapeDev& s = m.shape;
  BS_LAUNCH(lora_down_rows, blocks_for(n * s.n_expert, 128), 128, stream, w.router, t.h, n, s.n_embd, s.n_expert,
            t.router);
  std::vector<float> logits(size_t(n * s.n_expert));
  BS_COPY_TO_HOST(logits.data(), t.router, logits.size() * sizeof(float), stream);
  std::vector<ExpertRows> routed;
  route_experts(logits.data(), n, s.n_expert, s.n_expert_used, s.expert_weights_norm, routed);
  std::vector<int32_t> rows;
  std::vector<float> weights;
  for (const ExpertRows& e : routed) {
    rows.insert(rows.end(), e.rows.begin(), e.rows.end());
    weights.insert(weights.end(), e.weights.begin(), e.weights.end());
  }
  BS_COPY_TO_DEVICE(t.moe_rows, rows.data(), rows.size() * sizeof(int32_t), stream);
  BS_COPY_TO_DEVICE(t.moe_weights, weights.data(), weights.size() * sizeof(float), stream);
  BS_LAUNCH(fill_zero, blocks_for(n * s.n_embd, 128), 128, stream, t.proj, n * s.n_embd);
  int64_t first = 0;
  for (int64_t e = 0; e < s.n_expert; ++e) {
    const int64_t count = int64_t(routed[size_t(e)].rows.size());
    if (count == 0) continue;
    const int32_t* er = t.moe_rows + first;
    const float* ew = t.moe_weights + first;
    first += count;
    BS_LAUNCH(gather_rows, blocks_for(count * s.n_embd, 128), 128, stream, t.h, er, count, s.n_embd, t.xe);
    gated_ffn(s, w.experts[3 * e], w.experts[3 * e + 1], w.experts[3 * e + 2], t.xe, count, s.n_ff_exp, t, t.ye, stream,
              m.g64_kernel);
    BS_LAUNCH(scatter_add_weighted, blocks_for(count * s.n_embd, 128), 128, stream, t.proj, t.ye, er, ew, count, s.n_embd);
  }
  if (s.n_ff_shexp > 0) {
    gated_ffn(s, w.shexp_gate, w.shexp_up, w.shexp_down, t.h, n, s.n_ff_shexp, t, t.ye, stream, m.g64_kernel);
    BS_LAUNCH(lora_down_rows, blocks_for(n, 128), 128, stream, w.shexp_gate_inp, t.h, n, s.n_embd, 1, t.router);
    BS_LAUNCH(add_sigmoid_gated, blocks_for(n * s.n_embd, 128), 128, stream, t.proj, t.ye, t.router, n, s.n_embd);
  }
}

// Runs the batch through the draft; logits [rows x n_vocab] land in t.logits. Every row's
// K/V are written to its slot before any row attends (stream order).
inline void draft_forward(const ModelDev& m, const BatchDev& b, ScratchDev& t, Stream stream) {
  (void)stream;
  const ShapeDev& s = m.shape;
  const int64_t n = b.rows;
  BS_LAUNCH(embed_rows, n, 128, stream, m.token_embd, b.tokens, s.n_embd, m.embd_signs, m.embd_alpha,
            m.embd_alpha_per_row, m.embd_row_bytes, m.embd_lora_up, m.embd_lora_down, m.embd_lora_rank,
            m.embd_lora_scale, s.embd_scale, t.x);
  if (s.sliding_window > 0) {
    BS_LAUNCH(write_positions, blocks_for(n, 128), 128, stream, b.slots, b.positions, n, m.slot_pos);
  }
  for (int64_t l = 0; l < s.n_layers; ++l) {
    const LayerDev& w = m.layers[l];
    BS_LAUNCH_SYNC(rms_norm_rows, n, kBlock, stream, t.x, w.attn_norm, s.n_embd, s.rms_eps, t.h);
    quantize_input(s, t.h, n, s.n_embd, t, stream);
    matmul(w.wq, n, t, t.q, stream, m.g64_kernel);
    matmul(w.wk, n, t, t.k, stream, m.g64_kernel);
    matmul(w.wv, n, t, t.v, stream, m.g64_kernel);
    add_lora(w.wq, t.h, n, t, t.q, stream);
    add_lora(w.wk, t.h, n, t, t.k, stream);
    add_lora(w.wv, t.h, n, t, t.v, stream);
    if (w.bq) {
      BS_LAUNCH(add_bias, blocks_for(n * s.q_dim(), 128), 128, stream, t.q, w.bq, n, s.q_dim());
      BS_LAUNCH(add_bias, blocks_for(n * s.kv_dim(), 128), 128, stream, t.k, w.bk, n, s.kv_dim());
      BS_LAUNCH(add_bias, blocks_for(n * s.kv_dim(), 128), 128, stream, t.v, w.bv, n, s.kv_dim());
    }
    if (w.q_norm) {
      BS_LAUNCH_SYNC(rms_norm_rows, n * s.n_heads, kBlock, stream, t.q, w.q_norm, s.head_dim, s.rms_eps, t.q);
      BS_LAUNCH_SYNC(rms_norm_rows, n * s.n_kv_heads, kBlock, stream, t.k, w.k_norm, s.head_dim, s.rms_eps, t.k);
    }
    const int64_t half = s.n_rot / 2;
    const bool neox = s.rope_order == RopeOrder::kNeox;
    if (half > 0) {  // a launch of zero blocks is an error
      BS_LAUNCH(rope_rows, blocks_for(n * s.n_heads * half, 128), 128, stream, t.q, n, s.n_heads, s.head_dim, s.n_rot,
                neox, b.positions, w.rope_base, w.rope_freq_scale, m.rope_freq_factors, s.rope_attn_factor);
      BS_LAUNCH(rope_rows, blocks_for(n * s.n_kv_heads * half, 128), 128, stream, t.k, n, s.n_kv_heads, s.head_dim,
                s.n_rot, neox, b.positions, w.rope_base, w.rope_freq_scale, m.rope_freq_factors, s.rope_attn_factor);
    }
    BS_LAUNCH(write_kv, blocks_for(n * s.kv_dim(), 128), 128, stream, t.k, t.v, b.slots, n, s.kv_dim(), w.k_cache,
              w.v_cache);
    BS_LAUNCH_SYNC(attention_rows, n * s.n_heads, kBlock, stream, t.q, w.k_cache, w.v_cache, b.mask, b.kv_len,
                   s.n_heads, s.n_kv_heads, s.head_dim, s.attn_scale, s.attn_softcap, b.positions, m.slot_pos,
                   w.swa ? s.sliding_window : int64_t{0}, t.scores, t.attn);
    quantize_input(s, t.attn, n, s.q_dim(), t, stream);
    matmul(w.wo, n, t, t.proj, stream, m.g64_kernel);
    add_lora(w.wo, t.attn, n, t, t.proj, stream);
    if (w.post_attn_norm) BS_LAUNCH_SYNC(rms_norm_rows, n, kBlock, stream, t.proj, w.post_attn_norm, s.n_embd, s.rms_eps, t.proj);
    BS_LAUNCH(add_into, blocks_for(n * s.n_embd, 128), 128, stream, t.x, t.proj, n * s.n_embd);

    BS_LAUNCH_SYNC(rms_norm_rows, n, kBlock, stream, t.x, w.ffn_norm, s.n_embd, s.rms_eps, t.h);
    if (s.n_expert > 0) {
      moe_ffn(m, w, n, t, stream);
    } else {
      gated_ffn(s, w.gate, w.up, w.down, t.h, n, s.n_ff, t, t.proj, stream, m.g64_kernel);
    }
    if (w.post_ffn_norm) BS_LAUNCH_SYNC(rms_norm_rows, n, kBlock, stream, t.proj, w.post_ffn_norm, s.n_embd, s.rms_eps, t.proj);
    BS_LAUNCH(add_into, blocks_for(n * s.n_embd, 128), 128, stream, t.x, t.proj, n * s.n_embd);
  }
  BS_LAUNCH_SYNC(rms_norm_rows, n, kBlock, stream, t.x, m.output_norm, s.n_embd, s.rms_eps, t.h);
  quantize_input(s, t.h, n, s.n_embd, t, stream);
  matmul(m.head, n, t, t.logits, stream, m.g64_kernel);
  add_lora(m.head, t.h, n, t, t.logits, stream);
  if (s.final_softcap > 0.0f) {
    BS_LAUNCH(softcap_in_place, blocks_for(n * s.n_vocab, 128), 128, stream, t.logits, n * s.n_vocab, s.final_softcap);
  }
}

}  // namespace bitsplit::gpu::kernels
