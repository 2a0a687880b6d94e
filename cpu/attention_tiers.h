// What the attention tiers share (attention_avx2.cpp, attention_avx512.cpp): the slot tile both
// walk the cache in, the AVX2 scores and softmax the AVX-512 tier calls too, and the type of a
// weighted-sum tile. The code they share is in attention_tier_helpers.h.
#pragma once

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

}  // namespace bitsplit::cpu
