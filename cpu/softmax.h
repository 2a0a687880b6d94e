// cpu/ internal: the softmax both softmax_f32 and softmax_attention_ref are — max subtracted,
// `exp` of each value, the sum in double in order, every value times float(1 / sum) — written
// once, the exponential the caller's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace bitsplit::cpu::detail {

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

}  // namespace bitsplit::cpu::detail
