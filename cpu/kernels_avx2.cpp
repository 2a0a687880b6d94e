// AVX2 + FMA tier of the bit-split plane kernels: the AVX-512 tier's scheme on 8 output lanes.
// A tile of 8 rows x 32 codes is transposed so each vector holds one 4-code chunk of every row;
// vpmaddubsw + vpmaddwd replace vpdpbusd. vpmaddubsw saturates at 16 bits, so 8-bit codes are
// multiplied as |u - 128| by q with u - 128's sign, which keeps every pair sum exact (<= 2 * 128 * 127).
// A BitDelta sign plane is loaded per group for the block's 8 rows and expanded to 0/1 bytes in
// the transposed layout, so its signs are read once per output row for all activation rows.
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
BITSPLIT_TARGET_BEGIN(BITSPLIT_ISA_AVX2)

#include "activation_chunks.h"
#include "simd_blocks.h"

namespace bitsplit::cpu::detail {
namespace {

constexpr int kLanes = 8;  // output rows per block
// Activation rows per block with a sign plane: 16 would spill the sign accumulators and, with
// 4096-wide rows, put 16 activation rows on one L1 set (measured twice as slow at n = 16).
constexpr int kDeltaChunkRows = 8;

inline int64_t load_i64(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline __m256i loadu256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i loadu128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// (v >> shift[qword]) & 3 per byte, moved to bits 4..5 when `high` (the 6-bit code's top bits).
inline __m256i two_bits(__m256i v, __m256i shifts, bool high) {
  v = _mm256_srlv_epi64(v, shifts);
  return high ? _mm256_and_si256(_mm256_slli_epi64(v, 4), _mm256_set1_epi8(0x30))
              : _mm256_and_si256(v, _mm256_set1_epi8(3));
}

// The g / 32 vectors of 32 codes (natural order) of one group of one output row.
inline void load_group(const uint8_t* p, int bits, int group, __m256i* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if (bits == 8) {
    for (int i = 0; i < group / 32; ++i) out[i] = loadu256(p + 32 * i);
  } else if (bits == 6) {
    const int nib_bytes = group / 2;
    if (group == 32) {
      const __m128i nib = loadu128(p);
      const __m256i n = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(nib, 4), nib), m4);
      out[0] = _mm256_or_si256(n, two_bits(_mm256_set1_epi64x(load_i64(p + 16)), _mm256_setr_epi64x(0, 2, 4, 6), true));
    } else if (group == 64) {
      const __m256i nib = loadu256(p);
      const __m256i hb = _mm256_broadcastsi128_si256(loadu128(p + nib_bytes));
      out[0] = _mm256_or_si256(_mm256_and_si256(nib, m4), two_bits(hb, _mm256_setr_epi64x(0, 0, 2, 2), true));
      out[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(nib, 4), m4),
                               two_bits(hb, _mm256_setr_epi64x(4, 4, 6, 6), true));
    } else {  // 128
      const __m256i n0 = loadu256(p), n1 = loadu256(p + 32), hb = loadu256(p + nib_bytes);
      out[0] = _mm256_or_si256(_mm256_and_si256(n0, m4), two_bits(hb, _mm256_set1_epi64x(0), true));
      out[1] = _mm256_or_si256(_mm256_and_si256(n1, m4), two_bits(hb, _mm256_set1_epi64x(2), true));
      out[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n0, 4), m4),
                               two_bits(hb, _mm256_set1_epi64x(4), true));
      out[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n1, 4), m4),
                               two_bits(hb, _mm256_set1_epi64x(6), true));
    }
  } else {  // 2-bit draft: byte j holds codes j + t * (g / 4) at bit 2t
    if (group == 32) {
      out[0] = two_bits(_mm256_set1_epi64x(load_i64(p)), _mm256_setr_epi64x(0, 2, 4, 6), false);
    } else if (group == 64) {
      const __m256i b = _mm256_broadcastsi128_si256(loadu128(p));
      out[0] = two_bits(b, _mm256_setr_epi64x(0, 0, 2, 2), false);
      out[1] = two_bits(b, _mm256_setr_epi64x(4, 4, 6, 6), false);
    } else {
      const __m256i b = loadu256(p);
      for (int t = 0; t < 4; ++t) out[t] = two_bits(b, _mm256_set1_epi64x(2 * t), false);
    }
  }
}


