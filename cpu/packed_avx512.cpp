// AVX-512 (F/BW/VL/VNNI) kernels on PackedPlane (layout in include/bitsplit/cpu.h). A tile's
// code block is already "transposed": 64-byte vector c holds chunk c (4 codes) of all 16 output
// rows, so a chunk costs one aligned load (8 bits) or a shift and a mask of a loaded vector (2 and
// 6 bits), then one vpdpbusd per activation row with the row's 4 int8 broadcast from memory.
// Scales are 16 contiguous fp16 per group (one vcvtph2ps). The float steps are the reference's,
// lane-wise, so results equal residual_matmul_ref / draft_matmul_ref bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/isa_target.h"
#include "plane_kernels.h"

// From here on the code is compiled for the tier (bitsplit/isa_target.h): every other header is
// above, the tier's own helpers (unnamed namespaces) below.
BITSPLIT_TARGET_BEGIN(BITSPLIT_ISA_AVX512)

#include "activation_chunks.h"
#include "packed_chunk_avx512.h"

namespace bitsplit::cpu::detail {
namespace {

constexpr int kLanes = PackedPlane::kTileRows;

// The activations of up to 16 rows in ChunkedActivations' layout (plane_kernels.h).
using RowChunk = ChunkedActivations::Chunk;

// The sign bits of one tile's rows re-laid out for the kernel: dword d of the row's signs (bits
// 32d .. 32d + 31) of row l at out[16 d + l]; 0 past `valid` rows and past the readable bytes.
// Done once per tile for all activation rows (a masked 16-lane gather per group and dword
// instead: 1036 vs 798 us for 4096 x 4096 at n = 1, 1 thread).
void transpose_signs(const SignPlaneView& s, int64_t o0, int valid, int64_t dwords, uint32_t* out) {
  const int64_t readable = sign_bytes_read(s.in), whole = std::min(dwords, readable / 4);
  for (int l = 0; l < kLanes; ++l) {
    int64_t d = 0;
    if (l < valid) {
      const uint8_t* row = s.signs + (o0 + l) * s.row_bytes;
      for (; d < whole; ++d) std::memcpy(&out[d * kLanes + l], row + 4 * d, 4);
      if (d < dwords && readable > 4 * d) {  // the row's last, partial dword
        uint32_t v = 0;
        std::memcpy(&v, row + 4 * d, size_t(readable - 4 * d));
        out[d++ * kLanes + l] = v;
      }
    }
    for (; d < dwords; ++d) out[d * kLanes + l] = 0;
  }
}

// 2-bit codes for a few activation rows: chunk c sits at bits 2t (t = c / kV) of its vector, and
// instead of shifting it down (chunk()), the vector is only masked, so its bytes are 4^t times
// the codes. Each t has its own accumulator (which also gives the few rows independent vpdpbusd
// chains), and the four exact int32 sums are brought back to scale with arithmetic shifts before
// they are added: the reference's Sq, with one vector operation fewer per chunk (from t = 1 on).
// Bounds: |4^t · partial| <= 32 · 192 · 127 < 2^20 for groups up to 128. With more rows the
// accumulators would not fit the registers, and the shift is a smaller share of the work.
template <int kBits, int NR>
inline constexpr bool kShiftFree = kBits == 2 && NR <= 4;

template <int NR, int kGroup>
inline void sums_2bit_unshifted(const uint8_t* block, const int32_t* q, __m512i* sums) {
  constexpr int kV = kGroup / 16;
  __m512i part[4][NR];
  for (auto& t : part)
    for (auto& v : t) v = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int v = 0; v < kV; ++v) {
    const __m512i codes = _mm512_load_si512(block + 64 * v);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m512i w = _mm512_and_si512(codes, _mm512_set1_epi8(char(3 << (2 * t))));
      const int c = t * kV + v;
      for (int r = 0; r < NR; ++r) part[t][r] = _mm512_dpbusd_epi32(part[t][r], w, _mm512_set1_epi32(q[c * NR + r]));
    }
  }
  for (int r = 0; r < NR; ++r) {
    const __m512i lo = _mm512_add_epi32(part[0][r], _mm512_srai_epi32(part[1][r], 2));
    const __m512i hi = _mm512_add_epi32(_mm512_srai_epi32(part[2][r], 4), _mm512_srai_epi32(part[3][r], 6));
    sums[r] = _mm512_add_epi32(lo, hi);
  }
}

