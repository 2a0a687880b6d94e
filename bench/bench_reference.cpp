// Baseline numbers for the f32 reference path: a STREAM-like read bandwidth (the yardstick
// every weight-streaming kernel is compared with) and matmul_f32 at decode batch sizes.
// Usage: ./build/bench/bench_reference [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "bitsplit/cpu.h"

namespace {

// Sums a buffer much larger than the last-level cache: bytes read per second.
void BM_ReadBandwidth(benchmark::State& state) {
  const size_t n = size_t(state.range(0)) << 20 >> 2;  // MiB -> floats
  std::vector<float> buf(n, 1.0f);
  for (auto _ : state) {
    float acc[8] = {};
    for (size_t i = 0; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k) acc[k] += buf[i + k];
    benchmark::DoNotOptimize(acc);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(n * sizeof(float)));
}
BENCHMARK(BM_ReadBandwidth)->Arg(256)->Unit(benchmark::kMillisecond);

// Y[rows x out] = X[rows x in] W^T with f32 weights: bytes/s counts the weight matrix.
void BM_MatmulF32(benchmark::State& state) {
  const int64_t rows = state.range(0), in = state.range(1), out = state.range(2);
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  std::vector<float> x(static_cast<size_t>(rows * in)), w(static_cast<size_t>(in * out)), y(static_cast<size_t>(rows * out));
  for (float& v : x) v = d(rng);
  for (float& v : w) v = d(rng);
  for (auto _ : state) {
    bitsplit::cpu::matmul_f32(x, rows, in, w, out, {}, y);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.size() * sizeof(float)));
  state.counters["rows"] = double(rows);
}
BENCHMARK(BM_MatmulF32)
    ->ArgsProduct({{1, 4, 16}, {2048}, {2048}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
