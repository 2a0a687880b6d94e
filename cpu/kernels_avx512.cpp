// AVX-512 (F/BW/VL/VNNI) tier of the bit-split plane kernels. Lanes are 16 output rows: a tile of
// 16 rows x 64 codes is transposed so each vector holds one 4-code chunk of every row, and
// vpdpbusd multiplies it by that chunk of an activation row broadcast from memory. The integer
// sums are exact and the float steps run lane-wise in the order of the reference, so the result
// equals residual_matmul_ref / draft_matmul_ref bit for bit (docs/FORMAT.md, "Kernel arithmetic").
// A BitDelta sign plane rides in bit 7 of the code bytes before the transpose (one byte-masked
// add per row and span), so its signs are read once per output row for all activation rows.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/isa_target.h"
#include "plane_kernels.h"

// From here on the code is compiled for the tier (bitsplit/isa_target.h): every other header is
// above, the tier's own helpers (unnamed namespaces) below.
BITSPLIT_TARGET_BEGIN(BITSPLIT_ISA_AVX512)

#include "activation_chunks.h"
#include "simd_blocks.h"
#include "simd_blocks_avx512.h"

namespace bitsplit::cpu::detail {
namespace {

constexpr int kLanes = 16;  // output rows per block


// ---- code unpacking: one output row's codes in natural order, 64 per vector ----

// 6-bit group of 32 (16 nibble bytes, 8 two-bit bytes) -> 32 codes.
inline __m256i unpack6_g32(const uint8_t* p) {
  const __m128i nib = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i lo_hi = _mm256_and_si256(
      _mm256_inserti128_si256(_mm256_castsi128_si256(nib), _mm_srli_epi16(nib, 4), 1), _mm256_set1_epi8(0x0F));
  int64_t bits2;
  std::memcpy(&bits2, p + 16, 8);
  __m256i hb = _mm256_set1_epi64x(bits2);
  hb = _mm256_srlv_epi64(hb, _mm256_setr_epi64x(0, 2, 4, 6));
  hb = _mm256_and_si256(_mm256_slli_epi64(hb, 4), _mm256_set1_epi8(0x30));
  return _mm256_or_si256(lo_hi, hb);
}

// 6-bit group of 64 (32 nibble bytes, 16 two-bit bytes) -> 64 codes.
inline __m512i unpack6_g64(const uint8_t* p) {
  const __m256i nib = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m512i n = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(nib), _mm256_srli_epi16(nib, 4), 1),
                                     _mm512_set1_epi8(0x0F));
  __m512i hb = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32)));
  hb = _mm512_srlv_epi64(hb, _mm512_setr_epi64(0, 0, 2, 2, 4, 4, 6, 6));
  hb = _mm512_and_si512(_mm512_slli_epi64(hb, 4), _mm512_set1_epi8(0x30));
  return _mm512_or_si512(n, hb);
}

// 6-bit group of 128 (64 nibble bytes, 32 two-bit bytes) -> 2 x 64 codes.
inline void unpack6_g128(const uint8_t* p, __m512i out[2]) {
  const __m512i nib = _mm512_loadu_si512(p);
  const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64)));
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
  const __m512i h0 = _mm512_srlv_epi64(hb, _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2));
  const __m512i h1 = _mm512_srlv_epi64(hb, _mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6));
  out[0] = _mm512_or_si512(_mm512_and_si512(nib, m4), _mm512_and_si512(_mm512_slli_epi64(h0, 4), m2));
  out[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi64(nib, 4), m4),
                           _mm512_and_si512(_mm512_slli_epi64(h1, 4), m2));
}