// One tile (output rows o0 .. o0 + valid) for the NR activation rows of a row chunk.
template <int NR, int kBits, int kGroup, bool kDelta>
void tile_rows(const PackedPlane& p, int64_t t, const RowChunk& rc, int valid, int64_t r0, float* y,
               const SignPlaneView* delta, const uint32_t* tile_signs) {
  constexpr bool kDraft = kBits <= 4;  // draft codes: 2 or 4 bits (a 3-bit draft is packed as 4)
  constexpr int kChunks = kGroup / 4;
  // Independent vpdpbusd chains to cover its latency when there are few activation rows.
  constexpr int kSplit = NR == 1 ? 4 : NR <= 3 ? 2 : 1;
  const int64_t groups = p.groups, cb = p.code_block_bytes(), o0 = t * kLanes;
  const uint8_t* codes = p.tile(t);
  const auto* sc = reinterpret_cast<const uint16_t*>(codes + groups * cb);
  const uint16_t* of = sc + groups * kLanes;
  const int32_t half = kDraft ? 0 : 1 << (kBits - 1);
  __m512 facc[NR], dacc[kDelta ? NR : 1];
  for (int r = 0; r < NR; ++r) facc[r] = _mm512_setzero_ps();
  for (auto& v : dacc) v = _mm512_setzero_ps();
  for (int64_t k = 0; k < groups; ++k) {
    const uint8_t* block = codes + k * cb;
    // Software prefetch a fixed distance ahead in the tile stream (tiles are contiguous, so past
    // this tile's end it runs into the next one): with the hardware prefetcher alone the 6-bit
    // unpacking and the DRAM reads barely overlapped (4096 x 14336, n = 1, 1 thread: 18 -> 24 GB/s).
    for (int64_t line = 0; line < cb; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchBytes + line), _MM_HINT_T0);
    const int32_t* sum = rc.sum + k * NR;
    const float* scale = rc.scale + k * NR;
    const int32_t* q = rc.q + k * kChunks * NR;
    __m512i sums[NR];
    if constexpr (kShiftFree<kBits, NR>) {
      sums_2bit_unshifted<NR, kGroup>(block, q, sums);
    } else {
      __m512i acc[kSplit][NR];
      for (int r = 0; r < NR; ++r) {
        acc[0][r] = kDraft ? _mm512_setzero_si512() : _mm512_set1_epi32(-half * sum[r]);
        for (int s = 1; s < kSplit; ++s) acc[s][r] = _mm512_setzero_si512();
      }
#pragma GCC unroll 32
      for (int c = 0; c < kChunks; ++c) {
        const __m512i w = chunk<kBits, kGroup>(block, c);
        for (int r = 0; r < NR; ++r)
          acc[c % kSplit][r] = _mm512_dpbusd_epi32(acc[c % kSplit][r], w, _mm512_set1_epi32(q[c * NR + r]));
      }
      for (int r = 0; r < NR; ++r) {
        sums[r] = acc[0][r];
        for (int s = 1; s < kSplit; ++s) sums[r] = _mm512_add_epi32(sums[r], acc[s][r]);
      }
    }
    const __m512 tv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc + k * kLanes)));
    for (int r = 0; r < NR; ++r) {
      const __m512i a = sums[r];
      if constexpr (kDraft) {
        const __m512 mv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(of + k * kLanes)));
        const __m512 msx = _mm512_mul_ps(mv, _mm512_set1_ps(float(sum[r])));
        const __m512 inner = _mm512_fmadd_ps(tv, _mm512_cvtepi32_ps(a), msx);
        facc[r] = _mm512_fmadd_ps(_mm512_set1_ps(scale[r]), inner, facc[r]);
      } else {
        facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(tv, _mm512_set1_ps(scale[r])), facc[r]);
      }
    }
    if constexpr (kDelta) {
      // Step 5: Sneg = sum of q where the sign is negative, from 0/1 bytes in the chunk layout;
      // Ss = sum(q) - 2 Sneg (exact), then the reference's fmaf into dacc.
      __m512i sw[kGroup / 32];
      for (int d = 0; d < kGroup / 32; ++d) sw[d] = _mm512_loadu_si512(tile_signs + (k * (kGroup / 32) + d) * kLanes);
      const __m512i bit_lo = _mm512_set1_epi32(0x08040201), bit_hi = _mm512_set1_epi32(int32_t(0x80402010u));
      const __m512i one = _mm512_set1_epi8(1);
      __m512i sacc[NR];
      for (int r = 0; r < NR; ++r) sacc[r] = _mm512_setzero_si512();
#pragma GCC unroll 32
      for (int c = 0; c < kChunks; ++c) {
        // Chunk c's 4 sign bits are nibble c % 8 of dword c / 8: byte (c % 8) / 2, half c % 2.
        // pshufb (within 128-bit lanes): byte 4m + e / 2 of dword m into all 4 bytes of dword m.
        const int e = c % 8;
        const __m512i sel = _mm512_add_epi8(_mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0),
                                            _mm512_set1_epi8(char(e / 2)));
        const __m512i bytes = _mm512_shuffle_epi8(sw[c / 8], sel);
        const __m512i s01 = _mm512_min_epu8(_mm512_and_si512(bytes, e % 2 ? bit_hi : bit_lo), one);
        for (int r = 0; r < NR; ++r) sacc[r] = _mm512_dpbusd_epi32(sacc[r], s01, _mm512_set1_epi32(q[c * NR + r]));
      }
      for (int r = 0; r < NR; ++r) {
        const __m512i ss = _mm512_sub_epi32(_mm512_set1_epi32(sum[r]), _mm512_add_epi32(sacc[r], sacc[r]));
        dacc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ss), _mm512_set1_ps(scale[r]), dacc[r]);
      }
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1);
  if constexpr (kDelta) {
    const __m512 alpha = delta->alpha_per_row ? _mm512_maskz_loadu_ps(mask, delta->alpha + o0)
                                              : _mm512_set1_ps(delta->alpha[0]);
    for (int r = 0; r < NR; ++r) facc[r] = _mm512_fmadd_ps(alpha, dacc[r], facc[r]);
  }
  for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(y + (r0 + r) * p.out + o0, mask, facc[r]);
}

