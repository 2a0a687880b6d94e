// Q8_0 baseline kernels: every ISA tier the CPU has against the scalar reference (bit-exact, odd
// shapes, n = 1..17), batch invariance, threading, the reference against the f32 product of the
// dequantised weights within a derived bound, and the shape checks.
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

namespace bitsplit::cpu {
namespace {

using testing::poisoned;
using testing::supported_tiers;
using testing::tier_context;

// Q8_0 rows: quantised from Gaussian weights with quant::quantize_q8_0_ref, or (random_codes)
// every byte random, so -128 and both extremes meet every activation sign, with random scales.
struct Q8Weights {
  int64_t out, in;
  std::vector<quant::BlockQ8_0> blocks;
  Q8Weights(int64_t out_, int64_t in_, bool random_codes, uint32_t seed) : out(out_), in(in_) {
    blocks.resize(size_t(out * in / 32));
    std::mt19937 rng(seed);
    if (random_codes) {
      std::uniform_real_distribution<float> u(-2.0f, 2.0f);
      for (auto& b : blocks) {
        b.d = quant::fp32_to_fp16(u(rng));
        for (auto& q : b.q) q = int8_t(uint8_t(rng()));
      }
      return;
    }
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> w(blocks.size() * 32);
    for (auto& v : w) v = nd(rng);
    quant::quantize_q8_0_ref(w, blocks);
  }
  Q8_0PlaneView view() const { return {reinterpret_cast<const uint8_t*>(blocks.data()), out, in}; }
  std::vector<float> dequantized_row(int64_t o) const {
    std::vector<float> w(static_cast<size_t>(in));
    quant::dequantize_q8_0_ref(std::span(blocks).subspan(size_t(o * in / 32), size_t(in / 32)), w);
    return w;
  }
};

std::vector<float> random_activations(int64_t rows, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * in));
  for (auto& v : x) v = nd(rng);
  for (size_t i = 0; i < x.size(); i += 37) x[i] *= 20.0f;  // outliers: block scales differ widely
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "element %zu: %.9g vs %.9g", i, double(a[i]), double(b[i]));
      return buf;
    }
  }
  return "sizes differ";
}

// 1, 2, 3 and 33 blocks: the AVX-512 tier pairs blocks, so odd counts exercise its tail.
const int64_t kIns[] = {32, 64, 96, 1056};
const int64_t kOuts[] = {1, 5, 17, 37};  // partial tiles of both the 8- and the 16-lane tier

TEST(CpuQ8_0Kernels, QuantizerTiersMatchReference) {
  for (Isa isa : supported_tiers()) {
    for (int64_t in : kIns) {
      for (int64_t rows : {int64_t(1), int64_t(5), int64_t(17)}) {
        auto x = random_activations(rows, in, uint32_t(in * 31 + rows));
        // amax = 127 makes 127/amax = 1, so these are exact halves after scaling.
        const float halves[] = {127.0f, 0.5f, -0.5f, 1.5f, -2.5f, 3.5f, -126.5f, 0.0f};
        for (int i = 0; i < 8; ++i) x[size_t(i)] = halves[i];
        if (in > 32) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
        if (rows > 1) std::fill(x.begin() + in, x.begin() + in + 32, 1e-38f);  // below kTinyAmax
        Q8_0Activations want, got;
        quantize_activations_q8_0_ref(x.data(), rows, in, want);
        got.q.assign(want.q.size(), int8_t(0x55));
        quantize_activations_q8_0(tier_context(isa), x.data(), rows, in, got);
        const std::string where = std::string(isa_name(isa)) + " in " + std::to_string(in) + " rows " +
                                  std::to_string(rows);
        ASSERT_EQ(want.q, got.q) << where;
        ASSERT_EQ(want.sum, got.sum) << where;
        ASSERT_EQ(0, std::memcmp(want.d.data(), got.d.data(), want.d.size() * 4)) << where;
      }
    }
  }
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
  Q8Weights w(1, 64, false, 1);
  std::vector<float> x(64);
  int64_t want = 0;
  for (int i = 0; i < 64; ++i) {
    w.blocks[size_t(i / 32)].d = quant::fp32_to_fp16(1.0f);
    w.blocks[size_t(i / 32)].q[i % 32] = int8_t(i % 2 ? -128 + i : 127 - i);
    x[size_t(i)] = i % 32 == 0 ? 127.0f : float((i * 7) % 255 - 127);
    want += int64_t(w.blocks[size_t(i / 32)].q[i % 32]) * int64_t(x[size_t(i)]);
  }
  Q8_0Activations qa;
  quantize_activations_q8_0_ref(x.data(), 1, 64, qa);
  float y = std::numeric_limits<float>::quiet_NaN();
  q8_0_matmul_ref(w.view(), qa, &y);
  EXPECT_EQ(double(y), double(want));
  EXPECT_EQ(qa.d[0], 1.0f);
}

