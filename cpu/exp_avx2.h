// attention_exp and silu_exp eight lanes at a time (AVX2), for the tier files built with
// -ffp-contract=off: the same operations as the scalar definitions in bitsplit/attention_exp.h,
// lane by lane, so every lane equals them bit for bit. Include inside an AVX2 or AVX-512 region
// (bitsplit/isa_target.h), after every other header; an unnamed namespace: each including file
// keeps its own copy, compiled for its tier.
#pragma once

#include <immintrin.h>

#include "bitsplit/attention_exp.h"

namespace bitsplit::cpu {
namespace {

// attention_exp eight at a time: the same operations on each lane (rint by the rounding mode's
// nearest-even, Cody–Waite, Horner, times 2^n), 0 where x < −87, −inf or NaN.
inline __m256 attention_exp8(__m256 x) {
  using namespace attention_exp_constants;
  const __m256 valid = _mm256_cmp_ps(x, _mm256_set1_ps(kMin), _CMP_GE_OQ);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Hi))),
                                 _mm256_mul_ps(n, _mm256_set1_ps(kLn2Lo)));
  __m256 p = _mm256_set1_ps(kC7);
  for (float c : {kC6, kC5, kC4, kC3, kC2, 1.0f, 1.0f}) p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(c));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(_mm256_and_ps(n, valid)), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), valid);
}

// silu_exp eight at a time: t = e^-|v|, v (v >= 0) or v·t (below), divided by 1 + t.
inline __m256 silu_exp8(__m256 v) {
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(0x80000000u)));
  const __m256 t = attention_exp8(_mm256_or_ps(v, sign));  // -|v|
  const __m256 non_negative = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ);
  const __m256 num = _mm256_blendv_ps(_mm256_mul_ps(v, t), v, non_negative);
  return _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), t));
}

}  // namespace
}  // namespace bitsplit::cpu