inline __m256 gather_fp16(const uint16_t* p, int64_t stride, int valid) {
  alignas(16) uint16_t h[kLanes];
  for (int l = 0; l < kLanes; ++l) h[l] = l < valid ? p[l * stride] : 0;
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}

struct RowChunk {
  const int8_t* q;
  int64_t q_stride;
  const float* scale;
  const int32_t* sum;
  int64_t groups;
};

// Exact int32 dot products of one group for NR activation rows, then the reference's float step.
template <int NR, int kBits>
inline void group_rows(const __m256i* w, int chunks, const RowChunk& rc, int64_t k, int group, __m256 tv, __m256 mv,
                       __m256* facc) {
  constexpr bool kDraft = kBits <= 4;  // draft codes: 2 or 4 bits (a 3-bit draft is packed as 4)
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256i acc[NR];
  // 8 bits: the products are of u - 128 (so the -128 sum(q) term is already in them, acc starts
  // at 0), as |u - 128| times q with u - 128's sign: |u - 128| <= 128 and |q| <= 127 keep
  // vpmaddubsw's pair sums exact (<= 2 * 128 * 127 < 2^15).
  for (int r = 0; r < NR; ++r)
    acc[r] = kDraft || kBits == 8 ? _mm256_setzero_si256()
                                  : _mm256_set1_epi32(-(1 << (kBits - 1)) * rc.sum[r * rc.groups + k]);
  const int8_t* q = rc.q + k * group;
  for (int c = 0; c < chunks; ++c) {
    if constexpr (kBits == 8) {
      const __m256i ws = _mm256_xor_si256(w[c], _mm256_set1_epi8(char(0x80)));  // u - 128, signed
      const __m256i wa = _mm256_abs_epi8(ws);  // |u - 128|; 128 stays 0x80, read as unsigned
      for (int r = 0; r < NR; ++r) {
        const __m256i x = _mm256_sign_epi8(_mm256_set1_epi32(load_i32(q + r * rc.q_stride + 4 * c)), ws);
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(_mm256_maddubs_epi16(wa, x), ones16));
      }
    } else {
      for (int r = 0; r < NR; ++r) {
        const __m256i x = _mm256_set1_epi32(load_i32(q + r * rc.q_stride + 4 * c));
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(_mm256_maddubs_epi16(w[c], x), ones16));
      }
    }
  }
  for (int r = 0; r < NR; ++r) {
    const float sx = rc.scale[r * rc.groups + k];
    if constexpr (kDraft) {
      const __m256 msx = _mm256_mul_ps(mv, _mm256_set1_ps(float(rc.sum[r * rc.groups + k])));
      const __m256 inner = _mm256_fmadd_ps(tv, _mm256_cvtepi32_ps(acc[r]), msx);
      facc[r] = _mm256_fmadd_ps(_mm256_set1_ps(sx), inner, facc[r]);
    } else {
      facc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r]), _mm256_mul_ps(tv, _mm256_set1_ps(sx)), facc[r]);
    }
  }
}

// The sign bytes of one group of the block's rows (from `first`, row_bytes apart; at most
// `readable` bytes each) as 0/1 bytes in the transposed code layout: ws[c] lane l = the signs of
// codes 4c .. 4c + 3 of row o0 + l (1 = negative).
template <int kGroup>
inline void load_group_signs(const uint8_t* first, int64_t row_bytes, int64_t readable, int valid, __m256i* ws) {
  constexpr int kBytes = kGroup / 8, kDwords = kGroup / 32;
  alignas(32) uint32_t d[kDwords][kLanes] = {};
  for (int l = 0; l < valid; ++l) {
    uint8_t bytes[kBytes] = {};
    if (readable >= kBytes) std::memcpy(bytes, first + l * row_bytes, kBytes);
    else std::memcpy(bytes, first + l * row_bytes, size_t(readable));
    for (int j = 0; j < kDwords; ++j) std::memcpy(&d[j][l], bytes + 4 * j, 4);
  }
  __m256i sd[kDwords];
  for (int j = 0; j < kDwords; ++j) sd[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(d[j]));
  // Chunk c's nibble is half of byte (c % 8) / 2 of dword c / 8: copy that byte to all 4 bytes of
  // the dword, keep bit b in byte b, and clamp to 0/1.
  const __m256i bit_lo = _mm256_set1_epi32(0x08040201), bit_hi = _mm256_set1_epi32(int32_t(0x80402010u));
  const __m256i one = _mm256_set1_epi8(1);
  // pshufb indices: byte b of each dword (4d + b within each 128-bit half) into all 4 of its bytes.
  __m256i sel[4];
  for (int b = 0; b < 4; ++b)
    sel[b] = _mm256_add_epi8(_mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4,
                                              4, 8, 8, 8, 8, 12, 12, 12, 12),
                             _mm256_set1_epi8(char(b)));
  for (int c = 0; c < kGroup / 4; ++c) {
    const __m256i bytes = _mm256_shuffle_epi8(sd[c / 8], sel[(c % 8) / 2]);
    ws[c] = _mm256_min_epu8(_mm256_and_si256(bytes, c % 2 ? bit_hi : bit_lo), one);
  }
}

