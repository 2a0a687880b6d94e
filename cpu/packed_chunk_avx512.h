// cpu/ internal: what the AVX-512 and the AMX packed kernels share: one chunk (4 codes of each of
// a tile's 16 rows) of a PackedPlane group as a 512-bit vector of unsigned bytes, and the prefetch
// distance in the tile stream. Include only inside their AVX-512 regions (bitsplit/isa_target.h),
// after every other header; an unnamed namespace, so each file keeps its own copy.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace bitsplit::cpu::detail {
namespace {

// Software prefetch distance in the tile stream (measured 1-8 KiB: 4 KiB best, flat beyond).
constexpr int64_t kPrefetchBytes = 4096;

// Chunk c of a group's code block as 16 lanes x 4 unsigned bytes.
template <int kBits, int kGroup>
inline __m512i chunk(const uint8_t* block, int c) {
  if constexpr (kBits == 8) {
    return _mm512_load_si512(block + 64 * c);
  } else if constexpr (kBits == 2) {
    constexpr int kV = kGroup / 16;  // vectors; chunk c is at bits 2 * (c / kV) of vector c % kV
    const __m512i v = _mm512_load_si512(block + 64 * (c % kV));
    const int t = c / kV;
    return _mm512_and_si512(t ? _mm512_srli_epi16(v, unsigned(2 * t)) : v, _mm512_set1_epi8(3));
  } else if constexpr (kBits == 4) {  // nibble vectors: chunk c is at bits 4 * (c / kN) of vector c % kN
    constexpr int kN = kGroup / 8;
    const __m512i n = _mm512_load_si512(block + 64 * (c % kN));
    return _mm512_and_si512(c / kN ? _mm512_srli_epi16(n, 4) : n, _mm512_set1_epi8(0x0F));
  } else {
    constexpr int kN = kGroup / 8, kV = kGroup / 16;
    const __m512i n = _mm512_load_si512(block + 64 * (c % kN));
    const __m512i lo = _mm512_and_si512(c / kN ? _mm512_srli_epi16(n, 4) : n, _mm512_set1_epi8(0x0F));
    // The top 2 bits sit at bits 2t of their vector; move them to bits 4..5.
    const __m512i h = _mm512_load_si512(block + 64 * kN + 64 * (c % kV));
    const int t = c / kV;
    const __m512i hs = t < 2 ? _mm512_slli_epi16(h, unsigned(4 - 2 * t)) : t == 2 ? h : _mm512_srli_epi16(h, 2);
    return _mm512_or_si512(lo, _mm512_and_si512(hs, _mm512_set1_epi8(0x30)));
  }
}

}  // namespace
}  // namespace bitsplit::cpu::detail
