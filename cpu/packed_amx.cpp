// AMX (TILE + INT8) kernels on PackedPlane, for batches of 32 activation rows and more (prompt
// prefill, wide verify passes). A group's integer dot products for 16 activation rows x 16 output
// rows are one TDPBSSD (two at g = 128): the A tile is the activations (re-laid out group by
// group, 64-byte aligned), the B tile a tile's codes — the packed layout's 64-byte chunk c (4
// codes of each of the 16 output rows) is B row c — unpacked once per tile into signed bytes for
// every 16-row pass. The int32 sums are exact, so they equal the AVX-512 tier's vpdpbusd sums; the
// float steps after them are that tier's, lane by lane, so the results equal residual_matmul_ref /
// draft_matmul_ref bit for bit. A last partial pass of 8+ rows is padded with zero rows; shorter
// ones, batches under 32 rows and drafts with a fused sign plane run on the AVX-512 kernels.
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
BITSPLIT_TARGET_BEGIN(BITSPLIT_ISA_AMX)

#include "packed_chunk_avx512.h"

namespace bitsplit::cpu::detail {
namespace {

constexpr int kLanes = PackedPlane::kTileRows;  // output rows of a tile = activation rows of a pass

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// k_bytes: the bytes of a group one TDPBSSD takes (32 or 64).
void configure_tiles(int k_bytes) {
  TileConfig c;
  // Registers 0, 1: C (int32 16 x 16) of even and odd groups; 2, 3: their A; 4, 5: their B.
  for (int t : {0, 1}) c.rows[t] = kLanes, c.colsb[t] = 64;
  for (int t : {2, 3}) c.rows[t] = kLanes, c.colsb[t] = uint16_t(k_bytes);
  for (int t : {4, 5}) c.rows[t] = uint8_t(k_bytes / 4), c.colsb[t] = 64;
  // GCC's _tile_loadconfig tells the compiler it reads 8 bytes of the config: without this
  // barrier the stores of the rest may be dropped and the tiles left unconfigured (#UD).
  __asm__ __volatile__("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}

// Group k's int32 sums C[r][l] = sum_i q(r0 + r, i) * code(l, i) into out (16 x 16, row r =
// activation row), on one set of tile registers: C 0 / A 2 / B 4, or C 1 / A 3 / B 5. The tile
// intrinsics paste their register number into the instruction text, so each set is its own
// function (a macro argument, not a template parameter).
#define BITSPLIT_GROUP_SUMS(NAME, C, A, B)                                              \
  template <int kGroup>                                                                 \
  inline void NAME(const int8_t* a, int64_t a_stride, const int8_t* b, int32_t* out) {  \
    constexpr int kK = kGroup < 64 ? kGroup : 64;                                       \
    _tile_zero(C);                                                                      \
    for (int s = 0; s < kGroup / kK; ++s) {                                             \
      _tile_loadd(A, a + s * kK, a_stride);                                             \
      _tile_loadd(B, b + s * kK * 16, 64);                                              \
      _tile_dpbssd(C, A, B);                                                            \
    }                                                                                   \
    _tile_stored(C, out, 64);                                                           \
  }
BITSPLIT_GROUP_SUMS(group_sums_even, 0, 2, 4)
BITSPLIT_GROUP_SUMS(group_sums_odd, 1, 3, 5)
#undef BITSPLIT_GROUP_SUMS

// Output tile t (rows o0 .. o0 + valid) for activation rows r0 .. r0 + 15, of which the first
// `live` are stored (the rest pad the last pass). codes: the tile's signed codes in the B layout,
// group k's at k * (g / 4) * 64; a: the pass's activations; x_scale and fsum: s_x and
// float(sum(q)) per (row, group) (amx_rows).
template <int kBits, int kGroup>
void tile_pass(const PackedPlane& p, int64_t t, const int8_t* codes, const int8_t* a, const float* x_scale,
               const float* fsum, int64_t r0, int live, int valid, float* y) {
  constexpr bool kDraft = kBits <= 4;
  constexpr int64_t kBlock = int64_t(kGroup / 4) * 64;
  const int64_t groups = p.groups, o0 = t * kLanes;
  const auto* sc = reinterpret_cast<const uint16_t*>(p.tile(t) + groups * p.code_block_bytes());
  const uint16_t* of = sc + groups * kLanes;
  const float* scale = x_scale + r0 * groups;
  const float* fs = fsum + r0 * groups;
  __m512 facc[kLanes];
  for (auto& v : facc) v = _mm512_setzero_ps();

  // The float steps of group k from its int32 sums: packed_avx512.cpp's tile_rows, row by row
  // (a residual's sums already hold the -2^(B-1) sum(q) that tier starts its accumulator with).
  auto finish = [&](int64_t k, const int32_t* s) {
    const __m512 tv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc + k * kLanes)));
    if constexpr (kDraft) {
      const __m512 mv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(of + k * kLanes)));
      for (int r = 0; r < kLanes; ++r) {
        const __m512 msx = _mm512_mul_ps(mv, _mm512_set1_ps(fs[r * groups + k]));
        const __m512 inner = _mm512_fmadd_ps(tv, _mm512_cvtepi32_ps(_mm512_load_si512(s + r * kLanes)), msx);
        facc[r] = _mm512_fmadd_ps(_mm512_set1_ps(scale[r * groups + k]), inner, facc[r]);
      }
    } else {
      for (int r = 0; r < kLanes; ++r)
        facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(s + r * kLanes)),
                                  _mm512_mul_ps(tv, _mm512_set1_ps(scale[r * groups + k])), facc[r]);
    }
  };
  // Two groups in flight: group k + 1's tile products run while group k's float steps do.
  alignas(64) int32_t sums[2][kLanes * kLanes];
  constexpr int64_t kA = int64_t(kLanes) * kGroup;  // one group's activation block
  group_sums_even<kGroup>(a, kGroup, codes, sums[0]);
  for (int64_t k = 0; k < groups; k += 2) {
    if (k + 1 < groups) group_sums_odd<kGroup>(a + (k + 1) * kA, kGroup, codes + (k + 1) * kBlock, sums[1]);
    finish(k, sums[0]);
    if (k + 1 < groups) {
      if (k + 2 < groups) group_sums_even<kGroup>(a + (k + 2) * kA, kGroup, codes + (k + 2) * kBlock, sums[0]);
      finish(k + 1, sums[1]);
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1);
  for (int r = 0; r < live; ++r) _mm512_mask_storeu_ps(y + (r0 + r) * p.out + o0, mask, facc[r]);
}