// Step 5's integer sums for NR activation rows: sum of q where the sign is negative, in 16 bits
// across the group's chunks (at most 32 chunks x 2 x 127 < 2^15, so exact), then Ss = sum(q) - 2
// of that into dacc with the reference's fmaf.
template <int NR, int kGroup>
inline void group_signs(const __m256i* ws, const RowChunk& rc, int64_t k, __m256* dacc) {
  __m256i acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm256_setzero_si256();
  const int8_t* q = rc.q + k * kGroup;
  for (int c = 0; c < kGroup / 4; ++c)
    for (int r = 0; r < NR; ++r)
      acc[r] = _mm256_add_epi16(
          acc[r], _mm256_maddubs_epi16(ws[c], _mm256_set1_epi32(load_i32(q + r * rc.q_stride + 4 * c))));
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int r = 0; r < NR; ++r) {
    const __m256i neg = _mm256_madd_epi16(acc[r], ones16);
    const __m256i ss = _mm256_sub_epi32(_mm256_set1_epi32(rc.sum[r * rc.groups + k]), _mm256_add_epi32(neg, neg));
    dacc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ss), _mm256_set1_ps(rc.scale[r * rc.groups + k]), dacc[r]);
  }
}

// The end of a block of 8 output rows o0 .. o0 + valid for NR activation rows: with a sign plane
// y = fmaf(alpha_o, dacc, facc) (step 5), then the valid lanes of each row stored into y.
template <int NR, bool kDelta>
inline void store_block(__m256* facc, const __m256* dacc, const SignPlaneView* delta, int64_t out, int64_t o0,
                        int valid, int64_t r0, float* y) {
  alignas(32) float tmp[kLanes];
  if constexpr (kDelta) {
    for (int l = 0; l < kLanes; ++l) tmp[l] = l < valid ? delta_alpha(*delta, o0 + l) : 0.0f;
    const __m256 alpha = _mm256_load_ps(tmp);
    for (int r = 0; r < NR; ++r) facc[r] = _mm256_fmadd_ps(alpha, dacc[r], facc[r]);
  }
  for (int r = 0; r < NR; ++r) {
    float* dst = y + (r0 + r) * out + o0;
    if (valid == kLanes) {
      _mm256_storeu_ps(dst, facc[r]);
    } else {
      _mm256_store_ps(tmp, facc[r]);
      for (int l = 0; l < valid; ++l) dst[l] = tmp[l];
    }
  }
}

struct PlaneArgs {
  const uint8_t* codes;
  const uint16_t* scales;
  const uint16_t* offsets;
  int64_t out, in;
  int group, bits;
  const SignPlaneView* delta;  // draft only, may be null
};

