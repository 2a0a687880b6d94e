// What the attention tiers share (attention_avx2.cpp, attention_avx512.cpp): the scores and
// softmax of a block, and the slot tile both walk the cache in.
#pragma once

#include <cstdint>

namespace bitsplit::cpu {

// Slots per tile: every row of a block goes over one tile of keys (then values) before the next.
inline constexpr int64_t kAttentionTile = 64;

// scores[r] = softmax_attention_ref of row r's scaled (soft-capped, masked) dot products with the
// keys, attention_row_ref's bit for bit (AVX2: dot_f32's eight lanes, eight keys at once).
void attention_scores_avx2(int nq, const float* const* q, const uint8_t* const* visible, const float* k, int64_t stride,
                           int64_t head_dim, int64_t kv_len, float scale, float softcap, float* const* scores);

}  // namespace bitsplit::cpu
