// Half-precision conversions (binary16 and bfloat16) used by every format with fp16 scales.
#include <bit>

#include "bitsplit/quant.h"

namespace bitsplit::quant {

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf / NaN keep their payload
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalise the mantissa into a normal float.
    int e = -1;
    do {
      mantissa <<= 1;
      ++e;
    } while ((mantissa & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((mantissa & 0x3ff) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((abs >> 13) & 0x3ff));  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in half precision: shift with round-to-nearest-even.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - int(abs >> 23);  // 14 + (113 - exp) - 1 ... in [14, 24]
    const uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t r = half + ((rem > halfway || (rem == halfway && (half & 1))) ? 1 : 0);
    return uint16_t(sign | r);
  }
  // Normal: rebias exponent, round mantissa to 10 bits (carry may bump the exponent).
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return uint16_t(sign | h);
}

uint16_t fp32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

}  // namespace bitsplit::quant