template <int NR, int kBits, bool kDelta>
void block_rows(const PlaneArgs& p, const QuantizedActivations& qa, int64_t o0, int valid, int64_t r0, float* y) {
  const int64_t row_bytes = quant::code_row_bytes(p.in, p.group, p.bits), groups = qa.groups;
  const int gbytes = p.group * p.bits / 8, pieces = p.group / 32;
  const RowChunk rc{qa.q.data() + r0 * qa.padded, qa.padded, qa.scale.data() + r0 * groups,
                    qa.sum.data() + r0 * groups, groups};
  __m256 facc[NR], dacc[kDelta ? NR : 1];
  for (int r = 0; r < NR; ++r) facc[r] = _mm256_setzero_ps();
  for (auto& v : dacc) v = _mm256_setzero_ps();
  __m256i tile[4][kLanes], w[4 * kLanes], ws[kDelta ? 32 : 1];
  for (int l = valid; l < kLanes; ++l)
    for (int i = 0; i < 4; ++i) tile[i][l] = _mm256_setzero_si256();
  for (int64_t k = 0; k < groups; ++k) {
    for (int l = 0; l < valid; ++l) {
      __m256i v[4];
      load_group(p.codes + (o0 + l) * row_bytes + k * gbytes, p.bits, p.group, v);
      for (int i = 0; i < pieces; ++i) tile[i][l] = v[i];
    }
    for (int i = 0; i < pieces; ++i) transpose8(tile[i], w + i * kLanes);
    const __m256 tv = gather_fp16(p.scales + o0 * groups + k, groups, valid);
    const __m256 mv = kBits == 2 ? gather_fp16(p.offsets + o0 * groups + k, groups, valid) : _mm256_setzero_ps();
    group_rows<NR, kBits>(w, p.group / 4, rc, k, p.group, tv, mv, facc);
    if constexpr (kDelta) {
      const int64_t byte0 = k * p.group / 8;
      const uint8_t* first = p.delta->signs + o0 * p.delta->row_bytes + byte0;
      const int64_t readable = sign_bytes_read(p.in) - byte0, stride = p.delta->row_bytes;
      if (p.group == 32) {
        load_group_signs<32>(first, stride, readable, valid, ws);
        group_signs<NR, 32>(ws, rc, k, dacc);
      } else if (p.group == 64) {
        load_group_signs<64>(first, stride, readable, valid, ws);
        group_signs<NR, 64>(ws, rc, k, dacc);
      } else {
        load_group_signs<128>(first, stride, readable, valid, ws);
        group_signs<NR, 128>(ws, rc, k, dacc);
      }
    }
  }
  store_block<NR, kDelta>(facc, dacc, p.delta, p.out, o0, valid, r0, y);
}

template <int kBits, bool kDelta, int... NRs>
void block_dispatch(int nr, const PlaneArgs& p, const QuantizedActivations& qa, int64_t o0, int valid, int64_t r0,
                    float* y, std::integer_sequence<int, NRs...>) {
  ((nr == NRs + 1 ? block_rows<NRs + 1, kBits, kDelta>(p, qa, o0, valid, r0, y) : void()), ...);
}

template <int kBits, bool kDelta = false>
void plane_rows(const PlaneArgs& p, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y) {
  constexpr int kChunkRows = kDelta ? kDeltaChunkRows : 16;
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kLanes) {
    const int valid = int(std::min<int64_t>(kLanes, o_end - o0));
    for (int64_t r0 = 0; r0 < qa.rows; r0 += kChunkRows) {
      const int nr = int(std::min<int64_t>(kChunkRows, qa.rows - r0));
      block_dispatch<kBits, kDelta>(nr, p, qa, o0, valid, r0, y, std::make_integer_sequence<int, kChunkRows>{});
    }
  }
}

bool simd_group(int group) { return group == 32 || group == 64 || group == 128; }

void residual_avx2(const ResidualPlaneView& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                   float* y) {
  if (!simd_group(r.group)) return residual_rows_ref(r, qa, o_begin, o_end, y);
  const PlaneArgs p{r.codes, r.scales, nullptr, r.out, r.in, r.group, r.bits, nullptr};
  if (r.bits == 8) plane_rows<8>(p, qa, o_begin, o_end, y);
  else plane_rows<6>(p, qa, o_begin, o_end, y);
}

void draft_avx2(const DraftPlaneView& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                const SignPlaneView* delta) {
  if (!simd_group(d.group) || d.bits != 2) return draft_rows_ref(d, qa, o_begin, o_end, y, delta);
  const PlaneArgs p{d.codes, d.scales, d.offsets, d.out, d.in, d.group, d.bits, delta};
  if (delta) plane_rows<2, true>(p, qa, o_begin, o_end, y);
  else plane_rows<2>(p, qa, o_begin, o_end, y);
}

