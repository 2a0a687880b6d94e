// Test-only helpers of the CPU kernel tests: the ISA tiers this machine runs, one context per
// tier, NaN-filled outputs (so a kernel that skips an element is caught) and bitwise comparison.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "bitsplit/cpu.h"

namespace bitsplit::cpu::testing {

inline std::vector<Isa> supported_tiers() {
  std::vector<Isa> tiers;
  for (Isa isa : kIsaTiers)
    if (isa_supported(isa)) tiers.push_back(isa);
  return tiers;
}

// One single-threaded context per tier, created once (loading the hwloc topology is slow).
inline CpuContext& tier_context(Isa isa) {
  static CpuContext* contexts[std::size(kIsaTiers)] = {};
  CpuContext*& c = contexts[int(isa)];
  if (!c) c = new CpuContext({.threads = 1, .pin = false, .isa = isa});
  return *c;
}

inline std::vector<float> poisoned(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

inline bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}

// The first element whose bits differ, for an assertion's message.
inline std::string first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "element %zu: %.9g vs %.9g", i, double(a[i]), double(b[i]));
      return buf;
    }
  return a.size() == b.size() ? "no difference" : "sizes differ";
}

// One output of a product, for the accuracy tests' bounds (docs/FORMAT.md, "Kernel arithmetic"):
// w is the dequantised weight row, x the f32 activation row, q and sx its int8 codes and the
// per-block scales (blocks of `block` weights).
struct ProductTerms {
  double exact = 0;    // sum_i w_i x_i
  double exact_q = 0;  // sum_i w_i s_x q_i: what the integer path computes before float rounding
  double act = 0;      // sum_i |w_i| (s_x / 2 + 2^-21 |x_i|): the activation rounding's bound
  double terms = 0;    // sum_i |w_i s_x q_i|: what the float steps' rounding is relative to
  double abs_xq = 0;   // sum_i |s_x q_i|
  double mag = 0;      // sum_i |w_i x_i|
};
inline ProductTerms product_terms(const float* w, const float* x, const int8_t* q, const float* sx, int64_t in,
                                  int block) {
  ProductTerms t;
  for (int64_t i = 0; i < in; ++i) {
    const double wi = w[i], xi = x[i], xq = double(sx[i / block]) * q[i];
    t.exact += wi * xi;
    t.exact_q += wi * xq;
    t.act += std::fabs(wi) * (sx[i / block] / 2.0 + std::ldexp(std::fabs(xi), -21));
    t.terms += std::fabs(wi * xq);
    t.abs_xq += std::fabs(xq);
    t.mag += std::fabs(wi * xi);
  }
  return t;
}

}  // namespace bitsplit::cpu::testing
