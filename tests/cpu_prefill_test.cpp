// Prompt prefill through oneDNN: the product of the dequantised planes (D + R + α⊙S) with f32
// activations, independent of the batch a row comes in. Skips without oneDNN.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"

namespace bitsplit::cpu {
namespace {

struct Planes {
  int64_t out = 37, in = 200;
  int group = 64;
  std::vector<uint8_t> dcodes, rcodes, signs;
  std::vector<uint16_t> dscales, doffsets, rscales;
  std::vector<float> alpha;
  Planes() {
    std::mt19937 rng(11);
    const int64_t groups = quant::groups_per_row(in, group);
    dcodes.resize(size_t(out * quant::code_row_bytes(in, group, 2)));
    rcodes.resize(size_t(out * quant::code_row_bytes(in, group, 8)));
    signs.resize(size_t(out * quant::delta_sign_row_bytes(in)));
    for (auto* v : {&dcodes, &rcodes, &signs})
      for (auto& c : *v) c = uint8_t(rng());
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (int64_t k = 0; k < out * groups; ++k) {
      dscales.push_back(quant::fp32_to_fp16(0.01f * u(rng)));
      doffsets.push_back(quant::fp32_to_fp16(-0.015f * u(rng)));
      rscales.push_back(quant::fp32_to_fp16(0.0001f * u(rng)));
    }
    for (int64_t o = 0; o < out; ++o) alpha.push_back(0.002f * u(rng));
  }
  DraftPlaneView d() const { return {dcodes.data(), dscales.data(), doffsets.data(), out, in, group, 2}; }
  ResidualPlaneView r() const { return {rcodes.data(), rscales.data(), out, in, group, 8}; }
  SignPlaneView s() const { return {signs.data(), alpha.data(), out, in, quant::delta_sign_row_bytes(in), true}; }
  // W[o][i] in double.
  double w(int64_t o, int64_t i) const {
    std::vector<float> dr(static_cast<size_t>(in)), rr(static_cast<size_t>(in));
    const int64_t groups = quant::groups_per_row(in, group);
    quant::dequantize_draft_row_ref(dcodes.data() + o * quant::code_row_bytes(in, group, 2), dscales.data() + o * groups,
                                    doffsets.data() + o * groups, in, group, 2, dr.data());
    quant::dequantize_residual_row_ref(rcodes.data() + o * quant::code_row_bytes(in, group, 8),
                                       rscales.data() + o * groups, in, group, 8, rr.data());
    const bool neg = (signs[size_t(o * quant::delta_sign_row_bytes(in) + i / 8)] >> (i % 8)) & 1;
    return double(dr[size_t(i)]) + rr[size_t(i)] + (neg ? -alpha[size_t(o)] : alpha[size_t(o)]);
  }
};

TEST(Prefill, MatchesTheDequantisedProductAndIsBatchInvariant) {
  if (!prefill_available()) GTEST_SKIP() << "built without oneDNN";
  Planes p;
  CpuContext ctx;
  const int64_t rows = 70;  // two sgemm blocks, the second padded
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * p.in));
  for (auto& v : x) v = n(rng);
  std::vector<float> y(size_t(rows * p.out), NAN);
  const ResidualPlaneView r = p.r();
  const SignPlaneView s = p.s();
  ASSERT_TRUE(prefill_matmul(ctx, p.d(), &r, &s, x.data(), rows, y.data()));
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
    ASSERT_TRUE(prefill_matmul(ctx, p.d(), &r, &s, x.data(), sub, ys.data()));
    for (int64_t k = 0; k < sub * p.out; ++k) ASSERT_EQ(ys[size_t(k)], y[size_t(k)]) << "batch of " << sub;
  }
  // D alone (no residual, no delta) is a different product.
  std::vector<float> yd(size_t(rows * p.out));
  ASSERT_TRUE(prefill_matmul(ctx, p.d(), nullptr, nullptr, x.data(), rows, yd.data()));
  EXPECT_NE(yd, y);
}

}  // namespace
}  // namespace bitsplit::cpu