// ---- PackedPlane kernels (layout in include/bitsplit/cpu.h) ----
// Each 64-byte vector of a packed code block is two 32-byte halves of 8 tile rows, in exactly the
// transposed chunk layout group_rows takes: a tile runs as two 8-lane halves, unpacking a chunk
// with a shift and a mask instead of load_group + transpose8, and loading scales directly.

// Chunk c of one half (block already offset by 32 * half) as 8 lanes x 4 unsigned bytes.
template <int kBits, int kGroup>
inline __m256i packed_chunk(const uint8_t* block, int c) {
  if constexpr (kBits == 8) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(block + 64 * c));
  } else if constexpr (kBits == 2) {
    constexpr int kV = kGroup / 16;
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(block + 64 * (c % kV)));
    const int t = c / kV;
    return _mm256_and_si256(t ? _mm256_srli_epi16(v, 2 * t) : v, _mm256_set1_epi8(3));
  } else if constexpr (kBits == 4) {
    constexpr int kN = kGroup / 8;
    const __m256i n = _mm256_load_si256(reinterpret_cast<const __m256i*>(block + 64 * (c % kN)));
    return _mm256_and_si256(c / kN ? _mm256_srli_epi16(n, 4) : n, _mm256_set1_epi8(0x0F));
  } else {
    constexpr int kN = kGroup / 8, kV = kGroup / 16;
    const __m256i n = _mm256_load_si256(reinterpret_cast<const __m256i*>(block + 64 * (c % kN)));
    const __m256i lo = _mm256_and_si256(c / kN ? _mm256_srli_epi16(n, 4) : n, _mm256_set1_epi8(0x0F));
    const __m256i h = _mm256_load_si256(reinterpret_cast<const __m256i*>(block + 64 * kN + 64 * (c % kV)));
    const int t = c / kV;
    const __m256i hs = t < 2 ? _mm256_slli_epi16(h, 4 - 2 * t) : t == 2 ? h : _mm256_srli_epi16(h, 2);
    return _mm256_or_si256(lo, _mm256_and_si256(hs, _mm256_set1_epi8(0x30)));
  }
}

// Half `half` (rows o0 .. o0 + valid) of tile t for activation rows r0 .. r0 + NR.
template <int NR, int kBits, int kGroup, bool kDelta>
void packed_half(const PackedPlane& p, int64_t t, int half, const QuantizedActivations& qa, int valid, int64_t r0,
                 float* y, const SignPlaneView* delta) {
  constexpr int kChunks = kGroup / 4;
  const int64_t groups = p.groups, cb = p.code_block_bytes(), o0 = t * 16 + 8 * half;
  const uint8_t* codes = p.tile(t);
  const auto* sc = reinterpret_cast<const uint16_t*>(codes + groups * cb) + 8 * half;
  const uint16_t* of = sc + groups * 16;
  const RowChunk rc{qa.q.data() + r0 * qa.padded, qa.padded, qa.scale.data() + r0 * groups,
                    qa.sum.data() + r0 * groups, groups};
  __m256 facc[NR], dacc[kDelta ? NR : 1];
  for (int r = 0; r < NR; ++r) facc[r] = _mm256_setzero_ps();
  for (auto& v : dacc) v = _mm256_setzero_ps();
  __m256i w[kChunks], ws[kDelta ? kChunks : 1];
  for (int64_t k = 0; k < groups; ++k) {
    const uint8_t* block = codes + k * cb + 32 * half;
#pragma GCC unroll 32
    for (int c = 0; c < kChunks; ++c) w[c] = packed_chunk<kBits, kGroup>(block, c);
    const __m256 tv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + k * 16)));
    const __m256 mv = kBits <= 4 ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(of + k * 16)))
                                 : _mm256_setzero_ps();
    group_rows<NR, kBits>(w, kChunks, rc, k, kGroup, tv, mv, facc);
    if constexpr (kDelta) {
      const int64_t byte0 = k * kGroup / 8;
      load_group_signs<kGroup>(delta->signs + o0 * delta->row_bytes + byte0, delta->row_bytes,
                               sign_bytes_read(p.in) - byte0, valid, ws);
      group_signs<NR, kGroup>(ws, rc, k, dacc);
    }
  }
  store_block<NR, kDelta>(facc, dacc, delta, p.out, o0, valid, r0, y);
}