TEST(CpuQ8_0Kernels, MatmulTiersMatchReferenceBitwise) {
  for (bool random_codes : {false, true}) {
    for (int64_t in : kIns) {
      for (int64_t out : kOuts) {
        const Q8Weights w(out, in, random_codes, uint32_t(out * 7 + in * 13 + random_codes));
        for (int64_t rows = 1; rows <= 17; ++rows) {
          const auto x = random_activations(rows, in, uint32_t(rows + in));
          Q8_0Activations qa;
          quantize_activations_q8_0_ref(x.data(), rows, in, qa);
          auto want = poisoned(size_t(rows * out));
          q8_0_matmul_ref(w.view(), qa, want.data());
          for (Isa isa : supported_tiers()) {
            auto got = poisoned(want.size());
            q8_0_matmul(tier_context(isa), w.view(), qa, got.data());
            ASSERT_TRUE(same_bits(want, got)) << isa_name(isa) << " in " << in << " out " << out << " rows " << rows
                                              << (random_codes ? " random codes" : "") << ": "
                                              << first_difference(want, got);
          }
        }
      }
    }
  }
}

// A row's result is the same bits alone, in any batch of 1..17 rows, at any position.
TEST(CpuQ8_0Kernels, BatchInvariantOnEveryTier) {
  const int64_t in = 352, out = 37;
  const Q8Weights w(out, in, true, 3);
  const auto pool = random_activations(17, in, 99);
  const auto probe = random_activations(1, in, 7);
  for (Isa isa : supported_tiers()) {
    CpuContext& ctx = tier_context(isa);
    Q8_0Activations qa;
    quantize_activations_q8_0(ctx, probe.data(), 1, in, qa);
    std::vector<float> alone(static_cast<size_t>(out));
    q8_0_matmul(ctx, w.view(), qa, alone.data());
    for (int64_t n = 1; n <= 17; ++n) {
      for (int64_t pos : {int64_t(0), n / 2, n - 1}) {
        std::vector<float> x(pool.begin(), pool.begin() + n * in);
        std::copy(probe.begin(), probe.end(), x.begin() + pos * in);
        quantize_activations_q8_0(ctx, x.data(), n, in, qa);
        auto y = poisoned(size_t(n * out));
        q8_0_matmul(ctx, w.view(), qa, y.data());
        const std::vector<float> row(y.begin() + pos * out, y.begin() + (pos + 1) * out);
        ASSERT_TRUE(same_bits(alone, row)) << isa_name(isa) << " n " << n << " pos " << pos;
      }
    }
  }
}

TEST(CpuQ8_0Kernels, ThreadCountDoesNotChangeResults) {
  const int64_t in = 512, out = 211, rows = 16;
  const Q8Weights w(out, in, true, 5);
  const auto x = random_activations(rows, in, 3);
  Q8_0Activations qa;
  quantize_activations_q8_0_ref(x.data(), rows, in, qa);
  std::vector<float> want(size_t(rows * out));
  q8_0_matmul_ref(w.view(), qa, want.data());
  for (int threads : {1, 2, 3, 0}) {
    CpuContext ctx({.threads = threads});
    auto got = poisoned(want.size());
    q8_0_matmul(ctx, w.view(), qa, got.data());
    ASSERT_TRUE(same_bits(want, got)) << threads << " threads: " << first_difference(want, got);
  }
}

