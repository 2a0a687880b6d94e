// attention_block's AVX2 tier: dot_f32's eight lanes in one register (a[i..i+7] · b[i..i+7]
// added lane by lane, then the same pairwise reduction, eight keys at once), attention_exp eight
// lanes at a time, and the weighted sum of V eight values of d at a time (one fused multiply-add
// per term, as the reference); each row's softmax double sum stays scalar and in slot order (the
// block's rows interleaved), so every row is attention_row_ref's bit for bit. Compiled for AVX2 + FMA
// with -ffp-contract=off: the compiler fuses nothing by itself, the weighted sum's fma are
// written out. (dot_f32 dispatches here too, and silu_mul: silu_exp eight at a time.)
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
BITSPLIT_TARGET_BEGIN(BITSPLIT_ISA_AVX2)

#include "attention_tier_helpers.h"
#include "exp_avx2.h"

namespace bitsplit::cpu {
namespace {

float dot8(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  alignas(32) float lane[8];
  _mm256_store_ps(lane, acc);
  for (int k = 0; i < n; ++i, ++k) lane[k] += a[i] * b[i];
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

// Eight dot products q · k_{j0+t} (t < 8) of head_dim % 8 == 0 values at once, each with
// dot8's arithmetic: lane l of key t accumulates q[i+l]·k[i+l] over the chunks i, then the lanes
// are summed ((0+4)+(1+5))+((2+6)+(3+7)). The 8x8 transpose puts lane l of every key in one
// register, so that sum runs for the eight keys in parallel, the same adds in the same order.
__m256 dot8_x8(const float* q, const float* k, int64_t stride, int64_t head_dim) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t i = 0; i < head_dim; i += 8) {
    const __m256 qc = _mm256_loadu_ps(q + i);
    for (int t = 0; t < 8; ++t) acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(qc, _mm256_loadu_ps(k + t * stride + i)));
  }
  // Transpose: r[l] = (acc[0][l], ..., acc[7][l]).
  const __m256 t0 = _mm256_unpacklo_ps(acc[0], acc[1]), t1 = _mm256_unpackhi_ps(acc[0], acc[1]);
  const __m256 t2 = _mm256_unpacklo_ps(acc[2], acc[3]), t3 = _mm256_unpackhi_ps(acc[2], acc[3]);
  const __m256 t4 = _mm256_unpacklo_ps(acc[4], acc[5]), t5 = _mm256_unpackhi_ps(acc[4], acc[5]);
  const __m256 t6 = _mm256_unpacklo_ps(acc[6], acc[7]), t7 = _mm256_unpackhi_ps(acc[6], acc[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  const __m256 r0 = _mm256_permute2f128_ps(u0, u4, 0x20), r4 = _mm256_permute2f128_ps(u0, u4, 0x31);
  const __m256 r1 = _mm256_permute2f128_ps(u1, u5, 0x20), r5 = _mm256_permute2f128_ps(u1, u5, 0x31);
  const __m256 r2 = _mm256_permute2f128_ps(u2, u6, 0x20), r6 = _mm256_permute2f128_ps(u2, u6, 0x31);
  const __m256 r3 = _mm256_permute2f128_ps(u3, u7, 0x20), r7 = _mm256_permute2f128_ps(u3, u7, 0x31);
  return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(r0, r4), _mm256_add_ps(r1, r5)),
                       _mm256_add_ps(_mm256_add_ps(r2, r6), _mm256_add_ps(r3, r7)));
}

// sum[t] += double(x[t][j]) for j in [j0, j1), slot order within each row; the R rows' chains
// interleaved, so the adds wait on one another's latency R times less than one row's chain does.
template <int R>
void sum_rows_in_order(const float* const* x, int64_t j0, int64_t j1, double* sum) {
  double s[R];
  for (int t = 0; t < R; ++t) s[t] = sum[t];
  for (int64_t j = j0; j < j1; ++j) {
    for (int t = 0; t < R; ++t) s[t] += double(x[t][j]);
  }
  for (int t = 0; t < R; ++t) sum[t] = s[t];
}

void sum_rows_in_order(int rows, const float* const* x, int64_t j0, int64_t j1, double* sum) {
  switch (rows) {
    case 1: return sum_rows_in_order<1>(x, j0, j1, sum);
    case 2: return sum_rows_in_order<2>(x, j0, j1, sum);
    case 3: return sum_rows_in_order<3>(x, j0, j1, sum);
    case 4: return sum_rows_in_order<4>(x, j0, j1, sum);
    case 5: return sum_rows_in_order<5>(x, j0, j1, sum);
    case 6: return sum_rows_in_order<6>(x, j0, j1, sum);
    case 7: return sum_rows_in_order<7>(x, j0, j1, sum);
    default: return sum_rows_in_order<8>(x, j0, j1, sum);
  }
}

}  // namespace

