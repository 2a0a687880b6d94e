// Bit-split plane kernels against memory bandwidth: a STREAM-like read (1 thread and all threads)
// and residual_matmul / draft_matmul for decode-verify batch sizes, with GB/s of plane bytes, the
// ratio to the read bandwidth, and t(n)/t(1).
// Usage: ./build/bench/bench_cpu_kernels [--benchmark_filter=...] [--benchmark_min_time=...]
// Planes are rotated through several copies so the working set is >= 3x the last-level cache:
// every call streams its plane from RAM, as a model's layers do.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"

namespace {

using bitsplit::cpu::CpuContext;
using bitsplit::cpu::PlaneBuffer;
namespace quant = bitsplit::quant;

constexpr size_t kWorkingSet = size_t(96) << 20;  // 3x a 32 MiB L3
constexpr int kGroup = 64;

CpuContext& context(bool all_threads) {
  static CpuContext one({.threads = 1});
  static CpuContext all;
  return all_threads ? all : one;
}

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

struct Shape {
  int64_t out, in;
};
const Shape kShapes[] = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {256, 256}, {256, 688}};

// Copies of one plane (random codes and scales: timing does not depend on the values).
struct PlaneSet {
  int64_t out, in;
  int bits;
  size_t code_bytes, scale_count;
  int copies;
  std::vector<PlaneBuffer> buffers;  // codes, then scales (and offsets) in each copy
  PlaneSet(CpuContext& ctx, Shape s, int bits_) : out(s.out), in(s.in), bits(bits_) {
    code_bytes = size_t(out * quant::code_row_bytes(in, kGroup, bits));
    scale_count = size_t(out * quant::groups_per_row(in, kGroup));
    const size_t bytes = plane_bytes();
    copies = int(std::max<size_t>(1, (kWorkingSet + bytes - 1) / bytes));
    std::mt19937 rng(uint32_t(out + in + bits));
    const size_t total = code_bytes + 2 * scale_count * sizeof(uint16_t);
    for (int c = 0; c < copies; ++c) {
      buffers.emplace_back(ctx, total);
      uint8_t* p = buffers.back().data();
      if (c > 0) {
        std::memcpy(p, buffers.front().data(), total);
        continue;
      }
      for (size_t i = 0; i < code_bytes; ++i) p[i] = uint8_t(rng());
      auto* sc = reinterpret_cast<uint16_t*>(p + code_bytes);
      for (size_t i = 0; i < 2 * scale_count; ++i) sc[i] = quant::fp32_to_fp16(0.01f * float(1 + rng() % 100));
    }
  }
  size_t plane_bytes() const { return code_bytes + (bits == 2 ? 2 : 1) * scale_count * sizeof(uint16_t); }
  const uint16_t* scales(int c) const { return reinterpret_cast<const uint16_t*>(buffers[size_t(c)].data() + code_bytes); }
  bitsplit::cpu::ResidualPlaneView residual(int c) const {
    return {buffers[size_t(c)].data(), scales(c), out, in, kGroup, bits};
  }
  bitsplit::cpu::DraftPlaneView draft(int c) const {
    return {buffers[size_t(c)].data(), scales(c), scales(c) + scale_count, out, in, kGroup, bits};
  }
};

// Seconds per call at n = 1 of the same (kind, shape, bits, threads, layout), for t(n)/t(1).
std::map<std::tuple<bool, int, int, bool, bool>, double>& t1_table() {
  static std::map<std::tuple<bool, int, int, bool, bool>, double> t;
  return t;
}

