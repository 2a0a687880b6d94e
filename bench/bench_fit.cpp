// The bit-split fit (quant::split_row), the part of `bitsplit convert` that costs the most:
//
//   bench_fit [google-benchmark flags]        speed per tier and residual width, as MB/s of f32
//                                             weights; rows from BITSPLIT_FIT_MODEL's first
//                                             projection when set, else synthetic rows
//   bench_fit --error MODEL [--every N]       the fit's relative squared weight error over every
//                                             projection of MODEL (every Nth row, default 8):
//                                             D and D + R for R8 and R6 — what a change to the
//                                             fit must not lose (docs/QUALITY.md)
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bitsplit/quant.h"
#include "bitsplit/split_format.h"
#include "bitsplit/weights.h"

namespace {

using namespace bitsplit;

struct RowPlanes {
  std::vector<uint8_t> dc, rc;
  std::vector<uint16_t> ds, doff, rs;
  RowPlanes(int64_t in, const quant::SplitParams& p)
      : dc(size_t(quant::code_row_bytes(in, p.group, p.draft_bits))),
        rc(size_t(quant::code_row_bytes(in, p.group, 8))),
        ds(size_t(quant::groups_per_row(in, p.group))),
        doff(ds.size()),
        rs(ds.size()) {}
  quant::DraftRow draft() { return {dc.data(), ds.data(), doff.data()}; }
  quant::ResidualRow resid() { return {rc.data(), rs.data()}; }
};

// Rows to fit: the first projection of BITSPLIT_FIT_MODEL (up to 256 rows), or synthetic rows
// like trained weights (Gaussian, a few large outliers).
struct Rows {
  int64_t rows = 0, cols = 0;
  std::vector<float> w;
  std::string what;
};

const Rows& bench_rows() {
  static const Rows rows = [] {
    Rows r;
    if (const char* path = std::getenv("BITSPLIT_FIT_MODEL")) {
      auto source = open_weights(path);
      if (!source) {
        std::fprintf(stderr, "bench_fit: %s\n", source.status().message().c_str());
        std::exit(1);
      }
      for (const auto& t : (*source)->tensors()) {
        if (!is_split_projection(t.name) || t.dims.size() != 2) continue;
        auto w = (*source)->load_f32(t);
        if (!w) continue;
        r.cols = t.dims[0];
        r.rows = std::min<int64_t>(t.dims[1], 256);
        r.w.assign(w->begin(), w->begin() + r.rows * r.cols);
        r.what = t.name;
        return r;
      }
    }
    r.rows = 256;
    r.cols = 2048;
    r.w.resize(size_t(r.rows * r.cols));
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& v : r.w) v = normal(rng);
    for (size_t i = 0; i < r.w.size(); i += 997) r.w[i] *= 12.0f;
    r.what = "synthetic";
    return r;
  }();
  return rows;
}

void BM_SplitRow(benchmark::State& state, quant::FitTier tier, int residual_bits) {
  if (!quant::fit_tier_supported(tier)) {
    state.SkipWithError("this CPU lacks the tier");
    return;
  }
  const Rows& rows = bench_rows();
  quant::SplitParams p;
  p.residual_bits = residual_bits;
  RowPlanes planes(rows.cols, p);
  for (auto _ : state) {
    for (int64_t r = 0; r < rows.rows; ++r)
      quant::split_row(tier, rows.w.data() + r * rows.cols, nullptr, rows.cols, p, planes.draft(), planes.resid());
    benchmark::DoNotOptimize(planes.dc.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * rows.rows * rows.cols * 4);
  state.SetLabel(rows.what);
}

BENCHMARK_CAPTURE(BM_SplitRow, R8_avx512, quant::FitTier::kAvx512, 8)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SplitRow, R6_avx512, quant::FitTier::kAvx512, 6)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SplitRow, R8_avx2, quant::FitTier::kAvx2, 8)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SplitRow, R6_avx2, quant::FitTier::kAvx2, 6)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SplitRow, R8_reference, quant::FitTier::kReference, 8)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SplitRow, R6_reference, quant::FitTier::kReference, 6)->Unit(benchmark::kMillisecond);

// Sum over rows of |w - D|^2 and |w - (D + R)|^2, and |w|^2.
struct ErrorSums {
  double w2 = 0.0, d = 0.0, dr = 0.0;
};

void add_row_error(const float* w, int64_t in, const quant::SplitParams& p, ErrorSums& s) {
  RowPlanes planes(in, p);
  quant::split_row(w, nullptr, in, p, planes.draft(), planes.resid());
  std::vector<float> d(size_t(quant::padded_width(in, p.group))), r(d.size());
  quant::dequantize_draft_row_ref(planes.dc.data(), planes.ds.data(), planes.doff.data(), in, p.group, p.draft_bits,
                                  d.data());
  quant::dequantize_residual_row_ref(planes.rc.data(), planes.rs.data(), in, p.group, p.residual_bits, r.data());
  for (int64_t i = 0; i < in; ++i) {
    const double x = w[i], e1 = x - d[size_t(i)], e2 = e1 - r[size_t(i)];
    s.w2 += x * x;
    s.d += e1 * e1;
    s.dr += e2 * e2;
  }
}

int weight_error(const std::string& path, int every) {
  auto source = open_weights(path);
  if (!source) {
    std::fprintf(stderr, "bench_fit: %s\n", source.status().message().c_str());
    return 1;
  }
  ErrorSums r8, r6;
  int64_t rows = 0;
  for (const auto& t : (*source)->tensors()) {
    if (!is_split_projection(t.name) || t.dims.size() != 2) continue;
    auto w = (*source)->load_f32(t);
    if (!w) {
      std::fprintf(stderr, "bench_fit: %s\n", w.status().message().c_str());
      return 1;
    }
    const int64_t in = t.dims[0];
    for (int64_t row = 0; row < t.dims[1]; row += every) {
      quant::SplitParams p;
      add_row_error(w->data() + row * in, in, p, r8);
      p.residual_bits = 6;
      add_row_error(w->data() + row * in, in, p, r6);
      ++rows;
    }
  }
  std::printf("%s: %lld rows (every %d), relative squared weight error\n", path.c_str(), (long long)rows, every);
  std::printf("  D (R8 fit) %.5f   D + R8 %.4e\n", r8.d / r8.w2, r8.dr / r8.w2);
  std::printf("  D (R6 fit) %.5f   D + R6 %.4e\n", r6.d / r6.w2, r6.dr / r6.w2);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--error") == 0) {
    const int every = argc >= 5 && std::strcmp(argv[3], "--every") == 0 ? std::max(1, std::atoi(argv[4])) : 8;
    return weight_error(argv[2], every);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
