// attention_row_ref (the scalar reference) and attention_block's dispatch to the SIMD tier (cpu.h);
// silu_mul's reference and dispatch, on the same exponential.
#include <cmath>

#include "bitsplit/attention_exp.h"
#include "bitsplit/cpu.h"
#include "bitsplit/softmax_with.h"

namespace bitsplit::cpu {

void softmax_attention_ref(float* x, int64_t n) { softmax_with(x, n, attention_exp); }

void attention_row_ref(const float* q, const float* k, const float* v, int64_t stride, int64_t head_dim,
                       int64_t kv_len, const uint8_t* visible, float scale, float softcap, float* scores, float* out) {
  for (int64_t j = 0; j < kv_len; ++j) {
    if (!visible[j]) {
      scores[j] = -INFINITY;
      continue;
    }
    float s = dot_f32(q, k + j * stride, head_dim) * scale;
    if (softcap > 0.0f) s = cpu::softcap(s, softcap);
    scores[j] = s;
  }
  softmax_attention_ref(scores, kv_len);
  for (int64_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < kv_len; ++j) {
    if (!visible[j]) continue;
    const float p = scores[j];
    const float* vj = v + j * stride;
    for (int64_t d = 0; d < head_dim; ++d) out[d] = std::fma(p, vj[d], out[d]);
  }
}

void attention_block(int nq, const float* const* q, const uint8_t* const* visible, const float* k, const float* v,
                     int64_t stride, int64_t head_dim, int64_t kv_len, float scale, float softcap, float* const* scores,
                     float* const* out) {
  static const Isa isa = default_isa();
  if (isa == Isa::kAvx512 || isa == Isa::kAmx)
    return attention_block_avx512(nq, q, visible, k, v, stride, head_dim, kv_len, scale, softcap, scores, out);
  if (isa == Isa::kAvx2) return attention_block_avx2(nq, q, visible, k, v, stride, head_dim, kv_len, scale, softcap, scores, out);
  for (int r = 0; r < nq; ++r) {
    attention_row_ref(q[r], k, v, stride, head_dim, kv_len, visible[r], scale, softcap, scores[r], out[r]);
  }
}

void silu_mul_ref(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = silu(g[i]) * u[i];
}

void silu_mul(float* g, const float* u, int64_t n) {
  static const Isa isa = default_isa();
  if (isa != Isa::kScalar) return silu_mul_avx2(g, u, n);
  silu_mul_ref(g, u, n);
}

}  // namespace bitsplit::cpu