// args: shape index, bits, rows n, all threads (0/1), layout (0: file-layout view, 1: PackedPlane,
// as the engine runs it). Draft when bits == 2.
void BM_PlaneMatmul(benchmark::State& state) {
  const int shape = int(state.range(0)), bits = int(state.range(1));
  const int64_t n = state.range(2);
  const bool all = state.range(3) != 0, draft = bits == 2, packed = state.range(4) != 0;
  CpuContext& ctx = context(all);
  // One plane set alive at a time (each is ~96 MiB), kept while consecutive runs share it; its
  // packed copies are made when first needed.
  static std::unique_ptr<PlaneSet> set;
  static std::vector<bitsplit::cpu::PackedPlane> packs;
  static std::pair<int, int> set_key{-1, -1};
  if (set_key != std::make_pair(shape, bits)) {
    packs.clear();
    set.reset();
    set = std::make_unique<PlaneSet>(context(true), kShapes[shape], bits);
    set_key = {shape, bits};
  }
  if (packed && packs.empty()) {
    for (int c = 0; c < set->copies; ++c)
      packs.push_back(draft ? bitsplit::cpu::PackedPlane::pack(context(true), set->draft(c))
                            : bitsplit::cpu::PackedPlane::pack(context(true), set->residual(c)));
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(size_t(n * set->in)), y(size_t(n * set->out));
  for (auto& v : x) v = nd(rng);
  bitsplit::cpu::QuantizedActivations qa;
  bitsplit::cpu::quantize_activations(ctx, x.data(), n, set->in, kGroup, qa);
  int c = 0;
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    if (packed && draft) bitsplit::cpu::draft_matmul(ctx, packs[size_t(c)], qa, y.data());
    else if (packed) bitsplit::cpu::residual_matmul(ctx, packs[size_t(c)], qa, y.data());
    else if (draft) bitsplit::cpu::draft_matmul(ctx, set->draft(c), qa, y.data());
    else bitsplit::cpu::residual_matmul(ctx, set->residual(c), qa, y.data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    benchmark::DoNotOptimize(y.data());
    if (++c == set->copies) c = 0;
  }
  const double per_call = seconds / double(state.iterations());
  const double gbps = double(set->plane_bytes()) / per_call / 1e9;
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(set->plane_bytes()));
  state.counters["GB/s"] = gbps;
  state.counters["of_stream"] = gbps / stream_read_gbps(all);
  state.counters["threads"] = ctx.threads();
  auto key = std::make_tuple(draft, shape, bits, all, packed);
  if (n == 1) t1_table()[key] = per_call;
  if (auto it = t1_table().find(key); it != t1_table().end()) state.counters["t_n/t_1"] = per_call / it->second;
}

void plane_args(benchmark::internal::Benchmark* b) {
  for (int all : {0, 1})
    for (int shape = 0; shape < 5; ++shape)
      for (int bits : {8, 6, 2})
        for (int packed : {0, 1})
          for (int n : {1, 2, 4, 8, 16}) b->Args({shape, bits, n, all, packed});
}
BENCHMARK(BM_PlaneMatmul)->Apply(plane_args)->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.2);

// The Q8_0 baseline (llama.cpp's format, issue 7) on the same shapes: compare its GB/s of weight
// bytes with BM_PlaneMatmul's 8-bit residual. args: shape index, rows n, all threads (0/1).
void BM_Q8_0Matmul(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const int64_t n = state.range(1);
  const bool all = state.range(2) != 0;
  CpuContext& ctx = context(all);
  const size_t bytes = size_t(s.out * s.in / 32 * 34);
  const int copies = int(std::max<size_t>(1, (kWorkingSet + bytes - 1) / bytes));
  static std::vector<PlaneBuffer> w;  // kept while consecutive runs share the shape
  static int64_t w_shape = -1;
  if (w_shape != state.range(0)) {
    w.clear();
    for (int c = 0; c < copies; ++c) {
      w.emplace_back(context(true), bytes);
      for (size_t b = 0; b < bytes; b += 34) {  // d = 0.01 (finite timing), codes 0x5A
        const uint16_t d = quant::fp32_to_fp16(0.01f);
        std::memcpy(w.back().data() + b, &d, 2);
        std::memset(w.back().data() + b + 2, 0x5A, 32);
      }
    }
    w_shape = state.range(0);
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(size_t(n * s.in)), y(size_t(n * s.out));
  for (auto& v : x) v = nd(rng);
  bitsplit::cpu::Q8_0Activations qa;
  bitsplit::cpu::quantize_activations_q8_0(ctx, x.data(), n, s.in, qa);
  int c = 0;
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    bitsplit::cpu::q8_0_matmul(ctx, {w[size_t(c)].data(), s.out, s.in}, qa, y.data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    benchmark::DoNotOptimize(y.data());
    if (++c == copies) c = 0;
  }
  const double gbps = double(bytes) / (seconds / double(state.iterations())) / 1e9;
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
  state.counters["GB/s"] = gbps;
  state.counters["of_stream"] = gbps / stream_read_gbps(all);
  state.counters["threads"] = ctx.threads();
}
BENCHMARK(BM_Q8_0Matmul)
    ->ArgsProduct({{0, 1}, {1, 16}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(0.2);

// The per-call activation quantisation (not included above: one X feeds several projections).
void BM_QuantizeActivations(benchmark::State& state) {
  const int64_t n = state.range(0), in = state.range(1);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(size_t(n * in));
  for (auto& v : x) v = nd(rng);
  bitsplit::cpu::QuantizedActivations qa;
  for (auto _ : state) bitsplit::cpu::quantize_activations(context(false), x.data(), n, in, kGroup, qa);
  state.SetBytesProcessed(int64_t(state.iterations()) * n * in * 4);
}
BENCHMARK(BM_QuantizeActivations)->Args({1, 4096})->Args({16, 4096})->Args({16, 14336})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