// n elements of v's storage at a 64-byte boundary (tile rows that straddle two cache lines load at
// half speed).
template <typename T>
T* aligned_storage(std::vector<T>& v, size_t n) {
  v.resize(n + 64 / sizeof(T));
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63));
}

// Output tiles unpacked and multiplied together (amx_rows).
constexpr int kBlockTiles = 4;

// The activation rows in passes of 16: `whole` rows, a multiple of 16 that may pass qa.rows (the
// last pass padded with zero rows, whose results are not stored).
template <int kBits, int kGroup>
void amx_rows(const PackedPlane& p, const QuantizedActivations& qa, int64_t whole, int64_t o_begin, int64_t o_end,
              float* y) {
  constexpr bool kDraft = kBits <= 4;
  constexpr int kChunks = kGroup / 4;
  const int64_t groups = p.groups, cb = p.code_block_bytes();
  thread_local std::vector<int8_t> code_storage, act_storage;
  // A draft's float(sum(q)) per (row, group), converted once per call: converting in the float
  // steps, as the AVX-512 tier does, made D2 at 256 rows ~15 % slower (4096 x 4096: 7085 vs 5997 us).
  thread_local std::vector<float> fsum, scale_storage;
  // The activations of each 16-row pass group by group (16 rows x g bytes, rows g apart): read
  // in place, rows qa.padded apart, a stride of 4 KiB put all 16 rows in one L1 set.
  int8_t* acts = aligned_storage(act_storage, size_t(whole * qa.padded));
  for (int64_t r0 = 0; r0 < whole; r0 += kLanes)
    for (int64_t k = 0; k < groups; ++k)
      for (int r = 0; r < kLanes; ++r) {
        int8_t* to = acts + (r0 * groups + k * kLanes + r) * kGroup;
        if (r0 + r < qa.rows) std::memcpy(to, qa.row_q(r0 + r) + k * kGroup, kGroup);
        else std::memset(to, 0, kGroup);
      }
  // s_x per (row, group), zero on the padding rows.
  const float* x_scale = qa.scale.data();
  if (whole > qa.rows) {
    scale_storage.assign(qa.scale.begin(), qa.scale.begin() + qa.rows * groups);
    scale_storage.resize(size_t(whole * groups), 0.0f);
    x_scale = scale_storage.data();
  }
  // A tile's codes as signed bytes in the B layout, once per tile for every 16-row pass: a
  // residual's minus 2^(B-1) (so the tile product is the reference's sum(q (c - 2^(B-1))), the
  // same integer as its sum(q c) - 2^(B-1) sum(q)), a draft's (0 .. 15) as they are.
  const int64_t tile_codes = groups * kChunks * 64;
  int8_t* codes = aligned_storage(code_storage, size_t(kBlockTiles * tile_codes));
  if (kDraft) {
    fsum.assign(size_t(whole * groups), 0.0f);  // (zero on the padding rows)
    for (size_t i = 0; i < size_t(std::min(whole, qa.rows) * groups); ++i) fsum[i] = float(qa.sum[i]);
  }
  const __m512i half = _mm512_set1_epi8(char(kDraft ? 0 : 1 << (kBits - 1)));
  configure_tiles(kGroup < 64 ? kGroup : 64);
  for (int64_t b0 = o_begin; b0 < o_end; b0 += kBlockTiles * kLanes) {
    const int64_t t0 = b0 / kLanes;
    const int tiles = int(std::min<int64_t>(kBlockTiles, (o_end - b0 + kLanes - 1) / kLanes));
    for (int i = 0; i < tiles; ++i) {
      const uint8_t* tile = p.tile(t0 + i);
      int8_t* out = codes + i * tile_codes;
      for (int64_t k = 0; k < groups; ++k) {
        for (int64_t line = 0; line < cb; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(tile + k * cb + kPrefetchBytes + line), _MM_HINT_T0);
        for (int c = 0; c < kChunks; ++c)
          _mm512_store_si512(out + (k * kChunks + c) * 64, _mm512_sub_epi8(chunk<kBits, kGroup>(tile + k * cb, c), half));
      }
    }
    // Pass by pass over the block's tiles: a pass's activations are read from L1 for each tile, and
    // each output row is written 64 x 4 contiguous bytes at a time (one tile at a time scattered
    // 16 lines over 16 pages per pass: a quarter of the time at out = 8960).
    for (int64_t r0 = 0; r0 < whole; r0 += kLanes)
      for (int i = 0; i < tiles; ++i) {
        const int64_t o0 = b0 + i * kLanes;
        const int valid = int(std::min<int64_t>(kLanes, o_end - o0));
        const int live = int(std::min<int64_t>(kLanes, qa.rows - r0));
        tile_pass<kBits, kGroup>(p, t0 + i, codes + i * tile_codes, acts + r0 * qa.padded, x_scale, fsum.data(), r0,
                                 live, valid, y);
      }
  }
  _tile_release();
}

