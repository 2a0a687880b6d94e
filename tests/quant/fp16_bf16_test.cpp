// fp16/bf16 conversions: exhaustive against the compiler's _Float16 and exact bf16 rules.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "bitsplit/quant.h"

namespace bitsplit::quant {
namespace {

TEST(Fp16, EveryHalfConvertsExactlyAndBack) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(uint16_t(h));
    const _Float16 ref = std::bit_cast<_Float16>(uint16_t(h));
    if (std::isnan(float(ref))) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(float(ref))) << "half bits " << h;
    ASSERT_EQ(fp32_to_fp16(f), uint16_t(h)) << "half bits " << h;
  }
}

TEST(Fp16, RoundingMatchesCompilerOnRandomFloats) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    if (std::isnan(f)) continue;
    const uint16_t ref = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(fp32_to_fp16(f), ref) << "float " << f;
  }
  // Halfway cases around every exponent, including the subnormal range.
  for (int e = -30; e < 17; ++e) {
    for (float m : {1.00048828125f, 1.00146484375f, 1.5f, 1.99951171875f}) {
      const float f = std::ldexp(m, e);
      ASSERT_EQ(fp32_to_fp16(f), std::bit_cast<uint16_t>(static_cast<_Float16>(f))) << f;
      ASSERT_EQ(fp32_to_fp16(-f), std::bit_cast<uint16_t>(static_cast<_Float16>(-f))) << -f;
    }
  }
}

TEST(Bf16, RoundsToNearestEvenAndKeepsNan) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::nanf("")))));
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_fp32(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_bf16(f), h);
  }
}

}  // namespace
}  // namespace bitsplit::quant
