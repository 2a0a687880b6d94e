// Q8_0 reference: llama.cpp's definition, exact packing, and the error bound it implies.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "bitsplit/quant.h"

namespace bitsplit::quant {
namespace {

TEST(Q8_0, KnownBlockPacksExactly) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i - 16) * 0.5f;  // amax 8 -> d = 8/127
  std::vector<BlockQ8_0> b(1);
  quantize_q8_0_ref(x, b);
  EXPECT_EQ(b[0].d, fp32_to_fp16(8.0f / 127.0f));
  EXPECT_EQ(b[0].q[0], -127);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b[0].q[i], int8_t(std::roundf(x[size_t(i)] * (127.0f / 8.0f)))) << i;
}

// Codes round halves away from zero, as llama.cpp's roundf does, also just beside the halves.
TEST(Q8_0, CodesRoundAsRoundfDoes) {
  const float halves[] = {0.5f, 1.5f, 2.5f, 125.5f, 126.5f, std::nextafter(0.5f, 0.0f), std::nextafter(0.5f, 1.0f),
                          std::nextafter(2.5f, 0.0f), std::nextafter(2.5f, 3.0f), 0.0f, 1e-30f, 64.0f};
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // amax 127: d = 1, codes are the values rounded
  for (size_t i = 0; i < std::size(halves); ++i) {
    x[1 + 2 * i] = halves[i];
    x[2 + 2 * i] = -halves[i];
  }
  std::vector<BlockQ8_0> b(1);
  quantize_q8_0_ref(x, b);
  ASSERT_EQ(b[0].d, fp32_to_fp16(1.0f));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b[0].q[i], int8_t(std::roundf(x[size_t(i)]))) << x[size_t(i)];
}

TEST(Q8_0, RoundTripErrorWithinHalfStepPlusScaleRounding) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int n_blocks : {1, 3, 17}) {
    std::vector<float> x(size_t(n_blocks) * 32), y(x.size(), NAN);
    for (float& v : x) v = dist(rng) * 3.0f;
    std::vector<BlockQ8_0> b(static_cast<size_t>(n_blocks));
    quantize_q8_0_ref(x, b);
    dequantize_q8_0_ref(b, y);
    for (int blk = 0; blk < n_blocks; ++blk) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[size_t(blk * 32 + i)]));
      const float d = amax / 127.0f;
      // Rounding to the grid costs d/2; storing d in fp16 (rel. error 2^-11) scales codes of
      // up to 127 by that much.
      const float bound = d * 0.5f + 127.0f * d * 0x1p-11f + 1e-7f;
      for (int i = 0; i < 32; ++i) {
        const size_t k = size_t(blk * 32 + i);
        ASSERT_LE(std::fabs(x[k] - y[k]), bound) << "block " << blk << " index " << i;
      }
    }
  }
}

TEST(Q8_0, ZeroBlockStaysZero) {
  std::vector<float> x(32, 0.0f), y(32, 1.0f);
  std::vector<BlockQ8_0> b(1);
  quantize_q8_0_ref(x, b);
  dequantize_q8_0_ref(b, y);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace bitsplit::quant
