// What the attention tiers share (attention_avx2.cpp, attention_avx512.cpp): the slot tile both
// walk the cache in, how a row's scores are finished, and the softmax and weighted sum of a block.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "bitsplit/cpu.h"

namespace bitsplit::cpu {

// Slots per tile: every row of a block goes over one tile of keys (then values) before the next.
// A tile's keys stay in L1 for the block's rows only if they fit in the L1 sets they map to: a
// slot's head is head_dim floats of a cache row kv_dim floats long, so with two kv heads of 128 a
// tile uses half the sets. 64 slots (32 KiB) did not fit there; 32 do (bench_attention, Qwen2.5-
// 1.5B's shape at 2048 slots: 561 -> 420 us per block; SmolLM2's unchanged).
inline constexpr int64_t kAttentionTile = 32;

// scores[r] = softmax_attention_ref of row r's scaled (soft-capped, masked) dot products with the
// keys, attention_row_ref's bit for bit (AVX2: dot_f32's eight lanes, eight keys at once).
void attention_scores_avx2(int nq, const float* const* q, const uint8_t* const* visible, const float* k, int64_t stride,
                           int64_t head_dim, int64_t kv_len, float scale, float softcap, float* const* scores);

// softmax_attention_ref on each of a block's nq rows of n scores, in place (the AVX2 tier's; the
// AVX-512 tier's scores end with it too).
void softmax_rows_avx2(int nq, float* const* x, int64_t n);

// A tier's weighted-sum tile: out[0 .. C * lanes) = fma(p_j, v_j[d], out) over the visible slots j
// in [j0, j1), in slot order; tiles[C] for C = 1..8.
using WeightedSumTile = void (*)(const float* scores, const uint8_t* visible, const float* v, int64_t stride,
                                 int64_t j0, int64_t j1, float* out);

// Unnamed on purpose (as plane_kernels.h): each tier's file, built with its own -m flags, gets
// its own copy, so the linker never hands one tier the other's instructions.
namespace {
// A row's scores for slots j .. j + 7 from its eight dot products (attention_row_ref's): times
// scale, then -inf where the row does not see the slot, else the soft cap if there is one.
inline void finish_scores8(__m256 dots, const uint8_t* vis, float scale, float softcap, float* sc) {
  _mm256_storeu_ps(sc, _mm256_mul_ps(dots, _mm256_set1_ps(scale)));
  for (int t = 0; t < 8; ++t) {
    if (!vis[t]) {
      sc[t] = -INFINITY;
    } else if (softcap > 0.0f) {
      sc[t] = cpu::softcap(sc[t], softcap);
    }
  }
}

// A row's scores for slots [j, j1) one at a time (the slots past the tiers' whole eights, or
// every slot of a head size the eight-key kernels do not take), as attention_row_ref.
inline void scores_one_by_one(const float* q, const uint8_t* vis, const float* k, int64_t stride, int64_t head_dim,
                              int64_t j, int64_t j1, float scale, float softcap, float* sc) {
  for (; j < j1; ++j) {
    if (!vis[j]) {
      sc[j] = -INFINITY;
      continue;
    }
    float s = dot_f32(q, k + j * stride, head_dim) * scale;
    if (softcap > 0.0f) s = cpu::softcap(s, softcap);
    sc[j] = s;
  }
}

// out[r] = sum over the visible slots of p_j v_j (attention_row_ref's fma per term, slot order),
// tile by tile of kAttentionTile slots for every row of the block: d in chunks of up to 8 * lanes
// through the tier's tiles, the last head_dim % lanes values scalar (the same fma per value).
inline void weighted_sum_rows(int nq, const float* const* scores, const uint8_t* const* visible, const float* v,
                              int64_t stride, int64_t head_dim, int64_t kv_len, int lanes,
                              const WeightedSumTile* tiles, float* const* out) {
  const int64_t vec = head_dim / lanes * lanes;
  for (int r = 0; r < nq; ++r) std::fill(out[r], out[r] + head_dim, 0.0f);
  for (int64_t j0 = 0; j0 < kv_len; j0 += kAttentionTile) {
    const int64_t j1 = std::min(kv_len, j0 + kAttentionTile);
    for (int r = 0; r < nq; ++r) {
      for (int64_t d0 = 0; d0 < vec; d0 += 8 * lanes) {
        const int chunks = int(std::min<int64_t>(8, (vec - d0) / lanes));
        tiles[chunks](scores[r], visible[r], v + d0, stride, j0, j1, out[r] + d0);
      }
      for (int64_t d = vec; d < head_dim; ++d) {
        float a = out[r][d];
        for (int64_t j = j0; j < j1; ++j) {
          if (visible[r][j]) a = std::fma(scores[r][j], v[j * stride + d], a);
        }
        out[r][d] = a;
      }
    }
  }
}
}  // namespace

}  // namespace bitsplit::cpu
