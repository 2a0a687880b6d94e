// quant/: packed weight formats and their scalar reference encoders/decoders (the specification).
// No threads, no I/O. Every packed block is a struct with a static_assert'ed size; docs/FORMAT.md
// repeats the byte layouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace bitsplit::quant {

// IEEE binary16 <-> binary32, round-to-nearest-even, with subnormals, inf and NaN.
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
// bfloat16 is the top half of a binary32; conversion to bf16 rounds to nearest even
// and keeps NaN a (quiet) NaN.
inline float bf16_to_fp32(uint16_t h) {
  uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t fp32_to_bf16(float f);

// llama.cpp's Q8_0: 32 weights as int8 with one fp16 scale; w = d * q.
// Layout (34 bytes): [0..1] d (fp16, little-endian), [2..33] q[32] (int8).
struct BlockQ8_0 {
  static constexpr int kWeights = 32;
  uint16_t d;
  int8_t q[kWeights];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");

// Quantizes n weights (n % 32 == 0) exactly as llama.cpp's reference quantize_row_q8_0:
// d = amax / 127, q = round(x / d) (round half away from zero).
void quantize_q8_0_ref(std::span<const float> x, std::span<BlockQ8_0> out);
void dequantize_q8_0_ref(std::span<const BlockQ8_0> in, std::span<float> out);

}  // namespace bitsplit::quant