template <int kBits, int kGroup, bool kDelta, int... NRs>
void packed_dispatch(int nr, const PackedPlane& p, int64_t t, int half, const QuantizedActivations& qa, int valid,
                     int64_t r0, float* y, const SignPlaneView* delta, std::integer_sequence<int, NRs...>) {
  ((nr == NRs + 1 ? packed_half<NRs + 1, kBits, kGroup, kDelta>(p, t, half, qa, valid, r0, y, delta) : void()), ...);
}

// 8 activation rows per pass: their accumulators and the codes fit the 16 ymm registers.
template <int kBits, int kGroup, bool kDelta>
void packed_rows(const PackedPlane& p, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                 const SignPlaneView* delta) {
  for (int64_t o0 = o_begin; o0 < o_end; o0 += 16) {
    for (int half = 0; half < 2 && o0 + 8 * half < o_end; ++half) {
      const int valid = int(std::min<int64_t>(kLanes, o_end - o0 - 8 * half));
      for (int64_t r0 = 0; r0 < qa.rows; r0 += 8) {
        const int nr = int(std::min<int64_t>(8, qa.rows - r0));
        packed_dispatch<kBits, kGroup, kDelta>(nr, p, o0 / 16, half, qa, valid, r0, y, delta,
                                               std::make_integer_sequence<int, 8>{});
      }
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

void residual_packed_avx2(const PackedPlane& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                          float* y) {
  if (r.bits == 8) packed_any_group<8, false>(r, qa, o_begin, o_end, y, nullptr);
  else packed_any_group<6, false>(r, qa, o_begin, o_end, y, nullptr);
}

void draft_packed_avx2(const PackedPlane& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                       const SignPlaneView* delta) {
  if (d.stored_bits() == 4) {
    if (delta) packed_any_group<4, true>(d, qa, o_begin, o_end, y, delta);
    else packed_any_group<4, false>(d, qa, o_begin, o_end, y, nullptr);
  } else if (delta) {
    packed_any_group<2, true>(d, qa, o_begin, o_end, y, delta);
  } else {
    packed_any_group<2, false>(d, qa, o_begin, o_end, y, nullptr);
  }
}

// The reference quantiser's arithmetic on 8 lanes (see quantize_activations_ref).
void quantize_group(const float* x, int64_t n, int group, int8_t* q, float* scale, int32_t* sum) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  auto load = [&](int i) {
    if (n - i >= 8) return _mm256_loadu_ps(x + i);
    alignas(32) float t[8] = {};
    for (int j = 0; i + j < n && j < 8; ++j) t[j] = x[i + j];
    return _mm256_load_ps(t);
  };
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < group; i += 8) amax = _mm256_max_ps(amax, _mm256_and_ps(load(i), abs_mask));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  float a = 0.0f;
  for (float v : lanes) a = std::max(a, v);
  if (!(a >= kTinyAmax)) {
    std::memset(q, 0, size_t(group));
    *scale = 0.0f;
    *sum = 0;
    return;
  }
  *scale = a / 127.0f;
  const __m256 inv = _mm256_set1_ps(127.0f / a), sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  __m256i total = _mm256_setzero_si256();
  for (int i = 0; i < group; i += 8) {
    const __m256 v = _mm256_mul_ps(load(i), inv);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(v, t), abs_mask), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    __m256 r = _mm256_add_ps(t, _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(v, sign))));
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    const __m256i qi = _mm256_cvttps_epi32(r);
    total = _mm256_add_epi32(total, qi);
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(w16, w16));
  }
  alignas(32) int32_t s[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(s), total);
  *sum = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

void quantize_avx2(const float* x, int64_t rows, int64_t in, int group, QuantizedActivations& qa) {
  if (group % 8 != 0) return quantize_activations_ref(x, rows, in, group, qa);
  quantize_rows(x, rows, in, group, qa, quantize_group);
}

}  // namespace

const KernelTable& avx2_kernels() {
  static const KernelTable table{Isa::kAvx2,   quantize_avx2,        quantize_group,   residual_avx2,
                                 draft_avx2,   residual_packed_avx2, draft_packed_avx2};
  return table;
}

}  // namespace bitsplit::cpu::detail

BITSPLIT_TARGET_END
