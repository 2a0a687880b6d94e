// draft_matmul with and without a BitDelta sign plane fused in (issue 9): GB/s of plane bytes
// read (draft codes + fp16 scales and offsets, plus sign bytes and alpha with the delta) and the
// time ratio against the plain draft of the same shape, n and thread count.
// Usage: ./build/bench/bench_cpu_delta [--benchmark_filter=...] [--benchmark_min_time=...]
// Planes are rotated through copies so the working set (>= 96 MiB) streams from RAM every call.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"

namespace {

using bitsplit::cpu::CpuContext;
using bitsplit::cpu::PlaneBuffer;
namespace quant = bitsplit::quant;

constexpr size_t kWorkingSet = size_t(96) << 20;
constexpr int kGroup = 64;

CpuContext& context(bool all_threads) {
  static CpuContext one({.threads = 1});
  static CpuContext all;
  return all_threads ? all : one;
}

struct Shape {
  int64_t out, in;
};
const Shape kShapes[] = {{4096, 4096}, {4096, 14336}};

// Copies of one 2-bit draft plane and its sign plane (random bytes: timing does not depend on them).
struct DeltaPlanes {
  int64_t out, in, sign_row_bytes;
  size_t code_bytes, scale_count, sign_bytes;
  int copies;
  std::vector<PlaneBuffer> buffers;  // per copy: codes, scales, offsets, signs, alpha
  std::vector<float> alpha;
  DeltaPlanes(CpuContext& ctx, Shape s) : out(s.out), in(s.in) {
    sign_row_bytes = quant::delta_sign_row_bytes(in);
    code_bytes = size_t(out * quant::code_row_bytes(in, kGroup, 2));
    scale_count = size_t(out * quant::groups_per_row(in, kGroup));
    sign_bytes = size_t(out * sign_row_bytes);
    const size_t total = code_bytes + 2 * scale_count * sizeof(uint16_t) + sign_bytes;
    copies = int(std::max<size_t>(1, (kWorkingSet + total - 1) / total));
    std::mt19937 rng(uint32_t(out + in));
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
      for (size_t i = 0; i < sign_bytes; ++i) p[total - sign_bytes + i] = uint8_t(rng());
    }
    alpha.assign(size_t(out), 0.01f);
  }
  size_t draft_bytes() const { return code_bytes + 2 * scale_count * sizeof(uint16_t); }
  size_t delta_bytes() const { return sign_bytes + alpha.size() * sizeof(float); }
  const uint16_t* scales(int c) const {
    return reinterpret_cast<const uint16_t*>(buffers[size_t(c)].data() + code_bytes);
  }
  bitsplit::cpu::DraftPlaneView draft(int c) const {
    return {buffers[size_t(c)].data(), scales(c), scales(c) + scale_count, out, in, kGroup, 2};
  }
  bitsplit::cpu::SignPlaneView signs(int c) const {
    return {buffers[size_t(c)].data() + draft_bytes(), alpha.data(), out, in, sign_row_bytes, true};
  }
};

// args: shape index, rows n, delta (0/1), all threads (0/1), layout (0: file-layout view, 1:
// PackedPlane, as the engine runs it; the sign plane is read in its file layout either way).
void BM_DraftDelta(benchmark::State& state) {
  const int shape = int(state.range(0));
  const int64_t n = state.range(1);
  const bool delta = state.range(2) != 0, all = state.range(3) != 0, packed = state.range(4) != 0;
  CpuContext& ctx = context(all);
  static std::unique_ptr<DeltaPlanes> set;
  static std::vector<bitsplit::cpu::PackedPlane> packs;
  static int set_shape = -1;
  if (set_shape != shape) {
    packs.clear();
    set.reset();
    set = std::make_unique<DeltaPlanes>(context(true), kShapes[shape]);
    set_shape = shape;
  }
  if (packed && packs.empty())
    for (int c = 0; c < set->copies; ++c) packs.push_back(bitsplit::cpu::PackedPlane::pack(context(true), set->draft(c)));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(size_t(n * set->in)), y(size_t(n * set->out));
  for (auto& v : x) v = nd(rng);
  bitsplit::cpu::QuantizedActivations qa;
  bitsplit::cpu::quantize_activations(ctx, x.data(), n, set->in, kGroup, qa);
  int c = 0;
  double seconds = 0;
  for (auto _ : state) {
    const bitsplit::cpu::SignPlaneView s = set->signs(c);
    const auto t0 = std::chrono::steady_clock::now();
    if (packed) bitsplit::cpu::draft_matmul(ctx, packs[size_t(c)], qa, y.data(), delta ? &s : nullptr);
    else bitsplit::cpu::draft_matmul(ctx, set->draft(c), qa, y.data(), delta ? &s : nullptr);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    benchmark::DoNotOptimize(y.data());
    if (++c == set->copies) c = 0;
  }
  const double per_call = seconds / double(state.iterations());
  const size_t bytes = set->draft_bytes() + (delta ? set->delta_bytes() : 0);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
  state.counters["GB/s"] = double(bytes) / per_call / 1e9;
  state.counters["threads"] = ctx.threads();
  // Plain runs come first for each (shape, n, threads): the delta's time relative to them.
  static std::map<std::tuple<int, int64_t, bool, bool>, double> plain;
  const auto key = std::make_tuple(shape, n, all, packed);
  if (!delta) plain[key] = per_call;
  else if (auto it = plain.find(key); it != plain.end()) state.counters["t/t_plain"] = per_call / it->second;
}
BENCHMARK(BM_DraftDelta)
    ->ArgsProduct({{0, 1}, {1, 16}, {0, 1}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(0.2);

}  // namespace

BENCHMARK_MAIN();