// 2-bit groups: byte j holds codes j + t * (g / 4) at bit 2t.
inline __m512i unpack2_g32x2(const uint8_t* p, bool two) {  // groups k and k+1 (8 bytes each)
  const __m128i b = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                        : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  __m512i v = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 0, 0, 0, 1, 1, 1, 1), _mm512_castsi128_si512(b));
  v = _mm512_srlv_epi64(v, _mm512_setr_epi64(0, 2, 4, 6, 0, 2, 4, 6));
  return _mm512_and_si512(v, _mm512_set1_epi8(3));
}
inline __m512i unpack2_g64(const uint8_t* p) {
  __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  v = _mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 2, 2, 4, 4, 6, 6));
  return _mm512_and_si512(v, _mm512_set1_epi8(3));
}
inline void unpack2_g128(const uint8_t* p, __m512i out[2]) {
  const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  out[0] = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2)), _mm512_set1_epi8(3));
  out[1] = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6)), _mm512_set1_epi8(3));
}

// Codes of one span of an output row: 64 weights (g <= 64: groups k0 and, for g = 32, k0 + 1 when
// `two`) or 128 weights (g = 128, two vectors). `row` points at the row's first code byte.
inline void load_span(const uint8_t* row, int bits, int group, int64_t k0, bool two, __m512i out[2]) {
  const int64_t gbytes = group * bits / 8;
  const uint8_t* p = row + k0 * gbytes;
  if (bits == 8) {
    if (group == 128) {
      out[0] = _mm512_loadu_si512(p);
      out[1] = _mm512_loadu_si512(p + 64);
    } else {
      out[0] = (group == 64 || two) ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, p);
    }
  } else if (bits == 6) {
    if (group == 64) {
      out[0] = unpack6_g64(p);
    } else if (group == 128) {
      unpack6_g128(p, out);
    } else {
      const __m256i a = unpack6_g32(p);
      const __m256i b = two ? unpack6_g32(p + gbytes) : _mm256_setzero_si256();
      out[0] = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    }
  } else {  // 2-bit draft
    if (group == 64) {
      out[0] = unpack2_g64(p);
    } else if (group == 128) {
      unpack2_g128(p, out);
    } else {
      out[0] = unpack2_g32x2(p, two);
    }
  }
}


// fp16 values at p[l * stride] for the block's valid lanes (0 elsewhere), as f32. A 32-bit gather
// reads each fp16 with a neighbour; which neighbour is chosen so the read stays inside the array
// (k > 0: the previous value; k == 0: the next, present because groups > 1 there).
inline __m512 gather_fp16(const uint16_t* p, int64_t stride, int valid, int64_t k, int64_t groups) {
  const __mmask16 mask = __mmask16((1u << valid) - 1);
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(int32_t(stride * 2)));
  __m512i v;
  if (k > 0) {
    v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, idx, p - 1, 1);
    v = _mm512_srli_epi32(v, 16);
  } else if (groups > 1) {
    v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, idx, p, 1);
    v = _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF));
  } else {
    alignas(32) uint16_t h[kLanes];
    for (int l = 0; l < kLanes; ++l) h[l] = l < valid ? p[l * stride] : 0;
    return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
  }
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
}

// The activations of up to 16 rows in ChunkedActivations' layout (plane_kernels.h).
using RowChunk = ChunkedActivations::Chunk;

