// attention_block's AVX-512 tier: the AVX2 tier's scores and softmax (attention_scores_avx2; a
// dot product's eight lanes are part of its definition), then the weighted sum of V sixteen
// values of d at a time, up to 128 of d per pass over a tile's slots (a 128-wide head in one
// pass, where the AVX2 tier takes two). Each out[d] is the same fused multiply-adds in the same
// slot order as attention_row_ref, so the rows are its bit for bit. Built with -ffp-contract=off.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "attention_tiers.h"
#include "bitsplit/cpu.h"

namespace bitsplit::cpu {
namespace {

// acc[0..C) (C·16 values of d) = fma(p_j, v_j[d], acc) over the slots j in [j0, j1) the row sees.
template <int C>
void weighted_sum_tile(const float* scores, const uint8_t* visible, const float* v, int64_t stride, int64_t j0,
                       int64_t j1, float* out) {
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_loadu_ps(out + 16 * c);
  for (int64_t j = j0; j < j1; ++j) {
    if (!visible[j]) continue;
    const __m512 p = _mm512_set1_ps(scores[j]);
    const float* vj = v + j * stride;
    for (int c = 0; c < C; ++c) acc[c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vj + 16 * c), acc[c]);
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + 16 * c, acc[c]);
}

constexpr WeightedSumTile kTiles[9] = {nullptr,
                              weighted_sum_tile<1>,
                              weighted_sum_tile<2>,
                              weighted_sum_tile<3>,
                              weighted_sum_tile<4>,
                              weighted_sum_tile<5>,
                              weighted_sum_tile<6>,
                              weighted_sum_tile<7>,
                              weighted_sum_tile<8>};

}  // namespace

void attention_block_avx512(int nq, const float* const* q, const uint8_t* const* visible, const float* k,
                            const float* v, int64_t stride, int64_t head_dim, int64_t kv_len, float scale,
                            float softcap, float* const* scores, float* const* out) {
  attention_scores_avx2(nq, q, visible, k, stride, head_dim, kv_len, scale, softcap, scores);
  weighted_sum_rows(nq, scores, visible, v, stride, head_dim, kv_len, 16, kTiles, out);
}

}  // namespace bitsplit::cpu
