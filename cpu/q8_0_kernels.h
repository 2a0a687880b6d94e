// cpu/ internal: the per-ISA table behind the Q8_0 baseline kernels (include/bitsplit/cpu.h,
// "Q8_0 baseline kernels"). Kept apart from plane_kernels.h's KernelTable so the two kernel
// families can change independently.
#pragma once

#include <cstdint>

#include "bitsplit/cpu.h"

namespace bitsplit::cpu::detail {

inline constexpr int kQ8_0Weights = 32;     // weights per block
inline constexpr int kQ8_0BlockBytes = 34;  // fp16 d + 32 int8

struct Q8_0Kernels {
  Isa isa;
  // Fills qa, already resized for (rows, in).
  void (*quantize)(const float* x, int64_t rows, int64_t in, Q8_0Activations& qa);
  // Output rows [o_begin, o_end) for every activation row (y is [qa.rows x w.out]).
  void (*matmul)(const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o_begin, int64_t o_end, float* y);
};

const Q8_0Kernels& q8_0_scalar_kernels();
const Q8_0Kernels& q8_0_avx2_kernels();    // q8_0_kernels_avx2.cpp (-mavx2 -mfma -mf16c)
const Q8_0Kernels& q8_0_avx512_kernels();  // q8_0_kernels_avx512.cpp (AVX-512 F/BW/VL/VNNI)

// The scalar pieces every tier falls back to or shares.
void q8_0_rows_ref(const Q8_0PlaneView& w, const Q8_0Activations& qa, int64_t o_begin, int64_t o_end, float* y);
// One block of 32 activations: the definition in docs/FORMAT.md, "Q8_0 baseline kernel arithmetic".
void quantize_block_q8_0_ref(const float* x, int8_t* q, float* d, int32_t* sum);

}  // namespace bitsplit::cpu::detail
