// Prompt prefill: the target linear layer (D + R8) for n rows through the int8 plane kernels
// (16-row tiles) against dequantised tiles + oneDNN sgemm, to find the n where sgemm wins.
// Usage: ./build/bench/bench_prefill [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"

namespace {

using namespace bitsplit;
constexpr int kGroup = 64;

struct Planes {
  int64_t out, in;
  std::vector<uint8_t> dcodes, rcodes;
  std::vector<uint16_t> dscales, doffsets, rscales;
  Planes(int64_t o, int64_t i) : out(o), in(i) {
    std::mt19937 rng(7);
    const int64_t groups = quant::groups_per_row(in, kGroup);
    dcodes.resize(size_t(out * quant::code_row_bytes(in, kGroup, 2)));
    rcodes.resize(size_t(out * quant::code_row_bytes(in, kGroup, 8)));
    for (auto& c : dcodes) c = uint8_t(rng());
    for (auto& c : rcodes) c = uint8_t(rng());
    dscales.assign(size_t(out * groups), quant::fp32_to_fp16(0.01f));
    doffsets.assign(size_t(out * groups), quant::fp32_to_fp16(-0.015f));
    rscales.assign(size_t(out * groups), quant::fp32_to_fp16(0.0001f));
  }
  cpu::DraftPlaneView draft() const { return {dcodes.data(), dscales.data(), doffsets.data(), out, in, kGroup, 2}; }
  cpu::ResidualPlaneView residual() const { return {rcodes.data(), rscales.data(), out, in, kGroup, 8}; }
};

const Planes& planes(int64_t out) {
  static Planes a(4096, 4096), b(14336, 4096);
  return out == 4096 ? a : b;
}

std::vector<float> activations(int64_t rows, int64_t in) {
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * in));
  for (auto& v : x) v = n(rng);
  return x;
}

cpu::CpuContext& context() {
  static cpu::CpuContext ctx;
  return ctx;
}

// args: out, rows
void BM_TargetKernels(benchmark::State& state) {
  const Planes& p = planes(state.range(0));
  const int64_t rows = state.range(1);
  const auto x = activations(rows, p.in);
  std::vector<float> y(size_t(rows * p.out)), scratch;
  cpu::QuantizedActivations qa;
  for (auto _ : state) {
    cpu::quantize_activations(context(), x.data(), rows, p.in, kGroup, qa);
    cpu::target_matmul(context(), p.draft(), p.residual(), qa, y.data(), scratch);
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
  const auto x = activations(rows, p.in);
  std::vector<float> y(size_t(rows * p.out));
  const cpu::ResidualPlaneView r = p.residual();
  for (auto _ : state) {
    cpu::prefill_matmul(context(), p.draft(), &r, nullptr, x.data(), rows, y.data());
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
