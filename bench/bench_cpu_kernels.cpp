// Bit-split plane kernels against memory bandwidth: a STREAM-like read (1 thread and all threads)
// and residual_matmul / draft_matmul for decode-verify batch sizes, with GB/s of plane bytes, the
// ratio to the read bandwidth, and t(n)/t(1).
// Usage: ./build/bench/bench_cpu_kernels [--benchmark_filter=...] [--benchmark_min_time=...]
// Shapes and planes are tests/cpu/kernel_cases.h's bench cases, rotated through several copies so the
// working set is >= 3x the last-level cache: every call streams its plane from RAM.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

#include "bench_planes.h"
#include "bitsplit/cpu.h"
#include "kernel_cases.h"

namespace {

using bitsplit::bench::context;
using bitsplit::bench::plane_copies;
using bitsplit::bench::PlaneCopies;
using bitsplit::cpu::CpuContext;
using bitsplit::cpu::PlaneBuffer;
namespace kc = bitsplit::cpu::testing;

// Sum of 64-bit words over a 1 GiB buffer, split over the context's workers like the kernels.
double stream_read_gbps(bool all_threads) {
  static std::map<bool, double> cache;
  if (auto it = cache.find(all_threads); it != cache.end()) return it->second;
  CpuContext& ctx = context(all_threads);
  const size_t bytes = size_t(1) << 30;
  PlaneBuffer buf(ctx, bytes);
  std::memset(buf.data(), 1, bytes);
  const int64_t words = int64_t(bytes / 8);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<uint64_t> sums(64, 0);
    const auto t0 = std::chrono::steady_clock::now();
    ctx.run_slices(words, 1 << 16, [&](int64_t b, int64_t e) {
      const uint64_t* p = reinterpret_cast<const uint64_t*>(buf.data());
      uint64_t a[8] = {};
      for (int64_t i = b; i + 8 <= e; i += 8)
        for (int k = 0; k < 8; ++k) a[k] += p[i + k];
      sums[size_t(b * 63 / words)] = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    benchmark::DoNotOptimize(sums.data());
    best = std::max(best, double(bytes) / s / 1e9);
  }
  return cache[all_threads] = best;
}

void BM_StreamRead(benchmark::State& state) {
  const bool all = state.range(0) != 0;
  double gbps = 0;
  for (auto _ : state) gbps = stream_read_gbps(all);
  state.counters["GB/s"] = gbps;
  state.counters["threads"] = context(all).threads();
}
BENCHMARK(BM_StreamRead)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond);

constexpr int kShapes = int(std::size(kc::kModelShapes));

// GB/s of `bytes` read per call, and its ratio to the read bandwidth of the same thread count.
void report_bandwidth(benchmark::State& state, size_t bytes, double per_call, bool all) {
  const double gbps = double(bytes) / per_call / 1e9;
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
  state.counters["GB/s"] = gbps;
  state.counters["of_stream"] = gbps / stream_read_gbps(all);
  state.counters["threads"] = context(all).threads();
}

// Seconds per call at n = 1 of the same (kind, shape, bits, threads, layout), for t(n)/t(1).
std::map<std::tuple<bool, int, int, bool, bool>, double>& t1_table() {
  static std::map<std::tuple<bool, int, int, bool, bool>, double> t;
  return t;
}

// args: shape index, bits, rows n, all threads (0/1), layout (0: file-layout view, 1: PackedPlane,
// as the engine runs it). Draft when bits is 2, 3 or 4 (residual: 6 or 8).
void BM_PlaneMatmul(benchmark::State& state) {
  const int shape = int(state.range(0)), bits = int(state.range(1));
  const int64_t n = state.range(2);
  const bool all = state.range(3) != 0, draft = bits <= 4, packed = state.range(4) != 0;
  CpuContext& ctx = context(all);
  PlaneCopies& set = plane_copies(kc::bench_case(draft ? kc::Kernel::kDraft : kc::Kernel::kResidual, bits,
                                                 kc::Signs::kNone, kc::kModelShapes[shape]));
  if (packed) set.pack_all(context(true));
  const double per_call = set.time_calls(state, ctx, packed, set.activations(ctx, n));
  report_bandwidth(state, set.source.plane_bytes(), per_call, all);
  auto key = std::make_tuple(draft, shape, bits, all, packed);
  if (n == 1) t1_table()[key] = per_call;
  if (auto it = t1_table().find(key); it != t1_table().end()) state.counters["t_n/t_1"] = per_call / it->second;
}

void plane_args(benchmark::internal::Benchmark* b) {
  for (int all : {0, 1})
    for (int shape = 0; shape < kShapes; ++shape)
      for (int bits : {8, 6, 4, 3, 2})
        for (int packed : {0, 1})
          for (int n : {1, 2, 4, 8, 16}) b->Args({shape, bits, n, all, packed});
}
BENCHMARK(BM_PlaneMatmul)->Apply(plane_args)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.2);

// Prompt-sized batches on the packed planes, all threads: where the int8 arithmetic, not the
// read, sets the time (compare BITSPLIT_ISA=avx512 with the AMX tier where the CPU has it).
void prefill_args(benchmark::internal::Benchmark* b) {
  for (int shape : {0, 1, 2, 5, 6})
    for (int bits : {8, 6, 2})
      for (int n : {16, 32, 64, 256}) b->Args({shape, bits, n, 1, 1});
}
BENCHMARK(BM_PlaneMatmul)->Name("BM_PlaneMatmulPrompt")->Apply(prefill_args)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.2);

// The Q8_0 baseline (llama.cpp's format, issue 7) on the same shapes: compare its GB/s of weight
// bytes with BM_PlaneMatmul's 8-bit residual. args: shape index, rows n, all threads (0/1).
void BM_Q8_0Matmul(benchmark::State& state) {
  const int shape = int(state.range(0));
  const int64_t n = state.range(1);
  const bool all = state.range(2) != 0;
  CpuContext& ctx = context(all);
  PlaneCopies& set = plane_copies(kc::bench_case(kc::Kernel::kQ8_0, 8, kc::Signs::kNone, kc::kModelShapes[shape]));
  const double per_call = set.time_calls(state, ctx, false, set.activations(ctx, n));
  report_bandwidth(state, set.source.plane_bytes(), per_call, all);
}
BENCHMARK(BM_Q8_0Matmul)
    ->ArgsProduct({{0, 1}, {1, 16}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(0.2);

// The per-call activation quantisation (not included above: one X feeds several projections).
void BM_QuantizeActivations(benchmark::State& state) {
  const int64_t n = state.range(0), in = state.range(1);
  const auto x = kc::random_activations(n, in, 7);
  bitsplit::cpu::QuantizedActivations qa;
  for (auto _ : state) bitsplit::cpu::quantize_activations(context(false), x.data(), n, in, 64, qa);
  state.SetBytesProcessed(int64_t(state.iterations()) * n * in * 4);
}
BENCHMARK(BM_QuantizeActivations)->Args({1, 4096})->Args({16, 4096})->Args({16, 14336})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
