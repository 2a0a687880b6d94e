// The draft fitted with error feedback (quant/gptq.cpp): what it buys on correlated inputs, that
// it changes nothing where inputs are uncorrelated, where it is not used, and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "bitsplit/planes.h"
#include "bitsplit/quant.h"

namespace bitsplit {
namespace {

struct Problem {
  int64_t rows = 48, cols = 256;
  std::vector<float> w, cov, diag;
};

// Heavy-tailed weights and inputs whose columns are strongly correlated (a shared factor and a
// moving average of neighbours) with uneven scales, as activations are; cov = E[x x^T].
Problem correlated_problem(bool correlated) {
  Problem p;
  std::mt19937 rng(21);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::chi_squared_distribution<float> c(4.0f);
  p.w.resize(size_t(p.rows * p.cols));
  for (auto& v : p.w) v = 0.02f * g(rng) / std::sqrt(c(rng) / 4.0f);
  std::vector<float> scale(size_t(p.cols));
  for (auto& s : scale) s = 0.2f + 2.0f * float(rng() % 100) / 100.0f;
  const int n = 4096;
  std::vector<double> acc(size_t(p.cols * p.cols), 0.0);
  std::vector<float> z(size_t(p.cols)), x(size_t(p.cols));
  for (int s = 0; s < n; ++s) {
    const float common = g(rng);
    for (auto& v : z) v = g(rng);
    for (int64_t i = 0; i < p.cols; ++i) {
      const float mixed = correlated ? z[size_t(i)] + 0.9f * z[size_t((i + 1) % p.cols)] + 1.5f * common : z[size_t(i)];
      x[size_t(i)] = scale[size_t(i)] * mixed;
    }
    for (int64_t i = 0; i < p.cols; ++i)
      for (int64_t j = 0; j < p.cols; ++j) acc[size_t(i * p.cols + j)] += double(x[size_t(i)]) * x[size_t(j)];
  }
  p.cov.resize(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) p.cov[i] = float(acc[i] / n);
  if (!correlated) {  // exactly diagonal: the sampled off-diagonal noise removed
    for (int64_t i = 0; i < p.cols; ++i)
      for (int64_t j = 0; j < p.cols; ++j)
        if (i != j) p.cov[size_t(i * p.cols + j)] = 0.0f;
  }
  p.diag.resize(size_t(p.cols));
  for (int64_t i = 0; i < p.cols; ++i) p.diag[size_t(i)] = p.cov[size_t(i * p.cols + i)];
  return p;
}

// E ||(W - V) x||^2 over the inputs: sum over rows of e^T H e, e the row's error.
double output_error(const Problem& p, const std::vector<float>& v) {
  double total = 0.0;
  std::vector<double> e(size_t(p.cols));
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t i = 0; i < p.cols; ++i) e[size_t(i)] = double(p.w[size_t(r * p.cols + i)]) - v[size_t(r * p.cols + i)];
    for (int64_t i = 0; i < p.cols; ++i) {
      double hi = 0.0;
      for (int64_t j = 0; j < p.cols; ++j) hi += double(p.cov[size_t(i * p.cols + j)]) * e[size_t(j)];
      total += e[size_t(i)] * hi;
    }
  }
  return total;
}

TEST(ErrorFeedback, CutsTheDraftsOutputErrorAndKeepsTheTarget) {
  const Problem p = correlated_problem(true);
  for (int draft_bits : {2, 3, 4}) {
    quant::SplitParams params;
    params.draft_bits = draft_bits;
    params.residual_bits = 8;
    params.feedback_damping = 0.01;  // the damping this bound was set with
    const SplitProjection plain = split_projection(p.w, p.rows, p.cols, params, p.diag.data());
    auto fed = fit_projection(p.w, p.rows, p.cols, params, nullptr, p.cov.data());
    ASSERT_TRUE(fed.is_ok()) << fed.status().message();
    const double plain_d = output_error(p, plain.dequantize(false)), fed_d = output_error(p, fed->dequantize(false));
    EXPECT_LT(fed_d, 0.75 * plain_d) << draft_bits << "-bit draft: feedback " << fed_d << ", ordinary " << plain_d;
    // The default damping (10 %, chosen on real models: docs/QUALITY.md) damps the feedback more:
    // less of this synthetic problem's gain, still at least a fifth off.
    quant::SplitParams damped = params;
    damped.feedback_damping = quant::SplitParams{}.feedback_damping;
    auto fed_damped = fit_projection(p.w, p.rows, p.cols, damped, nullptr, p.cov.data());
    ASSERT_TRUE(fed_damped.is_ok());
    const double damped_d = output_error(p, fed_damped->dequantize(false));
    EXPECT_LT(damped_d, 0.8 * plain_d) << draft_bits << "-bit draft, default damping: " << damped_d;
    EXPECT_GT(damped_d, fed_d) << draft_bits << "-bit draft: the damping does not reach the fit";
    // D + R still stands for W, as well as the ordinary fit's planes do.
    const double plain_t = output_error(p, plain.dequantize(true)), fed_t = output_error(p, fed->dequantize(true));
    EXPECT_LT(fed_t, 1.25 * plain_t) << draft_bits << "-bit draft: D + R8 feedback " << fed_t << ", ordinary " << plain_t;
    EXPECT_LT(fed_t, 1e-3 * fed_d);
  }
}

TEST(ErrorFeedback, UncorrelatedInputsLeaveEachGroupsGridAsTheOrdinaryFitMakesIt) {
  const Problem p = correlated_problem(false);
  quant::SplitParams params;
  params.residual_bits = 8;
  const SplitProjection plain = split_projection(p.w, p.rows, p.cols, params, p.diag.data());
  auto fed = split_projection_gptq(p.w, p.rows, p.cols, params, nullptr, p.cov.data());
  ASSERT_TRUE(fed.is_ok()) << fed.status().message();
  // A diagonal H feeds nothing forward: every group is fitted to its own original weights.
  EXPECT_EQ(fed->draft_scales, plain.draft_scales);
  EXPECT_EQ(fed->draft_offsets, plain.draft_offsets);
}

TEST(ErrorFeedback, SixBitResidualKeepsTheOrdinaryFit) {
  const Problem p = correlated_problem(true);
  quant::SplitParams params;
  params.residual_bits = 6;
  EXPECT_FALSE(quant::uses_error_feedback(params));
  const SplitProjection plain = split_projection(p.w, p.rows, p.cols, params, p.diag.data());
  auto fitted = fit_projection(p.w, p.rows, p.cols, params, p.diag.data(), p.cov.data());
  ASSERT_TRUE(fitted.is_ok());
  EXPECT_EQ(fitted->draft_codes, plain.draft_codes);
  EXPECT_EQ(fitted->resid_codes, plain.resid_codes);
  EXPECT_EQ(fitted->resid_scales, plain.resid_scales);
}

TEST(ErrorFeedback, ACovarianceThatIsNotPositiveDefiniteIsAnError) {
  Problem p = correlated_problem(true);
  p.cov[5] = std::numeric_limits<float>::quiet_NaN();
  p.cov[size_t(5 * p.cols)] = std::numeric_limits<float>::quiet_NaN();
  quant::SplitParams params;
  auto fed = split_projection_gptq(p.w, p.rows, p.cols, params, nullptr, p.cov.data());
  ASSERT_FALSE(fed.is_ok());
  EXPECT_NE(fed.status().message().find("not positive definite"), std::string::npos) << fed.status().message();
}

}  // namespace
}  // namespace bitsplit
