// What the attention tiers' code shares (attention_avx2.cpp, attention_avx512.cpp): how a row's
// scores are finished, one key at a time or eight at once, and a block's weighted sum tile by tile.
// Include only inside a tier file's instruction-set region (bitsplit/isa_target.h), after every
// other header: in an unnamed namespace, so each tier gets its own copy compiled for it and the
// linker never hands one tier, or generic code, the other's instructions.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "attention_tiers.h"
#include "bitsplit/cpu.h"

namespace bitsplit::cpu {

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
