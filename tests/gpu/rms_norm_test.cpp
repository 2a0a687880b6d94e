// CUDA RMSNorm against the CPU reference (label gpu; skips without a device).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "bitsplit/cpu.h"
#include "bitsplit/gpu.h"

namespace bitsplit {
namespace {

TEST(GpuRmsNorm, MatchesCpuReference) {
  if (gpu::device_count() == 0) {
    GTEST_SKIP() << (gpu::compiled_with_cuda() ? "no CUDA device found" : "built without CUDA");
  }
  std::mt19937 rng(17);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (int64_t n : {1, 7, 64, 111, 1023, 4096}) {
    const int64_t rows = 5;
    std::vector<float> x(static_cast<size_t>(rows * n)), w(static_cast<size_t>(n)), y(x.size(), NAN), ref(x.size());
    for (float& v : x) v = dist(rng);
    for (float& v : w) v = dist(rng);
    ASSERT_TRUE(gpu::rms_norm(x.data(), w.data(), rows, n, 1e-5f, y.data()).is_ok());
    for (int64_t r = 0; r < rows; ++r) cpu::rms_norm_f32(&x[size_t(r * n)], w.data(), n, 1e-5f, &ref[size_t(r * n)]);
    // Different summation order (tree vs sequential double) and rsqrtf (<= 2 ulp): a few ulps.
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-5f * (1.0f + std::fabs(ref[i]))) << n << " " << i;
  }
}

TEST(GpuRmsNorm, ReportsBadShapesOrMissingCuda) {
  const Status s = gpu::rms_norm(nullptr, nullptr, 0, 4, 1e-5f, nullptr);
  EXPECT_FALSE(s.is_ok());
}

}  // namespace
}  // namespace bitsplit
