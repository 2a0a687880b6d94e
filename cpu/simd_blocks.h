// SIMD building blocks shared by the kernel files of the AVX2 and AVX-512 tiers (plane kernels,
// Q8_0 kernels): a 4-byte load and the 32-bit transpose of an AVX2 (8 x 8) tile; the AVX-512
// (16 x 16) one is in simd_blocks_avx512.h. Include only inside a tier file's instruction-set
// region (bitsplit/isa_target.h), after every other header: everything here sits in an unnamed
// namespace, so each file gets its own copy, compiled for its tier, and the linker can never hand
// another tier (or generic code) these instructions.
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

}  // namespace
}  // namespace bitsplit::cpu::detail
