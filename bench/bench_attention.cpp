// The attention block of a prompt (cpu::attention_block) on one thread: 16 (row, head) pairs of
// one kv head over kv_len cached slots, as engine/model/forward.cpp runs it in prefill — the rows are
// consecutive positions (`group` heads each) at the end of the cache, so each sees all but its
// later neighbours' slots. Keys and values are rows `kv_heads * head_dim` floats apart, the
// cache's layout. Reports the multiply-adds of Q·K and P·V per second (FLOP = 2 per MAC).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "bitsplit/cpu.h"

namespace {

void BM_AttentionBlock(benchmark::State& state) {
  const int64_t head_dim = state.range(0), kv_heads = state.range(1), kv_len = state.range(2), group = state.range(3);
  const int nq = bitsplit::cpu::kAttentionBlock;
  const int64_t stride = kv_heads * head_dim;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(size_t(kv_len * stride)), v(k.size()), q(size_t(nq * head_dim)), scores(size_t(nq * kv_len)),
      out(size_t(nq * head_dim));
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (float& x : q) x = normal(rng);
  std::vector<uint8_t> vis(size_t(nq * kv_len), 0);
  int64_t seen = 0;
  const float* qs[nq];
  const uint8_t* vs[nq];
  float* ss[nq];
  float* os[nq];
  for (int r = 0; r < nq; ++r) {
    const int64_t last = kv_len - 1 - (nq - 1 - r) / group;  // the row's position
    for (int64_t j = 0; j <= last; ++j) vis[size_t(r * kv_len + j)] = 1;
    seen += last + 1;
    qs[r] = q.data() + r * head_dim;
    vs[r] = vis.data() + r * kv_len;
    ss[r] = scores.data() + r * kv_len;
    os[r] = out.data() + r * head_dim;
  }
  for (auto _ : state) {
    bitsplit::cpu::attention_block(nq, qs, vs, k.data(), v.data(), stride, head_dim, kv_len, 0.088f, 0.0f, ss, os);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(double(4 * seen * head_dim) * double(state.iterations()) * 1e-9,
                                                 benchmark::Counter::kIsRate);
}

// head_dim, kv heads, kv_len, heads per kv head: Qwen2.5-1.5B (128, 2, .., 6), SmolLM2-135M (64, 3, .., 3).
BENCHMARK(BM_AttentionBlock)->Args({128, 2, 512, 6})->Args({128, 2, 2048, 6})->Args({64, 3, 512, 3})->Args({64, 3, 2048, 3})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