// One group for NR activation rows: exact int32 dot products over the group's 4-code chunks, then
// the group's float step into facc[r] (16 outputs per row). Integer sums may be split into
// partial accumulators freely (they are exact); the float step is the reference's, lane-wise.
// kDelta: each code byte also carries its sign in bit 7 (c + 128 s, s = 1 when negative), so one
// product gives Sq + 128 Sneg and a second, of the bit alone, 128 Sneg (Sneg = sum of q where
// s = 1); then Ss = sum(q) - 2 Sneg feeds dacc[r] with the reference's fmaf. All exact in int32.
template <int NR, bool kDraft, int kChunks, bool kDelta>
inline void group_rows(const __m512i* w, const RowChunk& rc, int64_t k, int32_t half, __m512 tv, __m512 mv,
                       __m512* facc, __m512* dacc) {
  constexpr int kSplit = NR == 1 ? 4 : NR == 2 ? 2 : 1;
  constexpr int kSignSplit = kDelta ? kSplit : 1;
  __m512i acc[kSplit][NR], sacc[kSignSplit][NR];
  const int32_t* sum = rc.sum + k * NR;
  const float* scale = rc.scale + k * NR;
  for (int r = 0; r < NR; ++r) {
    acc[0][r] = kDraft ? _mm512_setzero_si512() : _mm512_set1_epi32(-half * sum[r]);
    for (int s = 1; s < kSplit; ++s) acc[s][r] = _mm512_setzero_si512();
    for (int s = 0; s < kSignSplit; ++s) sacc[s][r] = _mm512_setzero_si512();
  }
  const int32_t* q = rc.q + k * kChunks * NR;
  const __m512i sign_bit = _mm512_set1_epi8(char(0x80));
#pragma GCC unroll 32
  for (int c = 0; c < kChunks; c += kSplit) {
    for (int s = 0; s < kSplit; ++s) {
      const __m512i wc = w[c + s];
      const __m512i ws = kDelta ? _mm512_and_si512(wc, sign_bit) : wc;
      for (int r = 0; r < NR; ++r) {
        const __m512i x = _mm512_set1_epi32(q[(c + s) * NR + r]);
        acc[s][r] = _mm512_dpbusd_epi32(acc[s][r], wc, x);
        if constexpr (kDelta) sacc[s][r] = _mm512_dpbusd_epi32(sacc[s][r], ws, x);
      }
    }
  }
  for (int r = 0; r < NR; ++r) {
    __m512i a = acc[0][r], neg128 = sacc[0][r];
    for (int s = 1; s < kSplit; ++s) a = _mm512_add_epi32(a, acc[s][r]);
    if constexpr (kDelta) {
      for (int s = 1; s < kSignSplit; ++s) neg128 = _mm512_add_epi32(neg128, sacc[s][r]);
      a = _mm512_sub_epi32(a, neg128);
    }
    if constexpr (kDraft) {
      const __m512 msx = _mm512_mul_ps(mv, _mm512_set1_ps(float(sum[r])));
      const __m512 inner = _mm512_fmadd_ps(tv, _mm512_cvtepi32_ps(a), msx);
      facc[r] = _mm512_fmadd_ps(_mm512_set1_ps(scale[r]), inner, facc[r]);
    } else {
      facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(tv, _mm512_set1_ps(scale[r])), facc[r]);
    }
    if constexpr (kDelta) {
      const __m512i ss = _mm512_sub_epi32(_mm512_set1_epi32(sum[r]), _mm512_srai_epi32(neg128, 6));
      dacc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ss), _mm512_set1_ps(scale[r]), dacc[r]);
    }
  }
}

// Sets bit 7 of each code byte of one output row's span whose sign is negative: the span's
// 64 or 128 sign bits (from byte0 of the row) are the byte masks. Reads stay within the row's
// first `readable` bytes (the last span may have fewer).
template <int kSpanVectors>
inline void merge_signs(const uint8_t* row, int64_t readable, int64_t byte0, __m512i* v) {
  uint64_t bits[kSpanVectors] = {};
  const int64_t avail = readable - byte0;
  if (avail >= 8 * kSpanVectors) std::memcpy(bits, row + byte0, 8 * kSpanVectors);
  else std::memcpy(bits, row + byte0, size_t(avail));
  // Codes are below 128, so adding 128 sets bit 7.
  const __m512i sign_bit = _mm512_set1_epi8(char(0x80));
  for (int i = 0; i < kSpanVectors; ++i) v[i] = _mm512_mask_add_epi8(v[i], _cvtu64_mask64(bits[i]), v[i], sign_bit);
}

struct PlaneArgs {
  const uint8_t* codes;
  const uint16_t* scales;
  const uint16_t* offsets;  // draft only
  int64_t out, in;
  int group, bits;
  const SignPlaneView* delta;  // draft only, may be null
};