// The reference against sum_i w_i x_i in double, w the dequantised Q8_0 weights (exact in f32:
// an fp16 scale times an int8). Bound per output (docs/FORMAT.md, "Q8_0 baseline kernel
// arithmetic"): activation rounding |x_i - d_x q_i| <= d_x / 2 + 2^-21 |x_i|, plus for the f32
// steps (one product and one fma per block) (B + 2) 2^-23 sum_i |w_i d_x q_i|.
TEST(CpuQ8_0Kernels, ReferenceIsCloseToDequantizedF32Matmul) {
  for (int64_t in : {int64_t(32), int64_t(320), int64_t(4096)}) {
    const int64_t out = 17, rows = 5;
    const Q8Weights w(out, in, false, uint32_t(in));
    const auto x = random_activations(rows, in, 21);
    Q8_0Activations qa;
    quantize_activations_q8_0_ref(x.data(), rows, in, qa);
    std::vector<float> y(size_t(rows * out));
    q8_0_matmul_ref(w.view(), qa, y.data());
    for (int64_t o = 0; o < out; ++o) {
      const auto wr = w.dequantized_row(o);
      for (int64_t r = 0; r < rows; ++r) {
        double exact = 0, act = 0, terms = 0, mag = 0;
        for (int64_t i = 0; i < in; ++i) {
          const double xi = x[size_t(r * in + i)], dx = qa.d[size_t(r * qa.blocks + i / 32)];
          const double wi = wr[size_t(i)];
          exact += wi * xi;
          mag += std::fabs(wi * xi);
          act += std::fabs(wi) * (dx / 2 + std::ldexp(std::fabs(xi), -21));
          terms += std::fabs(wi * dx * qa.q[size_t(r * in + i)]);
        }
        const double tol = act + std::ldexp(double(qa.blocks + 2), -23) * terms * 1.01;
        EXPECT_LE(std::fabs(y[size_t(r * out + o)] - exact), tol) << "in " << in << " o " << o << " r " << r;
        EXPECT_LT(tol, 0.25 * mag) << "the bound must stay tight enough to catch a wrong block";
      }
    }
  }
}

TEST(CpuQ8_0Kernels, ZeroActivationsGiveZero) {
  const int64_t in = 96, out = 21, rows = 3;
  const Q8Weights w(out, in, true, 9);
  const std::vector<float> x(size_t(rows * in), 0.0f);
  for (Isa isa : supported_tiers()) {
    Q8_0Activations qa;
    quantize_activations_q8_0(tier_context(isa), x.data(), rows, in, qa);
    EXPECT_EQ(qa.q, std::vector<int8_t>(qa.q.size(), 0)) << isa_name(isa);
    EXPECT_EQ(qa.d, std::vector<float>(qa.d.size(), 0.0f)) << isa_name(isa);
    EXPECT_EQ(qa.sum, std::vector<int32_t>(qa.sum.size(), 0)) << isa_name(isa);
    auto y = poisoned(size_t(rows * out));
    q8_0_matmul(tier_context(isa), w.view(), qa, y.data());
    EXPECT_TRUE(same_bits(y, std::vector<float>(y.size(), 0.0f))) << isa_name(isa) << ": " << y[0];
  }
}

TEST(CpuQ8_0KernelsDeathTest, RejectsRowLengthNotMultipleOf32) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<float> x(48, 1.0f);
  Q8_0Activations qa;
  EXPECT_DEATH(quantize_activations_q8_0_ref(x.data(), 1, 48, qa), "multiple of 32, got 48");
  EXPECT_DEATH(quantize_activations_q8_0(tier_context(Isa::kScalar), x.data(), 1, 40, qa), "multiple of 32");
  const Q8Weights w(2, 64, false, 1);
  Q8_0PlaneView bad = w.view();
  bad.in = 48;
  quantize_activations_q8_0_ref(x.data(), 1, 32, qa);
  std::vector<float> y(2);
  EXPECT_DEATH(q8_0_matmul_ref(bad, qa, y.data()), "multiple of 32");
  EXPECT_DEATH(q8_0_matmul(tier_context(default_isa()), bad, qa, y.data()), "multiple of 32");
  EXPECT_DEATH(q8_0_matmul(tier_context(default_isa()), w.view(), qa, y.data()), "another row length");
}

}  // namespace
}  // namespace bitsplit::cpu