// The rows past the last whole 16 as their own QuantizedActivations (a copy of at most 15 rows).
void copy_rows(const QuantizedActivations& qa, int64_t from, QuantizedActivations& tail) {
  tail.rows = qa.rows - from;
  tail.in = qa.in, tail.padded = qa.padded, tail.groups = qa.groups, tail.group = qa.group;
  tail.q.assign(qa.q.begin() + from * qa.padded, qa.q.begin() + qa.rows * qa.padded);
  tail.scale.assign(qa.scale.begin() + from * qa.groups, qa.scale.begin() + qa.rows * qa.groups);
  tail.sum.assign(qa.sum.begin() + from * qa.groups, qa.sum.begin() + qa.rows * qa.groups);
}

template <int kBits>
void amx_any_group(const PackedPlane& p, const QuantizedActivations& qa, int64_t whole, int64_t o_begin, int64_t o_end,
                   float* y) {
  if (p.group == 32) amx_rows<kBits, 32>(p, qa, whole, o_begin, o_end, y);
  else if (p.group == 64) amx_rows<kBits, 64>(p, qa, whole, o_begin, o_end, y);
  else amx_rows<kBits, 128>(p, qa, whole, o_begin, o_end, y);
}

// Below kMinRows rows everything runs on the AVX-512 kernel: at 16 rows a residual is still
// read-bound and the AMX path's extra pass over the codes made it slower (bench_cpu_kernels
// BM_PlaneMatmulPrompt, 4096 x 4096 R8, 2 threads: 863 vs 709 us; at 32 rows 1220 vs 1480 us).
constexpr int64_t kMinRows = 32;

