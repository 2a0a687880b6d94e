// AVX2 + FMA tier of the Q8_0 baseline kernels: the AVX-512 tier's scheme on 8 output lanes, one
// block (32 weights) per tile. vpmaddubsw wants unsigned x signed bytes and saturates at 16 bits,
// so the sign trick is used: |q_w| (0..128) times q_x carrying q_w's sign (-127..127); a pair sum
// is at most 2 * 128 * 127 < 2^15, so every step is exact and the float step matches the reference.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/isa_target.h"
#include "q8_0_kernels.h"

// From here on the code is compiled for the tier (bitsplit/isa_target.h): every other header is
// above, the tier's own helpers (unnamed namespaces) below.
BITSPLIT_TARGET_BEGIN(BITSPLIT_ISA_AVX2)

#include "simd_blocks.h"

namespace bitsplit::cpu::detail {
namespace {

constexpr int kLanes = 8;  // output rows per tile



// Output rows [o0, o0 + valid) for activation rows [r0, r0 + NR): each weight byte of the tile
// is loaded once for all NR rows.
template <int NR>
void tile_rows(const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o0, int valid, int64_t r0, float* y) {
  const int64_t blocks = qa.blocks, row_bytes = blocks * kQ8_0BlockBytes;
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 facc[NR];
  for (int r = 0; r < NR; ++r) facc[r] = _mm256_setzero_ps();
  __m256i tile[kLanes], wc[kLanes], wabs[kLanes];
  for (int l = valid; l < kLanes; ++l) tile[l] = _mm256_setzero_si256();
  alignas(16) uint16_t dh[kLanes] = {};
  for (int64_t k = 0; k < blocks; ++k) {
    for (int l = 0; l < valid; ++l) {
      const uint8_t* p = w.blocks + (o0 + l) * row_bytes + k * kQ8_0BlockBytes;
      tile[l] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      std::memcpy(&dh[l], p, 2);
    }
    transpose8(tile, wc);
    for (int c = 0; c < 8; ++c) wabs[c] = _mm256_abs_epi8(wc[c]);
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    for (int r = 0; r < NR; ++r) {
      const int64_t rk = (r0 + r) * blocks + k;
      const int8_t* qx = qa.q.data() + (r0 + r) * qa.in + k * kQ8_0Weights;
      __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
      for (int c = 0; c < 8; ++c) {
        const __m256i x = _mm256_sign_epi8(_mm256_set1_epi32(load_i32(qx + 4 * c)), wc[c]);
        acc[c & 1] = _mm256_add_epi32(acc[c & 1], _mm256_madd_epi16(_mm256_maddubs_epi16(wabs[c], x), ones16));
      }
      const __m256i s = _mm256_add_epi32(acc[0], acc[1]);
      facc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(qa.d[size_t(rk)])), facc[r]);
    }
  }
  alignas(32) float tmp[kLanes];
  for (int r = 0; r < NR; ++r) {
    float* dst = y + (r0 + r) * w.out + o0;
    if (valid == kLanes) {
      _mm256_storeu_ps(dst, facc[r]);
    } else {
      _mm256_store_ps(tmp, facc[r]);
      for (int l = 0; l < valid; ++l) dst[l] = tmp[l];
    }
  }
}

template <int... NRs>
void tile_dispatch(int nr, const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o0, int valid, int64_t r0,
                   float* y, std::integer_sequence<int, NRs...>) {
  ((nr == NRs + 1 ? tile_rows<NRs + 1>(w, qa, o0, valid, r0, y) : void()), ...);
}

}  // namespace

void q8_0_rows_avx2(const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o_begin, int64_t o_end, float* y) {
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kLanes) {
    const int valid = int(std::min<int64_t>(kLanes, o_end - o0));
    for (int64_t r0 = 0; r0 < qa.rows; r0 += 16) {
      const int nr = int(std::min<int64_t>(16, qa.rows - r0));
      tile_dispatch(nr, w, qa, o0, valid, r0, y, std::make_integer_sequence<int, 16>{});
    }
  }
}

}  // namespace bitsplit::cpu::detail

BITSPLIT_TARGET_END
