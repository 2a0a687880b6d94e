// Scalar reference for llama.cpp's Q8_0 block format (the baseline every format is compared with).
#include <algorithm>
#include <cmath>

#include "bitsplit/quant.h"
#include "bitsplit/status.h"

namespace bitsplit::quant {
namespace {

// std::roundf (halves away from zero) for |v| < 2^31, without the libm call: the integer part
// by truncation, then one step away from zero when the fraction (v - trunc(v), exact in float)
// is at least one half.
inline int round_half_away(float v) {
  const int i = int(v);
  const float frac = v - float(i);
  return i + int(frac >= 0.5f) - int(frac <= -0.5f);
}

}  // namespace

void quantize_q8_0_ref(std::span<const float> x, std::span<BlockQ8_0> out) {
  BITSPLIT_CHECK(x.size() == out.size() * BlockQ8_0::kWeights, "Q8_0: size mismatch");
  for (size_t b = 0; b < out.size(); ++b) {
    const float* src = x.data() + b * BlockQ8_0::kWeights;
    float amax = 0.0f;
    for (int i = 0; i < BlockQ8_0::kWeights; ++i) amax = std::max(amax, std::fabs(src[i]));  // finite input
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = fp32_to_fp16(d);
    for (int i = 0; i < BlockQ8_0::kWeights; ++i) out[b].q[i] = int8_t(round_half_away(src[i] * id));
  }
}

void dequantize_q8_0_ref(std::span<const BlockQ8_0> in, std::span<float> out) {
  BITSPLIT_CHECK(out.size() == in.size() * BlockQ8_0::kWeights, "Q8_0: size mismatch");
  for (size_t b = 0; b < in.size(); ++b) {
    const float d = fp16_to_fp32(in[b].d);
    for (int i = 0; i < BlockQ8_0::kWeights; ++i) out[b * BlockQ8_0::kWeights + i] = d * float(in[b].q[i]);
  }
}

}  // namespace bitsplit::quant