// A last partial pass of this many rows or more runs on AMX padded to 16 (a pass over the B
// tiles already unpacked costs about what the AVX-512 kernel takes for 8 rows); fewer go to
// the AVX-512 kernel.
constexpr int64_t kPadRows = 8;

// 16-row passes on AMX (`whole_rows`), the rows past them on the AVX-512 kernel (`rest`), into the same y.
template <typename Whole, typename Rest>
void split_rows(const PackedPlane& p, const QuantizedActivations& qa, float* y, Whole&& whole_rows, Rest&& rest) {
  if (qa.rows < kMinRows) return rest(qa, y);
  const int64_t partial = qa.rows % kLanes;
  const int64_t whole = qa.rows - partial + (partial >= kPadRows ? kLanes : 0);
  whole_rows(whole);
  if (whole >= qa.rows) return;
  thread_local QuantizedActivations tail;
  copy_rows(qa, whole, tail);
  rest(tail, y + whole * p.out);
}

}  // namespace

void residual_packed_amx(const PackedPlane& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                         float* y) {
  split_rows(
      r, qa, y,
      [&](int64_t whole) {
        if (r.bits == 8) amx_any_group<8>(r, qa, whole, o_begin, o_end, y);
        else amx_any_group<6>(r, qa, whole, o_begin, o_end, y);
      },
      [&](const QuantizedActivations& rows, float* out) { residual_packed_avx512(r, rows, o_begin, o_end, out); });
}

void draft_packed_amx(const PackedPlane& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                      const SignPlaneView* delta) {
  if (delta) return draft_packed_avx512(d, qa, o_begin, o_end, y, delta);
  split_rows(
      d, qa, y,
      [&](int64_t whole) {
        if (d.stored_bits() == 4) amx_any_group<4>(d, qa, whole, o_begin, o_end, y);
        else amx_any_group<2>(d, qa, whole, o_begin, o_end, y);
      },
      [&](const QuantizedActivations& rows, float* out) { draft_packed_avx512(d, rows, o_begin, o_end, out, nullptr); });
}

const KernelTable& amx_kernels() {
  static const KernelTable table = [] {
    KernelTable t = avx512_kernels();
    t.isa = Isa::kAmx;
    t.residual_packed = residual_packed_amx;
    t.draft_packed = draft_packed_amx;
    return t;
  }();
  return table;
}

}  // namespace bitsplit::cpu::detail

BITSPLIT_TARGET_END
