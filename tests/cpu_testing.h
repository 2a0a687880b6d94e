// Shared helpers of the CPU kernel tests: the ISA tiers this machine runs, one context per
// tier, and NaN-filled outputs (so a kernel that skips an element is caught).
#pragma once

#include <limits>
#include <vector>

#include "bitsplit/cpu.h"

namespace bitsplit::cpu::testing {

inline std::vector<Isa> supported_tiers() {
  std::vector<Isa> tiers;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) tiers.push_back(isa);
  return tiers;
}

// One single-threaded context per tier, created once (loading the hwloc topology is slow).
inline CpuContext& tier_context(Isa isa) {
  static CpuContext* contexts[3] = {};
  CpuContext*& c = contexts[int(isa)];
  if (!c) c = new CpuContext({.threads = 1, .pin = false, .isa = isa});
  return *c;
}

inline std::vector<float> poisoned(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

}  // namespace bitsplit::cpu::testing
