// The exponential of the attention softmax (and of SiLU: silu_exp below), defined by its
// operations so that every tier (the scalar reference, the AVX2 kernel eight at a time, the CUDA
// kernel and its CPU emulation) computes the same bits; std::exp is libm's and differs between
// libraries and vector widths.
//
// exp(x) for x <= 0 (a score minus the row's max): n = rint(x · log2 e), r = (x − n·ln2_hi) −
// n·ln2_lo (Cody–Waite), e^r by its Taylor series to r^7 in Horner form (|r| <= ln2/2: error
// below 1e-8 relative before rounding), times 2^n. Every product and sum is rounded on its own
// (callers compile with -ffp-contract=off; the CUDA build uses __fmul_rn/__fadd_rn). Below
// −87 (2^n would be subnormal), for −inf (a masked slot) and for NaN the result is 0.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define BITSPLIT_EXP_HD __host__ __device__ inline
#else
#define BITSPLIT_EXP_HD inline
#endif
#if defined(__CUDA_ARCH__)  // the device pass: no contraction into FMAs
#define BITSPLIT_EXP_MUL(a, b) __fmul_rn(a, b)
#define BITSPLIT_EXP_ADD(a, b) __fadd_rn(a, b)
#define BITSPLIT_EXP_SUB(a, b) __fsub_rn(a, b)
#define BITSPLIT_EXP_DIV(a, b) __fdiv_rn(a, b)
#else
#define BITSPLIT_EXP_MUL(a, b) ((a) * (b))
#define BITSPLIT_EXP_ADD(a, b) ((a) + (b))
#define BITSPLIT_EXP_SUB(a, b) ((a) - (b))
#define BITSPLIT_EXP_DIV(a, b) ((a) / (b))
#endif

namespace bitsplit {

namespace attention_exp_constants {
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693145751953125f;       // ln 2 to 16 bits: n · kLn2Hi is exact
inline constexpr float kLn2Lo = 1.42860676533018708e-06f;  // ln 2 − kLn2Hi
inline constexpr float kMin = -87.0f;
// 1/k! for k = 7 down to 2, then 1 and 1.
inline constexpr float kC7 = 1.0f / 5040.0f, kC6 = 1.0f / 720.0f, kC5 = 1.0f / 120.0f, kC4 = 1.0f / 24.0f,
                       kC3 = 1.0f / 6.0f, kC2 = 0.5f;
}  // namespace attention_exp_constants

BITSPLIT_EXP_HD float attention_exp(float x) {
  using namespace attention_exp_constants;
  if (!(x >= kMin)) return 0.0f;
  const float n = rintf(BITSPLIT_EXP_MUL(x, kLog2e));
  const float r = BITSPLIT_EXP_SUB(BITSPLIT_EXP_SUB(x, BITSPLIT_EXP_MUL(n, kLn2Hi)), BITSPLIT_EXP_MUL(n, kLn2Lo));
  float p = kC7;
  p = BITSPLIT_EXP_ADD(BITSPLIT_EXP_MUL(p, r), kC6);
  p = BITSPLIT_EXP_ADD(BITSPLIT_EXP_MUL(p, r), kC5);
  p = BITSPLIT_EXP_ADD(BITSPLIT_EXP_MUL(p, r), kC4);
  p = BITSPLIT_EXP_ADD(BITSPLIT_EXP_MUL(p, r), kC3);
  p = BITSPLIT_EXP_ADD(BITSPLIT_EXP_MUL(p, r), kC2);
  p = BITSPLIT_EXP_ADD(BITSPLIT_EXP_MUL(p, r), 1.0f);
  p = BITSPLIT_EXP_ADD(BITSPLIT_EXP_MUL(p, r), 1.0f);
  const uint32_t bits = uint32_t(int32_t(n) + 127) << 23;  // 2^n, n in [-126, 0]
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return BITSPLIT_EXP_MUL(p, scale);
}

// SiLU, v / (1 + e^-v), on attention_exp, whose argument must not be positive: with
// t = e^-|v|, v / (1 + t) for v >= 0 and v·t / (1 + t) below (the same value, e^v / e^v
// multiplied in). Defined by its operations like attention_exp, so the forward pass's scalar
// reference, its AVX2 kernel (silu_mul) and the device draft agree bit for bit; for v below
// −87 the result is −0 (true value under 1e-36 in magnitude), NaN stays NaN.
BITSPLIT_EXP_HD float silu_exp(float v) {
  const float t = attention_exp(-fabsf(v));
  const float num = v >= 0.0f ? v : BITSPLIT_EXP_MUL(v, t);
  return BITSPLIT_EXP_DIV(num, BITSPLIT_EXP_ADD(1.0f, t));
}

}  // namespace bitsplit
