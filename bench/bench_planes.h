// Bench-only: what the CPU kernel benches share — a one-thread and an all-cores context, and
// copies of a kernel case's weights (tests/cpu/kernel_cases.h) rotated so that every call streams
// its plane from RAM, as a model's layers do.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include <unistd.h>

#include "bitsplit/cpu.h"
#include "kernel_cases.h"

namespace bitsplit::bench {

// Bytes of plane copies per case: 3x the last-level cache (sysconf's L3 size; at least 96 MiB), so
// that every call reads its plane from RAM. (A VM may report a large L3 — 300 MiB on the Xeon
// development VM — and a fixed 96 MiB then measured the L3, not the memory.)
inline size_t working_set() {
  static const size_t bytes = [] {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return std::max(size_t(96) << 20, 3 * size_t(l3 > 0 ? l3 : 0));
  }();
  return bytes;
}

inline cpu::CpuContext& context(bool all_threads) {
  static cpu::CpuContext one({.threads = 1});
  static cpu::CpuContext all;
  return all_threads ? all : one;
}

// A case's weights (random codes and scales: timing does not depend on the values) and enough
// copies of them in huge-page plane memory that the copies are >= working_set() together.
struct PlaneCopies {
  cpu::testing::CaseWeights source;
  std::vector<cpu::PlaneBuffer> copies;
  std::vector<cpu::PackedPlane> packed;  // of each copy, made by pack_all()

  PlaneCopies(cpu::CpuContext& ctx, const cpu::testing::KernelCase& c) : source(c) {
    const size_t n = std::max<size_t>(1, (working_set() + source.size() - 1) / source.size());
    for (size_t i = 0; i < n; ++i) {
      copies.emplace_back(ctx, source.size());
      std::memcpy(copies.back().data(), source.bytes(), source.size());
    }
  }
  int count() const { return int(copies.size()); }
  const uint8_t* copy(int i) const { return copies[size_t(i)].data(); }
  void pack_all(cpu::CpuContext& ctx) {
    if (!packed.empty()) return;
    for (int i = 0; i < count(); ++i) packed.push_back(*source.pack(ctx, copy(i)));
  }
  // x [n x in] (random) quantised for the case's kernel by ctx's tier.
  cpu::testing::CaseActivations activations(cpu::CpuContext& ctx, int64_t n) const {
    const auto x = cpu::testing::random_activations(n, source.spec().in, 7);
    cpu::testing::CaseActivations a;
    cpu::testing::quantize_case(source, &ctx, x.data(), n, a);
    return a;
  }
  // Runs the benchmark's iterations, one call of the case's kernel each on the copies in turn
  // (file-layout views, or the packed planes; without_signs: the draft alone), timing only the
  // calls; returns seconds per call.
  double time_calls(benchmark::State& state, cpu::CpuContext& ctx, bool use_packed,
                    const cpu::testing::CaseActivations& a, bool without_signs = false) const {
    const cpu::testing::KernelCase& c = source.spec();
    std::vector<cpu::testing::CaseViews> views;
    for (int i = 0; i < count(); ++i) {
      views.push_back(source.views_of(copy(i)));
      views.back().has_signs &= !without_signs;
    }
    std::vector<float> y(size_t((c.kernel == cpu::testing::Kernel::kQ8_0 ? a.q8_0.rows : a.plane.rows) * c.out));
    int i = 0;
    double seconds = 0;
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      cpu::testing::multiply_case(c, views[size_t(i)], &ctx, use_packed ? &packed[size_t(i)] : nullptr, a, y.data());
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      benchmark::DoNotOptimize(y.data());
      if (++i == count()) i = 0;
    }
    return seconds / double(state.iterations());
  }
};

// The copies of case c, kept while consecutive benchmark runs ask for the same case: one set
// (~working_set()) alive at a time.
inline PlaneCopies& plane_copies(const cpu::testing::KernelCase& c) {
  static std::unique_ptr<PlaneCopies> set;
  if (!set || set->source.spec().name() != c.name()) {
    set.reset();
    set = std::make_unique<PlaneCopies>(context(true), c);
  }
  return *set;
}

}  // namespace bitsplit::bench