// Output rows [o0, o0 + valid) (valid <= 16) for the NR activation rows of one row chunk.
template <int NR, bool kDraft, int kGroup, bool kDelta>
void block_rows(const PlaneArgs& p, int64_t groups, const RowChunk& rc, int64_t o0, int valid, int64_t r0,
                float* y) {
  constexpr int kSpanGroups = kGroup == 32 ? 2 : 1, kSpanVectors = kGroup == 128 ? 2 : 1, kChunks = kGroup / 4;
  const int64_t row_bytes = quant::code_row_bytes(p.in, kGroup, p.bits);
  const int32_t half = kDraft ? 0 : 1 << (p.bits - 1);
  __m512 facc[NR], dacc[kDelta ? NR : 1];
  for (int r = 0; r < NR; ++r) facc[r] = _mm512_setzero_ps();
  for (auto& v : dacc) v = _mm512_setzero_ps();
  __m512i tile[2][kLanes], w[2 * kLanes];
  for (int l = valid; l < kLanes; ++l) tile[0][l] = tile[1][l] = _mm512_setzero_si512();
  for (int64_t k0 = 0; k0 < groups; k0 += kSpanGroups) {
    const bool two = kSpanGroups == 2 && k0 + 1 < groups;
    for (int l = 0; l < valid; ++l) {
      __m512i v[2];
      load_span(p.codes + (o0 + l) * row_bytes, p.bits, kGroup, k0, two, v);
      if constexpr (kDelta)
        merge_signs<kSpanVectors>(p.delta->signs + (o0 + l) * p.delta->row_bytes, sign_bytes_read(p.in),
                                  k0 * kGroup / 8, v);
      tile[0][l] = v[0];
      if (kSpanVectors == 2) tile[1][l] = v[1];
    }
    transpose16(tile[0], w);
    if (kSpanVectors == 2) transpose16(tile[1], w + kLanes);
    for (int g = 0; g < (two ? 2 : 1); ++g) {
      const int64_t k = k0 + g;
      const __m512 tv = gather_fp16(p.scales + o0 * groups + k, groups, valid, k, groups);
      const __m512 mv =
          kDraft ? gather_fp16(p.offsets + o0 * groups + k, groups, valid, k, groups) : _mm512_setzero_ps();
      group_rows<NR, kDraft, kChunks, kDelta>(w + g * kChunks, rc, k, half, tv, mv, facc, dacc);
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1);
  if constexpr (kDelta) {
    const __m512 alpha = p.delta->alpha_per_row ? _mm512_maskz_loadu_ps(mask, p.delta->alpha + o0)
                                                : _mm512_set1_ps(p.delta->alpha[0]);
    for (int r = 0; r < NR; ++r) facc[r] = _mm512_fmadd_ps(alpha, dacc[r], facc[r]);
  }
  for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(y + (r0 + r) * p.out + o0, mask, facc[r]);
}

template <bool kDraft, int kGroup, bool kDelta, int... NRs>
void block_dispatch(int nr, const PlaneArgs& p, int64_t groups, const RowChunk& rc, int64_t o0, int valid,
                    int64_t r0, float* y, std::integer_sequence<int, NRs...>) {
  ((nr == NRs + 1 ? block_rows<NRs + 1, kDraft, kGroup, kDelta>(p, groups, rc, o0, valid, r0, y) : void()), ...);
}

template <bool kDraft, int kGroup, bool kDelta>
void plane_rows(const PlaneArgs& p, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y) {
  const int64_t groups = qa.groups, rows = qa.rows;
  thread_local ChunkedActivations scratch;
  scratch.fill(qa, 16);
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kLanes) {
    const int valid = int(std::min<int64_t>(kLanes, o_end - o0));
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
      const int nr = int(std::min<int64_t>(16, rows - r0));
      const RowChunk rc = scratch.chunk(r0);
      block_dispatch<kDraft, kGroup, kDelta>(nr, p, groups, rc, o0, valid, r0, y,
                                             std::make_integer_sequence<int, 16>{});
    }
  }
}

