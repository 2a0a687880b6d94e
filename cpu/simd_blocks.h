// SIMD building blocks shared by the kernel files of one ISA tier (plane kernels, Q8_0 kernels):
// the 32-bit transposes of an AVX2 (8 x 8) and an AVX-512 (16 x 16) tile. Include only from the
// tier files, compiled with their -m flags: each part is there only where its ISA is enabled,
// and everything sits in an unnamed namespace, so each file gets its own copy and the linker can
// never hand another tier these instructions.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace bitsplit::cpu::detail {
namespace {

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

#if defined(__AVX2__)
// 8 x 8 transpose of 32-bit elements: out[c] lane l = in[l] element c.
inline void transpose8(const __m256i in[8], __m256i out[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
  // u[4i + e], 128-bit lane j: rows 4i .. 4i+3, element 4j + e.
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int e = 0; e < 4; ++e) {
    out[e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x20);
    out[4 + e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x31);
  }
}
#endif

#if defined(__AVX512F__)
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
#endif

}  // namespace
}  // namespace bitsplit::cpu::detail