// softmax_attention_ref on each row of a block (n slots each): the max (order-free), the
// exponentials and the scaling eight at a time, the sum in double in slot order per row, with the
// rows' sums interleaved eight at a time. A row's masked tail (its last slots, all -inf: a prompt
// row's later positions) is 0 without exponentials — the reference's e^-inf = 0, and adding +0 to
// the sum leaves it as it is. A row masked everywhere takes every slot, as the reference does.
void softmax_rows_avx2(int nq, float* const* x, int64_t n) {
  int64_t len[kAttentionBlock];
  for (int r = 0; r < nq; ++r) {
    float* row = x[r];
    int64_t m = n;
    while (m > 0 && row[m - 1] == -INFINITY) --m;
    if (m == 0) m = n;
    len[r] = m;
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= m; i += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(row + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m8);
    float max = -INFINITY;
    for (float l : lanes) max = std::max(max, l);
    for (; i < m; ++i) max = std::max(max, row[i]);
    const __m256 max8 = _mm256_set1_ps(max);
    for (i = 0; i + 8 <= m; i += 8) _mm256_storeu_ps(row + i, attention_exp8(_mm256_sub_ps(_mm256_loadu_ps(row + i), max8)));
    for (; i < m; ++i) row[i] = attention_exp(row[i] - max);
    std::fill(row + m, row + n, 0.0f);
  }
  double sum[kAttentionBlock];
  for (int r0 = 0; r0 < nq; r0 += 8) {
    const int rows = std::min(8, nq - r0);
    const int64_t common = *std::min_element(len + r0, len + r0 + rows);
    std::fill(sum + r0, sum + r0 + rows, 0.0);
    sum_rows_in_order(rows, x + r0, 0, common, sum + r0);
    for (int t = 0; t < rows; ++t) sum_rows_in_order(1, x + r0 + t, common, len[r0 + t], sum + r0 + t);
  }
  for (int r = 0; r < nq; ++r) {
    float* row = x[r];
    const float inv = float(1.0 / sum[r]);
    const __m256 inv8 = _mm256_set1_ps(inv);
    int64_t i = 0;
    for (; i + 8 <= len[r]; i += 8) _mm256_storeu_ps(row + i, _mm256_mul_ps(_mm256_loadu_ps(row + i), inv8));
    for (; i < len[r]; ++i) row[i] *= inv;
  }
}

float dot_f32_avx2(const float* a, const float* b, int64_t n) { return dot8(a, b, n); }

void dot_f32_rows_avx2(const float* x, const float* rows, int64_t stride, int64_t n, int64_t count, float* out) {
  int64_t t = 0;
  if (n % 8 == 0) {
    for (; t + 8 <= count; t += 8) _mm256_storeu_ps(out + t, dot8_x8(x, rows + t * stride, stride, n));
  }
  for (; t < count; ++t) out[t] = dot8(rows + t * stride, x, n);
}

namespace {

// acc[0..C) (C·8 values of d) = fma(p_j, v_j[d], acc) over the slots j in [j0, j1) the row sees.
template <int C>
void weighted_sum_tile(const float* scores, const uint8_t* visible, const float* v, int64_t stride, int64_t j0,
                       int64_t j1, float* out) {
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_loadu_ps(out + 8 * c);
  for (int64_t j = j0; j < j1; ++j) {
    if (!visible[j]) continue;
    const __m256 p = _mm256_set1_ps(scores[j]);
    const float* vj = v + j * stride;
    for (int c = 0; c < C; ++c) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), acc[c]);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + 8 * c, acc[c]);
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

// The block: slots in tiles of kAttentionTile, every row of the block over one tile before the
// next, so a tile's keys and values are read from memory once and from L1 by the other rows. Per
// row the same operations in the same order as attention_row (its dot lanes, its softmax, its sum
// over the slots it sees in slot order, partial sums kept exactly in `out` between tiles).
void attention_scores_avx2(int nq, const float* const* q, const uint8_t* const* visible, const float* k, int64_t stride,
                           int64_t head_dim, int64_t kv_len, float scale, float softcap, float* const* scores) {
  BITSPLIT_CHECK(nq >= 1 && nq <= kAttentionBlock);
  for (int64_t j0 = 0; j0 < kv_len; j0 += kAttentionTile) {
    const int64_t j1 = std::min(kv_len, j0 + kAttentionTile);
    for (int r = 0; r < nq; ++r) {
      const uint8_t* vis = visible[r];
      float* sc = scores[r];
      int64_t j = j0;
      if (head_dim % 8 == 0) {
        for (; j + 8 <= j1; j += 8) {
          uint64_t seen;
          std::memcpy(&seen, vis + j, 8);
          if (seen == 0) {
            for (int t = 0; t < 8; ++t) sc[j + t] = -INFINITY;
            continue;
          }
          finish_scores8(dot8_x8(q[r], k + j * stride, stride, head_dim), vis + j, scale, softcap, sc + j);
        }
      }
      scores_one_by_one(q[r], vis, k, stride, head_dim, j, j1, scale, softcap, sc);
    }
  }
  softmax_rows_avx2(nq, scores, kv_len);
}

void attention_block_avx2(int nq, const float* const* q, const uint8_t* const* visible, const float* k, const float* v,
                          int64_t stride, int64_t head_dim, int64_t kv_len, float scale, float softcap,
                          float* const* scores, float* const* out) {
  attention_scores_avx2(nq, q, visible, k, stride, head_dim, kv_len, scale, softcap, scores);
  weighted_sum_rows(nq, scores, visible, v, stride, head_dim, kv_len, 8, kTiles, out);
}

void silu_mul_avx2(float* g, const float* u, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(g + i, _mm256_mul_ps(silu_exp8(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
  for (; i < n; ++i) g[i] = silu(g[i]) * u[i];
}

}  // namespace bitsplit::cpu

BITSPLIT_TARGET_END
