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
const KernelTable& avx2_kernels();    // defined in kernels_avx2.cpp (AVX2 + FMA + F16C)
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
