// cpu/ internal: the per-ISA kernel table behind the dispatching plane kernels, and the scalar
// pieces of the arithmetic every tier shares (so the definition is written once).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"

namespace bitsplit::cpu::detail {

// Quantises one group of n <= group valid values (the rest of the group is zero padding) with the
// arithmetic of quantize_activations_ref: q (all `group` of them), s_x = amax / 127 (or 0) and sum(q).
using GroupQuantizer = void (*)(const float* x, int64_t n, int group, int8_t* q, float* scale, int32_t* sum);

// One ISA tier. The matmul entries compute output rows [o_begin, o_end) for every activation row
// (y is [qa.rows x out]); the quantiser fills a QuantizedActivations already resized.
struct KernelTable {
  Isa isa;
  void (*quantize)(const float* x, int64_t rows, int64_t in, int group, QuantizedActivations& qa);
  // The tier's single-group quantiser behind `quantize`, for groups that are a multiple of 16
  // (the Q8_0 kernels quantise their blocks of 32 with it, so both families quantise alike).
  GroupQuantizer quantize_group;
  void (*residual)(const ResidualPlaneView& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                   float* y);
  // delta (may be null): the variant's sign plane, fused into the same pass ("Kernel arithmetic" 5).
  void (*draft)(const DraftPlaneView& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                const SignPlaneView* delta);
  // The same from a PackedPlane; o_begin is a multiple of 16 (a tile boundary).
  void (*residual_packed)(const PackedPlane& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                          float* y);
  void (*draft_packed)(const PackedPlane& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                       const SignPlaneView* delta);
};

const KernelTable& scalar_kernels();
const KernelTable& avx2_kernels();    // defined in kernels_avx2.cpp (built with -mavx2 -mfma)
const KernelTable& avx512_kernels();  // defined in kernels_avx512.cpp (AVX-512 F/BW/VL/VNNI)
// avx512_kernels() with the packed-plane entries on AMX tiles for batches of 32+ rows (packed_amx.cpp).
const KernelTable& amx_kernels();

// Groups whose amax is below this quantise to zero: 127 / amax must stay finite.
inline constexpr float kTinyAmax = 0x1p-120f;

// round(v) with halves away from zero, exact for |v| < 2^23 (v - trunc(v) is exact), and the
// same whatever the floating-point rounding mode.
inline float round_half_away(float v) {
  const float t = std::trunc(v);
  return std::fabs(v - t) >= 0.5f ? t + std::copysign(1.0f, v) : t;
}

// Quantises every (row, group) of x with an ISA tier's single-group quantiser. This and
// ChunkedActivations are in an unnamed namespace on purpose: each tier's file, compiled with its own -m flags, gets its own copy,
// so the linker can never hand one tier the other's instructions.
namespace {
template <typename GroupQuantizer>
void quantize_rows(const float* x, int64_t rows, int64_t in, int group, QuantizedActivations& qa,
                   GroupQuantizer quantize_group, int64_t first = 0, int64_t out_row0 = 0) {
  for (int64_t r = first; r < rows; ++r) {
    const int64_t o = out_row0 + r;
    for (int64_t k = 0; k < qa.groups; ++k)
      quantize_group(x + r * in + k * group, std::min<int64_t>(group, in - k * group), group,
                     qa.q.data() + o * qa.padded + k * group, &qa.scale[size_t(o * qa.groups + k)],
                     &qa.sum[size_t(o * qa.groups + k)]);
  }
}

// The activations re-laid out for the AVX-512 kernels, in chunks of up to chunk_rows rows: for the
// chunk at row r0 (nr rows), group k, 4-code chunk c and row r the 4 int8 are the int32 at
// q[r0 * groups * chunks + (k * chunks + c) * nr + r]; s_x and sum(q) at [r0 * groups + k * nr + r].
// Each worker keeps one (thread_local), reused across calls.
struct ChunkedActivations {
  // One chunk's rows, indexed from its first: q[(k * chunks + c) * nr + r], scale / sum[k * nr + r].
  struct Chunk {
    const int32_t* q;
    const float* scale;
    const int32_t* sum;
  };
  std::vector<int32_t> q, sum;
  std::vector<float> scale;
  int64_t groups = 0, chunks = 0;
  Chunk chunk(int64_t r0) const {
    return {q.data() + r0 * groups * chunks, scale.data() + r0 * groups, sum.data() + r0 * groups};
  }
  void fill(const QuantizedActivations& qa, int64_t chunk_rows) {
    groups = qa.groups;
    chunks = qa.group / 4;
    const int64_t rows = qa.rows;
    q.resize(size_t(rows * groups * chunks));
    sum.resize(size_t(rows * groups));
    scale.resize(size_t(rows * groups));
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0);
      for (int64_t r = 0; r < nr; ++r) {
        const int8_t* src = qa.row_q(r0 + r);
        for (int64_t k = 0; k < groups; ++k) {
          for (int64_t c = 0; c < chunks; ++c)
            std::memcpy(&q[size_t(r0 * groups * chunks + (k * chunks + c) * nr + r)], src + k * qa.group + 4 * c, 4);
          sum[size_t(r0 * groups + k * nr + r)] = qa.sum[size_t((r0 + r) * groups + k)];
          scale[size_t(r0 * groups + k * nr + r)] = qa.scale[size_t((r0 + r) * groups + k)];
        }
      }
    }
  }
};
}  // namespace

// The scalar tier's GroupQuantizer: the definition quantize_activations_ref applies to every group.
void quantize_group_ref(const float* x, int64_t n, int group, int8_t* q, float* scale, int32_t* sum);

// Row-range versions of the _ref kernels (the scalar tier).
void residual_rows_ref(const ResidualPlaneView& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                       float* y);
void draft_rows_ref(const DraftPlaneView& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                    float* y, const SignPlaneView* delta);
void residual_packed_ref(const PackedPlane& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                         float* y);
void draft_packed_ref(const PackedPlane& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                      const SignPlaneView* delta);
// The SIMD tiers' packed kernels (packed_avx512.cpp; the AVX2 ones live in kernels_avx2.cpp).
void residual_packed_avx512(const PackedPlane& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                            float* y);
void draft_packed_avx512(const PackedPlane& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                         float* y, const SignPlaneView* delta);
// The AMX tier's packed kernels (packed_amx.cpp): from 32 rows, whole 16-row passes on tiles; the
// rest, smaller batches and any fused sign plane on the AVX-512 kernels above.
void residual_packed_amx(const PackedPlane& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                         float* y);
void draft_packed_amx(const PackedPlane& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y,
                      const SignPlaneView* delta);
// Aborts unless delta (when not null) fits the draft plane.
void check_delta(const DraftPlaneView& d, const SignPlaneView* delta);
// Step 5 alone for output rows [o_begin, o_end): y holds the plain draft result and gets the signs.
void sign_rows_ref(const SignPlaneView& s, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                   float* y);

// The sign bytes a kernel may read per row: bits at i >= in are ignored, and a view's row_bytes
// may be a wider stride, so nothing past ceil(in / 8) is ever needed or touched.
inline int64_t sign_bytes_read(int64_t in) { return (in + 7) / 8; }
inline float delta_alpha(const SignPlaneView& s, int64_t o) { return s.alpha[s.alpha_per_row ? o : 0]; }

}  // namespace bitsplit::cpu::detail

namespace bitsplit::cpu::detail {
// The tier a context runs (defined in cpu_context.cpp).
const KernelTable& kernels_of(const CpuContext& ctx);
const KernelTable& kernels_for(Isa isa);
}  // namespace bitsplit::cpu::detail
