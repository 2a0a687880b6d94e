// Mixture-of-experts routing, written once for the CPU forward pass and the device draft (whose
// host side routes from the router logits it copies back): each row's softmax over the experts
// (softmax_with and std::exp, as cpu::softmax_f32), its
// `used` most probable experts (ties to the lower index), weighted by their probabilities —
// renormalised over the chosen when `renormalise` (the sum in double, each weight
// float(p / sum)). Header-only and C++17, as nvcc compiles gpu/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "bitsplit/softmax_with.h"

namespace bitsplit {

// The rows routed to one expert, in row order, with each row's weight.
struct ExpertRows {
  std::vector<int32_t> rows;
  std::vector<float> weights;
};

// logits: [rows x n_expert], overwritten by the probabilities. `out` gets n_expert entries.
inline void route_experts(float* logits, int64_t rows, int64_t n_expert, int64_t used, bool renormalise,
                          std::vector<ExpertRows>& out) {
  out.assign(size_t(n_expert), ExpertRows{});
  std::vector<int64_t> order(static_cast<size_t>(n_expert));
  for (int64_t r = 0; r < rows; ++r) {
    float* p = logits + r * n_expert;
    softmax_with(p, n_expert, [](float v) { return std::exp(v); });
    for (int64_t e = 0; e < n_expert; ++e) order[size_t(e)] = e;
    std::partial_sort(order.begin(), order.begin() + used, order.end(),
                      [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double sum = 0.0;
    for (int64_t k = 0; k < used; ++k) sum += p[order[size_t(k)]];
    for (int64_t k = 0; k < used; ++k) {
      const int64_t e = order[size_t(k)];
      out[size_t(e)].rows.push_back(int32_t(r));
      out[size_t(e)].weights.push_back(renormalise ? float(p[e] / sum) : p[e]);
    }
  }
}

}  // namespace bitsplit