template <bool kDraft, bool kDelta = false>
void plane_rows_any_group(const PlaneArgs& p, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                          float* y) {
  if (p.group == 32) plane_rows<kDraft, 32, kDelta>(p, qa, o_begin, o_end, y);
  else if (p.group == 64) plane_rows<kDraft, 64, kDelta>(p, qa, o_begin, o_end, y);
  else plane_rows<kDraft, 128, kDelta>(p, qa, o_begin, o_end, y);
}

bool simd_group(int group) { return group == 32 || group == 64 || group == 128; }

void residual_avx512(const ResidualPlaneView& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                     float* y) {
  if (!simd_group(r.group)) return residual_rows_ref(r, qa, o_begin, o_end, y);
  plane_rows_any_group<false>({r.codes, r.scales, nullptr, r.out, r.in, r.group, r.bits, nullptr}, qa, o_begin,
                              o_end, y);
}

void draft_avx512(const DraftPlaneView& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                  const SignPlaneView* delta) {
  if (!simd_group(d.group) || d.bits != 2) return draft_rows_ref(d, qa, o_begin, o_end, y, delta);
  const PlaneArgs p{d.codes, d.scales, d.offsets, d.out, d.in, d.group, d.bits, delta};
  if (delta) plane_rows_any_group<true, true>(p, qa, o_begin, o_end, y);
  else plane_rows_any_group<true>(p, qa, o_begin, o_end, y);
}

// Quantises one group of n <= group valid values (the rest of the group is zero padding), with
// the reference's arithmetic: amax exact, s = amax / 127, q = round_half_away(x * (127 / amax)).
void quantize_group(const float* x, int64_t n, int group, int8_t* q, float* scale, int32_t* sum) {
  __m512 amax = _mm512_setzero_ps();
  for (int i = 0; i < group; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : n > i ? __mmask16((1u << (n - i)) - 1) : __mmask16(0);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_maskz_loadu_ps(m, x + i)));
  }
  const float a = _mm512_reduce_max_ps(amax);
  if (!(a >= kTinyAmax)) {
    std::memset(q, 0, size_t(group));
    *scale = 0.0f;
    *sum = 0;
    return;
  }
  *scale = a / 127.0f;
  const __m512 inv = _mm512_set1_ps(127.0f / a);
  const __m512 sign = _mm512_set1_ps(-0.0f), one = _mm512_set1_ps(1.0f), halfv = _mm512_set1_ps(0.5f);
  __m512i total = _mm512_setzero_si512();
  for (int i = 0; i < group; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : n > i ? __mmask16((1u << (n - i)) - 1) : __mmask16(0);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv);
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), halfv, _CMP_GE_OQ);
    // t + copysign(1, v) where |v - t| >= 0.5
    const __m512 step = _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(one), _mm512_and_si512(_mm512_castps_si512(v), _mm512_castps_si512(sign))));
    __m512 r = _mm512_mask_add_ps(t, up, t, step);
    r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    const __m512i qi = _mm512_cvttps_epi32(r);
    total = _mm512_add_epi32(total, qi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtsepi32_epi8(qi));
  }
  *sum = _mm512_reduce_add_epi32(total);
}

void quantize_avx512(const float* x, int64_t rows, int64_t in, int group, QuantizedActivations& qa) {
  if (group % 16 != 0) return quantize_activations_ref(x, rows, in, group, qa);
  quantize_rows(x, rows, in, group, qa, quantize_group);
}

}  // namespace

const KernelTable& avx512_kernels() {
  static const KernelTable table{Isa::kAvx512, quantize_avx512,        quantize_group,     residual_avx512,
                                 draft_avx512, residual_packed_avx512, draft_packed_avx512};
  return table;
}

}  // namespace bitsplit::cpu::detail

BITSPLIT_TARGET_END
