// The softmax cpu::softmax_f32, cpu::softmax_attention_ref and a mixture of experts' routing
// (expert_routing.h) are — max subtracted, `exp` of each value, the sum in double in order,
// every value times float(1 / sum) — written once, the exponential the caller's. Header-only
// and C++17 (nvcc compiles the device draft's host side, which routes experts).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace bitsplit {

template <typename Exp>
void softmax_with(float* x, int64_t n, Exp exp) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = exp(x[i] - max);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace bitsplit
