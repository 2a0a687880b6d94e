// attention_block's AVX-512 tier: the AVX2 tier's scores and softmax (attention_scores_avx2; a
// dot product's eight lanes are part of its definition), then the weighted sum of V sixteen
// values of d at a time, up to 128 of d per pass over a tile's slots (a 128-wide head in one
// pass, where the AVX2 tier takes two). Each out[d] is the same fused multiply-adds in the same
// slot order as attention_row_ref, so the rows are its bit for bit. Built with -ffp-contract=off.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bitsplit/attention_exp.h"
#include "bitsplit/cpu.h"
#include "bitsplit/isa_target.h"
#include "bitsplit/status.h"
#include "attention_tiers.h"

// From here on the code is compiled for the tier (bitsplit/isa_target.h): every other header is
// above, the tier's own helpers (unnamed namespaces) below.
BITSPLIT_TARGET_BEGIN(BITSPLIT_ISA_AVX512)

#include "attention_tier_helpers.h"

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

// 256 bits of memory in both halves of a 512-bit register (vbroadcastf64x4: a load, no shuffle).
inline __m512 both_halves(const float* p) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

// Eight dot products for each of two query rows a and b at once, q · k_{t} for the keys
// k + t * stride (t < 8), head_dim % 8 == 0: lanes 0..7 of the result are row a's, 8..15 row b's.
// Each half is the AVX2 tier's dot8_x8 (attention_avx2.cpp) for its row, the same operations on
// the same values: lane l of key t accumulates q[i+l]·k[i+l] (a multiply, then an add) over the
// chunks i in order, then the 8 x 8 transpose (within each half) and the sum
// ((0+4)+(1+5))+((2+6)+(3+7)). Each key chunk is loaded into both halves, so one multiply and one
// add serve both rows: half the vector operations of two dot8_x8 calls.
__m512 dot8_x8_pair(const float* qa, const float* qb, const float* k, int64_t stride, int64_t head_dim) {
  __m512 acc[8];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t i = 0; i < head_dim; i += 8) {
    const __m512 qc = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(qa + i))),
                                                          _mm256_castps_pd(_mm256_loadu_ps(qb + i)), 1));
    for (int t = 0; t < 8; ++t) acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(qc, both_halves(k + t * stride + i)));
  }
  // The AVX2 transpose in each half: unpack and shuffle act within 128-bit lanes already; the
  // 128-bit lane exchange of permute2f128 is a two-source permute of whole 128-bit lanes.
  const __m512 t0 = _mm512_unpacklo_ps(acc[0], acc[1]), t1 = _mm512_unpackhi_ps(acc[0], acc[1]);
  const __m512 t2 = _mm512_unpacklo_ps(acc[2], acc[3]), t3 = _mm512_unpackhi_ps(acc[2], acc[3]);
  const __m512 t4 = _mm512_unpacklo_ps(acc[4], acc[5]), t5 = _mm512_unpackhi_ps(acc[4], acc[5]);
  const __m512 t6 = _mm512_unpacklo_ps(acc[6], acc[7]), t7 = _mm512_unpackhi_ps(acc[6], acc[7]);
  const __m512 u0 = _mm512_shuffle_ps(t0, t2, 0x44), u1 = _mm512_shuffle_ps(t0, t2, 0xEE);
  const __m512 u2 = _mm512_shuffle_ps(t1, t3, 0x44), u3 = _mm512_shuffle_ps(t1, t3, 0xEE);
  const __m512 u4 = _mm512_shuffle_ps(t4, t6, 0x44), u5 = _mm512_shuffle_ps(t4, t6, 0xEE);
  const __m512 u6 = _mm512_shuffle_ps(t5, t7, 0x44), u7 = _mm512_shuffle_ps(t5, t7, 0xEE);
  // Per half: lo = (x.lo128, y.lo128) (permute2f128 0x20), hi = (x.hi128, y.hi128) (0x31).
  const __m512i lo = _mm512_set_epi32(27, 26, 25, 24, 11, 10, 9, 8, 19, 18, 17, 16, 3, 2, 1, 0);
  const __m512i hi = _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 23, 22, 21, 20, 7, 6, 5, 4);
  const __m512 r0 = _mm512_permutex2var_ps(u0, lo, u4), r4 = _mm512_permutex2var_ps(u0, hi, u4);
  const __m512 r1 = _mm512_permutex2var_ps(u1, lo, u5), r5 = _mm512_permutex2var_ps(u1, hi, u5);
  const __m512 r2 = _mm512_permutex2var_ps(u2, lo, u6), r6 = _mm512_permutex2var_ps(u2, hi, u6);
  const __m512 r3 = _mm512_permutex2var_ps(u3, lo, u7), r7 = _mm512_permutex2var_ps(u3, hi, u7);
  return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(r0, r4), _mm512_add_ps(r1, r5)),
                       _mm512_add_ps(_mm512_add_ps(r2, r6), _mm512_add_ps(r3, r7)));
}

// attention_scores_avx2 with the block's rows taken two at a time (dot8_x8_pair); an odd last row
// is paired with itself. Same scores bit for bit, then the same softmax.
void attention_scores_avx512(int nq, const float* const* q, const uint8_t* const* visible, const float* k,
                             int64_t stride, int64_t head_dim, int64_t kv_len, float scale, float softcap,
                             float* const* scores) {
  if (head_dim % 8 != 0) return attention_scores_avx2(nq, q, visible, k, stride, head_dim, kv_len, scale, softcap, scores);
  BITSPLIT_CHECK(nq >= 1 && nq <= kAttentionBlock);
  for (int64_t j0 = 0; j0 < kv_len; j0 += kAttentionTile) {
    const int64_t j1 = std::min(kv_len, j0 + kAttentionTile);
    for (int r = 0; r < nq; r += 2) {
      const int rb = std::min(r + 1, nq - 1);  // the pair's second row (r itself when r is last)
      const uint8_t *va = visible[r], *vb = visible[rb];
      float *sa = scores[r], *sb = scores[rb];
      int64_t j = j0;
      for (; j + 8 <= j1; j += 8) {
        uint64_t seen_a, seen_b;
        std::memcpy(&seen_a, va + j, 8);
        std::memcpy(&seen_b, vb + j, 8);
        if ((seen_a | seen_b) == 0) {
          for (int t = 0; t < 8; ++t) sa[j + t] = sb[j + t] = -INFINITY;
          continue;
        }
        const __m512 dots = dot8_x8_pair(q[r], q[rb], k + j * stride, stride, head_dim);
        finish_scores8(_mm512_castps512_ps256(dots), va + j, scale, softcap, sa + j);
        if (rb != r) finish_scores8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(dots), 1)), vb + j, scale,
                                    softcap, sb + j);
      }
      scores_one_by_one(q[r], va, k, stride, head_dim, j, j1, scale, softcap, sa);
      if (rb != r) scores_one_by_one(q[rb], vb, k, stride, head_dim, j, j1, scale, softcap, sb);
    }
  }
  softmax_rows_avx2(nq, scores, kv_len);
}

}  // namespace

void attention_block_avx512(int nq, const float* const* q, const uint8_t* const* visible, const float* k,
                            const float* v, int64_t stride, int64_t head_dim, int64_t kv_len, float scale,
                            float softcap, float* const* scores, float* const* out) {
  attention_scores_avx512(nq, q, visible, k, stride, head_dim, kv_len, scale, softcap, scores);
  weighted_sum_rows(nq, scores, visible, v, stride, head_dim, kv_len, 16, kTiles, out);
}

}  // namespace bitsplit::cpu

BITSPLIT_TARGET_END
