// Q8_0 baseline kernels: every ISA tier the CPU has bitwise equal to the scalar reference (odd
// shapes, n = 1..17), batch invariance and threading (driven by the registry of kernel_cases.h);
// the quantiser's definition, the reference against the f32 product of the dequantised weights
// within a derived bound, zero activations, and the shape checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"
#include "cpu_testing.h"
#include "kernel_case_properties.h"

namespace bitsplit::cpu {
namespace {

using namespace testing;  // bitsplit::cpu::testing
using ::testing::ValuesIn;

INSTANTIATE_TEST_SUITE_P(Q8_0, KernelTiers, ValuesIn(tier_case_sets(q8_0)), set_name);
INSTANTIATE_TEST_SUITE_P(Q8_0, KernelBatchInvariance, ValuesIn(batch_cases(q8_0)), case_name);
INSTANTIATE_TEST_SUITE_P(Q8_0, KernelThreadInvariance, ValuesIn(thread_cases(q8_0)), case_name);

KernelCase q8_0_case(int64_t out, int64_t in, Codes codes, uint32_t seed) {
  return {.kernel = Kernel::kQ8_0, .bits = 8, .codes = codes, .out = out, .in = in, .group = 32, .seed = seed};
}

// One definition of activation quantisation: a Q8_0 block is the plane kernels' group of 32.
TEST(CpuQ8_0Kernels, QuantizerIsThePlaneQuantizerWithGroupsOf32) {
  const int64_t rows = 3, in = 320;
  auto x = random_activations(rows, in, 5);
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);
  Q8_0Activations qa;
  QuantizedActivations pa;
  quantize_activations_q8_0_ref(x.data(), rows, in, qa);
  quantize_activations_ref(x.data(), rows, in, 32, pa);
  EXPECT_EQ(qa.q, pa.q);
  EXPECT_EQ(qa.sum, pa.sum);
  ASSERT_EQ(qa.d.size(), pa.scale.size());
  EXPECT_EQ(0, std::memcmp(qa.d.data(), pa.scale.data(), qa.d.size() * 4));
}

// Integers everywhere (d_w = 1, amax = 127 so d_x = 1): y is the exact integer dot product.
TEST(CpuQ8_0Kernels, ReferenceFollowsTheDefinition) {
  const CaseWeights w(q8_0_case(1, 64, Codes::kFitted, 1));
  std::vector<float> x(64);
  int64_t want = 0;
  for (int i = 0; i < 64; ++i) {
    quant::BlockQ8_0& b = w.blocks()[i / 32];
    b.d = quant::fp32_to_fp16(1.0f);
    b.q[i % 32] = int8_t(i % 2 ? -128 + i : 127 - i);
    x[size_t(i)] = i % 32 == 0 ? 127.0f : float((i * 7) % 255 - 127);
    want += int64_t(b.q[i % 32]) * int64_t(x[size_t(i)]);
  }
  Q8_0Activations qa;
  quantize_activations_q8_0_ref(x.data(), 1, 64, qa);
  float y = std::numeric_limits<float>::quiet_NaN();
  q8_0_matmul_ref(w.views().q8_0, qa, &y);
  EXPECT_EQ(double(y), double(want));
  EXPECT_EQ(qa.d[0], 1.0f);
}

// The reference against sum_i w_i x_i in double, w the dequantised Q8_0 weights (exact in f32:
// an fp16 scale times an int8). Bound per output (docs/FORMAT.md, "Q8_0 baseline kernel
// arithmetic"): activation rounding |x_i - d_x q_i| <= d_x / 2 + 2^-21 |x_i|, plus for the f32
// steps (one product and one fma per block) (B + 2) 2^-23 sum_i |w_i d_x q_i|.
TEST(CpuQ8_0Kernels, ReferenceIsCloseToDequantizedF32Matmul) {
  for (int64_t in : {32, 320, 4096}) {
    const int64_t out = 17, rows = 5;
    const CaseWeights w(q8_0_case(out, in, Codes::kFitted, uint32_t(in)));
    const auto x = random_activations(rows, in, 21);
    CaseActivations a;
    quantize_case(w, nullptr, x.data(), rows, a);
    const Q8_0Activations& qa = a.q8_0;
    const std::vector<float> y = multiply_case(w, nullptr, nullptr, a);
    for (int64_t o = 0; o < out; ++o) {
      const auto wr = w.dequantized_row(o);
      for (int64_t r = 0; r < rows; ++r) {
        const ProductTerms t = product_terms(wr.data(), x.data() + r * in, qa.q.data() + r * in,
                                             qa.d.data() + r * qa.blocks, in, 32);
        const double tol = t.act + std::ldexp(double(qa.blocks + 2), -23) * t.terms * 1.01;
        EXPECT_LE(std::fabs(y[size_t(r * out + o)] - t.exact), tol) << "in " << in << " o " << o << " r " << r;
        EXPECT_LT(tol, 0.25 * t.mag) << "the bound must stay tight enough to catch a wrong block";
      }
    }
  }
}

TEST(CpuQ8_0Kernels, ZeroActivationsGiveZero) {
  const int64_t in = 96, out = 21, rows = 3;
  const CaseWeights w(q8_0_case(out, in, Codes::kRandom, 9));
  const std::vector<float> x(size_t(rows * in), 0.0f);
  for (Isa isa : supported_tiers()) {
    Q8_0Activations qa;
    quantize_activations_q8_0(tier_context(isa), x.data(), rows, in, qa);
    EXPECT_EQ(qa.q, std::vector<int8_t>(qa.q.size(), 0)) << isa_name(isa);
    EXPECT_EQ(qa.d, std::vector<float>(qa.d.size(), 0.0f)) << isa_name(isa);
    EXPECT_EQ(qa.sum, std::vector<int32_t>(qa.sum.size(), 0)) << isa_name(isa);
    auto y = poisoned(size_t(rows * out));
    q8_0_matmul(tier_context(isa), w.views().q8_0, qa, y.data());
    EXPECT_TRUE(same_bits(y, std::vector<float>(y.size(), 0.0f))) << isa_name(isa) << ": " << y[0];
  }
}

TEST(CpuQ8_0KernelsDeathTest, RejectsRowLengthNotMultipleOf32) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<float> x(48, 1.0f);
  Q8_0Activations qa;
  EXPECT_DEATH(quantize_activations_q8_0_ref(x.data(), 1, 48, qa), "multiple of 32, got 48");
  EXPECT_DEATH(quantize_activations_q8_0(tier_context(Isa::kScalar), x.data(), 1, 40, qa), "multiple of 32");
  const CaseWeights w(q8_0_case(2, 64, Codes::kFitted, 1));
  Q8_0PlaneView bad = w.views().q8_0;
  bad.in = 48;
  quantize_activations_q8_0_ref(x.data(), 1, 32, qa);
  std::vector<float> y(2);
  EXPECT_DEATH(q8_0_matmul_ref(bad, qa, y.data()), "multiple of 32");
  EXPECT_DEATH(q8_0_matmul(tier_context(default_isa()), bad, qa, y.data()), "multiple of 32");
  EXPECT_DEATH(q8_0_matmul(tier_context(default_isa()), w.views().q8_0, qa, y.data()), "another row length");
}

}  // namespace
}  // namespace bitsplit::cpu
