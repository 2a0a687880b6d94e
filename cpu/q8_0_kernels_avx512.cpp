// AVX-512 (F/BW/VL/VNNI) tier of the Q8_0 baseline kernels. Lanes are 16 output rows: a tile of
// 16 rows x 2 blocks is transposed so each vector holds one 4-weight chunk of every row, then
// vpdpbusd multiplies it by that chunk of an activation row (broadcast). vpdpbusd wants unsigned
// x signed bytes, so the weights are offset to u = q_w + 128 (an xor with 0x80) and the sum
// starts at -128 * sum(q_x): S = sum(u q_x) - 128 sum(q_x), exact in int32. The float step runs
// lane-wise in the reference's order, so the result equals q8_0_matmul_ref bit for bit.
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
BITSPLIT_TARGET_BEGIN(BITSPLIT_ISA_AVX512)

#include "simd_blocks.h"
#include "simd_blocks_avx512.h"

namespace bitsplit::cpu::detail {
namespace {

constexpr int kLanes = 16;  // output rows per tile



// Output rows [o0, o0 + valid) for activation rows [r0, r0 + NR): every weight byte of the
// tile is loaded once for all NR rows.
template <int NR>
void tile_rows(const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o0, int valid, int64_t r0, float* y) {
  constexpr int kSplit = NR <= 2 ? 2 : 1;  // independent dpbusd chains when few rows hide latency
  const int64_t blocks = qa.blocks, row_bytes = blocks * kQ8_0BlockBytes;
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  __m512 facc[NR];
  for (int r = 0; r < NR; ++r) facc[r] = _mm512_setzero_ps();
  __m512i tile[kLanes], wc[kLanes];
  for (int l = valid; l < kLanes; ++l) tile[l] = _mm512_setzero_si512();
  alignas(32) uint16_t dh[2][kLanes] = {};
  for (int64_t k0 = 0; k0 < blocks; k0 += 2) {
    const bool two = k0 + 1 < blocks;
    for (int l = 0; l < valid; ++l) {
      const uint8_t* p = w.blocks + (o0 + l) * row_bytes + k0 * kQ8_0BlockBytes;
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      const __m256i hi = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 + kQ8_0BlockBytes))
                             : _mm256_setzero_si256();
      tile[l] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), flip);
      std::memcpy(&dh[0][l], p, 2);
      if (two) std::memcpy(&dh[1][l], p + kQ8_0BlockBytes, 2);
    }
    transpose16(tile, wc);
    for (int g = 0; g < (two ? 2 : 1); ++g) {
      const int64_t k = k0 + g;
      const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh[g])));
      const __m512i* wk = wc + 8 * g;
      for (int r = 0; r < NR; ++r) {
        const int64_t rk = (r0 + r) * blocks + k;
        const int8_t* qx = qa.q.data() + (r0 + r) * qa.in + k * kQ8_0Weights;
        __m512i acc[kSplit];
        acc[0] = _mm512_set1_epi32(-128 * qa.sum[size_t(rk)]);
        for (int s = 1; s < kSplit; ++s) acc[s] = _mm512_setzero_si512();
        for (int c = 0; c < 8; ++c)
          acc[c % kSplit] = _mm512_dpbusd_epi32(acc[c % kSplit], wk[c], _mm512_set1_epi32(load_i32(qx + 4 * c)));
        for (int s = 1; s < kSplit; ++s) acc[0] = _mm512_add_epi32(acc[0], acc[s]);
        facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[0]), _mm512_mul_ps(dw, _mm512_set1_ps(qa.d[size_t(rk)])),
                                  facc[r]);
      }
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1);
  for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(y + (r0 + r) * w.out + o0, mask, facc[r]);
}

template <int... NRs>
void tile_dispatch(int nr, const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o0, int valid, int64_t r0,
                   float* y, std::integer_sequence<int, NRs...>) {
  ((nr == NRs + 1 ? tile_rows<NRs + 1>(w, qa, o0, valid, r0, y) : void()), ...);
}

}  // namespace

void q8_0_rows_avx512(const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o_begin, int64_t o_end, float* y) {
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
