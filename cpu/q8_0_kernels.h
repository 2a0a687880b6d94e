// cpu/ internal: the per-ISA matmuls behind the Q8_0 baseline kernels (include/bitsplit/cpu.h,
// "Q8_0 baseline kernels"). Kept apart from plane_kernels.h's KernelTable so the two kernel
// families can change independently; only the activation quantiser is shared.
#pragma once

#include <cstdint>

#include "bitsplit/cpu.h"

namespace bitsplit::cpu::detail {

inline constexpr int kQ8_0Weights = 32;     // weights per block
inline constexpr int kQ8_0BlockBytes = 34;  // fp16 d + 32 int8

// Output rows [o_begin, o_end) for every activation row (y is [qa.rows x w.out]): the scalar
// reference and one kernel per SIMD tier. Activations are quantised by the plane kernels' group
// quantiser of the tier (KernelTable::quantize_group with groups of 32).
using Q8_0Rows = void (*)(const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o_begin, int64_t o_end, float* y);
void q8_0_rows_ref(const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o_begin, int64_t o_end, float* y);
void q8_0_rows_avx2(const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o_begin, int64_t o_end,
                    float* y);  // q8_0_kernels_avx2.cpp (AVX2 + FMA + F16C)
void q8_0_rows_avx512(const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o_begin, int64_t o_end,
                      float* y);  // q8_0_kernels_avx512.cpp (AVX-512 F/BW/VL/VNNI)

}  // namespace bitsplit::cpu::detail
