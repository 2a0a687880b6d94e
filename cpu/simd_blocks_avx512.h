// The AVX-512 tier's 32-bit 16 x 16 tile transpose (plane and Q8_0 kernels). Include only inside
// an AVX-512 region (bitsplit/isa_target.h), after every other header; unnamed namespace, as
// simd_blocks.h.
#pragma once

#include <immintrin.h>

namespace bitsplit::cpu::detail {
namespace {

// 16 x 16 transpose of 32-bit elements: out[c] lane l = in[l] element c.
inline void transpose16(const __m512i in[16], __m512i out[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
  // u[4i + e], 128-bit lane j: rows 4i .. 4i+3, element 4j + e.
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // What remains is a 4 x 4 transpose of 128-bit lanes for each e.
  for (int e = 0; e < 4; ++e) {
    const __m512i a = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44);
    const __m512i b = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xEE);
    const __m512i c = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x44);
    const __m512i d = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xEE);
    out[0 + e] = _mm512_shuffle_i32x4(a, c, 0x88);
    out[4 + e] = _mm512_shuffle_i32x4(a, c, 0xDD);
    out[8 + e] = _mm512_shuffle_i32x4(b, d, 0x88);
    out[12 + e] = _mm512_shuffle_i32x4(b, d, 0xDD);
  }
}
}  // namespace
}  // namespace bitsplit::cpu::detail
