// Prompt prefill: the target linear layer (D + R8) for n rows through the int8 plane kernels
// (16-row tiles) against dequantised tiles + oneDNN sgemm, to find the n where sgemm wins.
// Usage: ./build/bench/bench_prefill [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <vector>

#include "bench_planes.h"
#include "bitsplit/cpu.h"
#include "kernel_cases.h"

namespace {

using namespace bitsplit;
namespace kc = cpu::testing;

// The draft and the 8-bit residual of a model shape (tests/cpu/kernel_cases.h's bench cases).
struct Planes {
  kc::CaseWeights d, r;
  explicit Planes(kc::Shape s)
      : d(kc::bench_case(kc::Kernel::kDraft, 2, kc::Signs::kNone, s)),
        r(kc::bench_case(kc::Kernel::kResidual, 8, kc::Signs::kNone, s)) {}
  int64_t in() const { return d.spec().in; }
  int64_t out() const { return d.spec().out; }
};

// 4096 x 4096 and 14336 x 4096 (an FFN's up projection).
const Planes& planes(int64_t out) {
  static Planes a(kc::kModelShapes[0]), b(kc::kModelShapes[2]);
  return out == a.out() ? a : b;
}

cpu::CpuContext& context() { return bench::context(true); }

// args: out, rows
void BM_TargetKernels(benchmark::State& state) {
  const Planes& p = planes(state.range(0));
  const int64_t rows = state.range(1);
  const auto x = kc::random_activations(rows, p.in(), 3);
  std::vector<float> y(size_t(rows * p.out())), scratch;
  cpu::QuantizedActivations qa;
  for (auto _ : state) {
    cpu::quantize_activations(context(), x.data(), rows, p.in(), p.d.spec().group, qa);
    cpu::target_matmul(context(), p.d.views().draft, p.r.views().residual, qa, y.data(), scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["rows/s"] = benchmark::Counter(double(rows), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_TargetPrefillGemm(benchmark::State& state) {
  if (!cpu::prefill_available()) {
    state.SkipWithError("built without oneDNN");
    return;
  }
  const Planes& p = planes(state.range(0));
  const int64_t rows = state.range(1);
  const auto x = kc::random_activations(rows, p.in(), 3);
  std::vector<float> y(size_t(rows * p.out()));
  const cpu::ResidualPlaneView& r = p.r.views().residual;
  for (auto _ : state) {
    cpu::prefill_matmul(context(), p.d.views().draft, &r, nullptr, x.data(), rows, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["rows/s"] = benchmark::Counter(double(rows), benchmark::Counter::kIsIterationInvariantRate);
}

void args(benchmark::internal::Benchmark* b) {
  for (int64_t out : {4096, 14336})
    for (int64_t rows : {16, 32, 64, 128, 256}) b->Args({out, rows});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_TargetKernels)->Apply(args);
BENCHMARK(BM_TargetPrefillGemm)->Apply(args);

}  // namespace

BENCHMARK_MAIN();
