// cpu/ internal: the per-ISA kernel table behind the dispatching plane kernels, and the scalar
// pieces of the arithmetic every tier shares (so the definition is written once).
#pragma once

#include <cmath>
#include <cstdint>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"

namespace bitsplit::cpu::detail {

// One ISA tier. The matmul entries compute output rows [o_begin, o_end) for every activation row
// (y is [qa.rows x out]); the quantiser fills a QuantizedActivations already resized.
struct KernelTable {
  Isa isa;
  void (*quantize)(const float* x, int64_t rows, int64_t in, int group, QuantizedActivations& qa);
  void (*residual)(const ResidualPlaneView& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                   float* y);
  void (*draft)(const DraftPlaneView& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end, float* y);
};

const KernelTable& scalar_kernels();
const KernelTable& avx2_kernels();    // defined in kernels_avx2.cpp (built with -mavx2 -mfma)
const KernelTable& avx512_kernels();  // defined in kernels_avx512.cpp (AVX-512 F/BW/VL/VNNI)

// Groups whose amax is below this quantise to zero: 127 / amax must stay finite.
inline constexpr float kTinyAmax = 0x1p-120f;

// round(v) with halves away from zero, exact for |v| < 2^23 (v - trunc(v) is exact), and the
// same whatever the floating-point rounding mode.
inline float round_half_away(float v) {
  const float t = std::trunc(v);
  return std::fabs(v - t) >= 0.5f ? t + std::copysign(1.0f, v) : t;
}

// Row-range versions of the _ref kernels (the scalar tier).
void residual_rows_ref(const ResidualPlaneView& r, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                       float* y);
void draft_rows_ref(const DraftPlaneView& d, const QuantizedActivations& qa, int64_t o_begin, int64_t o_end,
                    float* y);

}  // namespace bitsplit::cpu::detail

namespace bitsplit::cpu::detail {
// The tier a context runs (defined in cpu_context.cpp).
const KernelTable& kernels_of(const CpuContext& ctx);
const KernelTable& kernels_for(Isa isa);
}  // namespace bitsplit::cpu::detail
