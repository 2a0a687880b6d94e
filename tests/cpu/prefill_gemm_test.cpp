// Prompt prefill through oneDNN: the product of the dequantised planes (D + R + α⊙S) with f32
// activations, independent of the batch a row comes in. Skips without oneDNN.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"
#include "kernel_cases.h"

namespace bitsplit::cpu {
namespace {

using namespace testing;  // bitsplit::cpu::testing

// D + R + α⊙S of one 37 x 200 projection (random codes; sign rows with garbage past `in`), and
// W[o][i] in double.
struct Planes {
  const CaseWeights d{KernelCase{.signs = Signs::kAlphaPerRow, .out = 37, .in = 200, .seed = 11}};
  const CaseWeights r{KernelCase{.kernel = Kernel::kResidual, .bits = 8, .out = 37, .in = 200, .seed = 12}};
  const int64_t out = 37, in = 200;
  std::vector<double> weights;
  Planes() {
    for (int64_t o = 0; o < out; ++o) {
      const std::vector<float> dr = d.dequantized_row(o), rr = r.dequantized_row(o);
      for (int64_t i = 0; i < in; ++i) weights.push_back(double(dr[size_t(i)]) + rr[size_t(i)] + d.sign(o, i) * d.alpha_of(o));
    }
  }
  double w(int64_t o, int64_t i) const { return weights[size_t(o * in + i)]; }
};

TEST(Prefill, MatchesTheDequantisedProductAndIsBatchInvariant) {
  if (!prefill_available()) GTEST_SKIP() << "built without oneDNN";
  Planes p;
  CpuContext ctx;
  const int64_t rows = 70;  // two sgemm blocks, the second padded
  const std::vector<float> x = random_activations(rows, p.in, 5);
  std::vector<float> y(size_t(rows * p.out), NAN);
  const ResidualPlaneView& r = p.r.views().residual;
  const SignPlaneView& s = p.d.views().signs;
  ASSERT_TRUE(prefill_matmul(ctx, p.d.views().draft, &r, &s, x.data(), rows, y.data()));
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t o = 0; o < p.out; ++o) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < p.in; ++i) {
        ref += p.w(o, i) * x[size_t(row * p.in + i)];
        mag += std::fabs(p.w(o, i) * x[size_t(row * p.in + i)]);
      }
      ASSERT_NEAR(y[size_t(row * p.out + o)], ref, 1e-5 * mag + 1e-7) << row << " " << o;
    }
  }
  // The rows of a smaller batch (and a row alone) come out bitwise the same.
  for (int64_t sub : {1, 5, 64}) {
    std::vector<float> ys(size_t(sub * p.out));
    ASSERT_TRUE(prefill_matmul(ctx, p.d.views().draft, &r, &s, x.data(), sub, ys.data()));
    for (int64_t k = 0; k < sub * p.out; ++k) ASSERT_EQ(ys[size_t(k)], y[size_t(k)]) << "batch of " << sub;
  }
  // D alone (no residual, no delta) is a different product.
  std::vector<float> yd(size_t(rows * p.out));
  ASSERT_TRUE(prefill_matmul(ctx, p.d.views().draft, nullptr, nullptr, x.data(), rows, yd.data()));
  EXPECT_NE(yd, y);
}

}  // namespace
}  // namespace bitsplit::cpu
