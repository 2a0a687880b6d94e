// draft_matmul with and without a BitDelta sign plane fused in (issue 9): GB/s of plane bytes
// read (draft codes + fp16 scales and offsets, plus sign bytes and alpha with the delta) and the
// time ratio against the plain draft of the same shape, n and thread count.
// Usage: ./build/bench/bench_cpu_delta [--benchmark_filter=...] [--benchmark_min_time=...]
// Shapes and planes are tests/cpu/kernel_cases.h's bench cases (the first two model shapes), rotated
// through copies so the working set (>= 96 MiB) streams from RAM every call.
#include <benchmark/benchmark.h>

#include <map>
#include <tuple>

#include "bench_planes.h"
#include "kernel_cases.h"

namespace {

using bitsplit::bench::context;
using bitsplit::bench::plane_copies;
using bitsplit::bench::PlaneCopies;
namespace kc = bitsplit::cpu::testing;

// args: shape index, rows n, delta (0/1), all threads (0/1), layout (0: file-layout view, 1:
// PackedPlane, as the engine runs it; the sign plane is read in its file layout either way).
// One case holds the draft and its sign plane; without the delta the same draft runs alone.
void BM_DraftDelta(benchmark::State& state) {
  const int shape = int(state.range(0));
  const int64_t n = state.range(1);
  const bool delta = state.range(2) != 0, all = state.range(3) != 0, packed = state.range(4) != 0;
  bitsplit::cpu::CpuContext& ctx = context(all);
  PlaneCopies& set =
      plane_copies(kc::bench_case(kc::Kernel::kDraft, 2, kc::Signs::kAlphaPerRow, kc::kModelShapes[shape]));
  if (packed) set.pack_all(context(true));
  const double per_call = set.time_calls(state, ctx, packed, set.activations(ctx, n), !delta);
  const size_t bytes = set.source.plane_bytes() + (delta ? set.source.sign_bytes() : 0);
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