template <int kBits, int kGroup, bool kDelta, int... NRs>
void tile_dispatch(int nr, const PackedPlane& p, int64_t t, const RowChunk& rc, int valid, int64_t r0, float* y,
                   const SignPlaneView* delta, const uint32_t* tile_signs, std::integer_sequence<int, NRs...>) {
  ((nr == NRs + 1 ? tile_rows<NRs + 1, kBits, kGroup, kDelta>(p, t, rc, valid, r0, y, delta, tile_signs) : void()),
   ...);
}

template <int kBits, int kGroup, bool kDelta>
void packed_rows(const PackedPlane& p, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                 const SignPlaneView* delta) {
  // Activation rows per pass. With a sign plane each row holds 4 accumulators (codes, signs and
  // two float sums) in the 32 registers: passes of 16 rows spilled (n = 16, 4096 x 4096, 1 thread:
  // 8617 us), of 8 less (5621 us), of 4 not (4143 us; the tile is re-read from L1/L2).
  constexpr int kChunkRows = kDelta ? 4 : 16;
  const int64_t groups = qa.groups, rows = qa.rows;
  thread_local ChunkedActivations scratch;
  thread_local std::vector<uint32_t> tile_signs;  // transpose_signs of the current tile
  scratch.fill(qa, kChunkRows);
  const int64_t sign_dwords = groups * (kGroup / 32);
  if (kDelta) tile_signs.resize(size_t(sign_dwords * kLanes));
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kLanes) {
    const int valid = int(std::min<int64_t>(kLanes, o_end - o0));
    if (kDelta) transpose_signs(*delta, o0, valid, sign_dwords, tile_signs.data());
    for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
      const int nr = int(std::min<int64_t>(kChunkRows, rows - r0));
      const RowChunk rc = scratch.chunk(r0);
      tile_dispatch<kBits, kGroup, kDelta>(nr, p, o0 / kLanes, rc, valid, r0, y, delta, tile_signs.data(),
                                           std::make_integer_sequence<int, kChunkRows>{});
    }
  }
}

template <int kBits, bool kDelta>
void packed_any_group(const PackedPlane& p, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                      const SignPlaneView* delta) {
  if (p.group == 32) packed_rows<kBits, 32, kDelta>(p, qa, o_begin, o_end, y, delta);
  else if (p.group == 64) packed_rows<kBits, 64, kDelta>(p, qa, o_begin, o_end, y, delta);
  else packed_rows<kBits, 128, kDelta>(p, qa, o_begin, o_end, y, delta);
}

}  // namespace

void residual_packed_avx512(const PackedPlane& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                            float* y) {
  if (r.bits == 8) packed_any_group<8, false>(r, qa, o_begin, o_end, y, nullptr);
  else packed_any_group<6, false>(r, qa, o_begin, o_end, y, nullptr);
}

void draft_packed_avx512(const PackedPlane& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                         float* y, const SignPlaneView* delta) {
  if (d.stored_bits() == 4) {
    if (delta) packed_any_group<4, true>(d, qa, o_begin, o_end, y, delta);
    else packed_any_group<4, false>(d, qa, o_begin, o_end, y, nullptr);
  } else if (delta) {
    packed_any_group<2, true>(d, qa, o_begin, o_end, y, delta);
  } else {
    packed_any_group<2, false>(d, qa, o_begin, o_end, y, nullptr);
  }
}

}  // namespace bitsplit::cpu::detail

BITSPLIT_TARGET_END
