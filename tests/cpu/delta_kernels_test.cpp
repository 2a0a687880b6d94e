// BitDelta sign planes fused into the draft kernel (docs/FORMAT.md, "Kernel arithmetic", step 5):
// every ISA tier bitwise equal to the scalar reference on odd shapes with the sign plane ending at
// a guard page (a kernel reading past a row's sign bytes faults), batch and thread invariance
// (driven by the registry of kernel_cases.h); and the cases a registry does not hold: garbage in
// the unused sign bits, the degenerate cases (no delta, alpha = 0), the target layer and the
// unfused step, the bit convention against quant's BitDelta encoder, accuracy against a
// double-precision product, and the plain-f32 sign_matmul_add_f32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/quant.h"
#include "cpu_testing.h"
#include "kernel_case_properties.h"

namespace bitsplit::cpu {
namespace {

using namespace testing;  // bitsplit::cpu::testing
using ::testing::ValuesIn;

INSTANTIATE_TEST_SUITE_P(Delta, KernelTiers, ValuesIn(tier_case_sets(sign_plane)), set_name);
INSTANTIATE_TEST_SUITE_P(Delta, KernelBatchInvariance, ValuesIn(batch_cases(sign_plane)), case_name);
INSTANTIATE_TEST_SUITE_P(Delta, KernelThreadInvariance, ValuesIn(thread_cases(sign_plane)), case_name);

KernelCase signed_draft(int64_t out, int64_t in, int group, Signs signs, int stride_extra, uint32_t seed) {
  return {.signs = signs, .out = out, .in = in, .group = group, .sign_stride_extra = stride_extra, .seed = seed};
}

// Garbage in the sign bits past `in` and in a wider stride's extra bytes changes nothing.
TEST(CpuDeltaKernels, PaddingSignsAreIgnored) {
  for (int group : {32, 64, 128}) {
    for (int64_t in : {5, 37, 111}) {
      const KernelCase c = signed_draft(19, in, group, Signs::kAlphaPerRow, 2, uint32_t(in));
      const CaseWeights dirty(c);
      CaseWeights clean(c);
      clean.clear_sign_padding();
      // Garbage must not be all zero for the test to mean anything.
      bool any = false;
      for (int64_t o = 0; o < c.out; ++o)
        for (int64_t i = in; i < dirty.sign_row_bytes() * 8; ++i) any |= dirty.sign(o, i) < 0;
      ASSERT_TRUE(any);
      const int64_t rows = 3;
      const auto x = random_activations(rows, in, 5);
      CaseActivations a;
      quantize_case(clean, nullptr, x.data(), rows, a);
      const std::vector<float> want = multiply_case(clean, nullptr, nullptr, a);
      for (Isa isa : supported_tiers()) {
        std::vector<float> got = multiply_case(dirty, &tier_context(isa), nullptr, a);
        ASSERT_TRUE(same_bits(want, got)) << c.name() << " " << isa_name(isa);
        const PackedPlane packed = *dirty.pack(tier_context(isa));
        got = multiply_case(dirty, &tier_context(isa), &packed, a);
        ASSERT_TRUE(same_bits(want, got)) << c.name() << " packed " << isa_name(isa);
      }
    }
  }
}

// delta == nullptr is exactly the plain draft, and alpha = 0 gives exactly the plain draft too
// (fmaf(0, dacc, y) == y bit for bit unless y is -0, which needs an underflow these data lack).
TEST(CpuDeltaKernels, NoDeltaAndZeroAlphaGiveThePlainDraft) {
  for (int group : {32, 64, 128}) {
    for (int64_t in : {3, 100, 513}) {
      for (Signs signs : {Signs::kAlphaPerRow, Signs::kOneAlpha}) {
        const KernelCase c = signed_draft(37, in, group, signs, 0, uint32_t(in + group));
        CaseWeights w(c);
        const int64_t n_alpha = signs == Signs::kAlphaPerRow ? c.out : 1;
        std::fill_n(w.alpha(), n_alpha, 0.0f);
        const CaseViews& v = w.views();
        const int64_t rows = 9;
        const auto x = random_activations(rows, in, 8);
        CaseActivations a;
        quantize_case(w, nullptr, x.data(), rows, a);
        std::vector<float> plain(size_t(rows * c.out));
        draft_matmul_ref(v.draft, a.plane, plain.data());
        for (Isa isa : supported_tiers()) {
          CpuContext& ctx = tier_context(isa);
          auto none = poisoned(plain.size()), zero = poisoned(plain.size());
          draft_matmul(ctx, v.draft, a.plane, none.data(), nullptr);
          draft_matmul(ctx, v.draft, a.plane, zero.data(), &v.signs);
          ASSERT_TRUE(same_bits(plain, none)) << isa_name(isa) << ": " << first_difference(plain, none);
          ASSERT_TRUE(same_bits(plain, zero)) << isa_name(isa) << ": " << first_difference(plain, zero);
        }
        // And a non-zero alpha does change the result (the signs are really applied).
        std::fill_n(w.alpha(), n_alpha, 0.5f);
        EXPECT_FALSE(same_bits(plain, multiply_case(w, nullptr, nullptr, a)));
      }
    }
  }
}

// The target layer with a delta is the variant's draft plus the residual, in that order; and the
// GPU tier's unfused step (sign_delta_accumulate on a plain draft) equals the fused kernel.
TEST(CpuDeltaKernels, TargetAndUnfusedStepMatchTheFusedDraft) {
  const KernelCase dc = signed_draft(19, 200, 64, Signs::kOneAlpha, 1, 11);
  const KernelCase rc{.kernel = Kernel::kResidual, .bits = 8, .out = 19, .in = 200, .seed = 4};
  const CaseWeights d(dc), r(rc);
  const SignPlaneView& sv = d.views().signs;
  const int64_t rows = 5;
  const auto x = random_activations(rows, dc.in, 4);
  CaseActivations a;
  quantize_case(d, nullptr, x.data(), rows, a);
  const std::vector<float> dv = multiply_case(d, nullptr, nullptr, a), res = multiply_case(r, nullptr, nullptr, a);
  for (Isa isa : supported_tiers()) {
    CpuContext& ctx = tier_context(isa);
    std::vector<float> y = poisoned(dv.size()), scratch;
    target_matmul(ctx, d.views().draft, r.views().residual, a.plane, y.data(), scratch, &sv);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], dv[i] + res[i]) << isa_name(isa) << " " << i;
    std::vector<float> unfused = poisoned(dv.size());
    draft_matmul(ctx, d.views().draft, a.plane, unfused.data());
    sign_delta_accumulate(ctx, sv, a.plane, unfused.data());
    ASSERT_TRUE(same_bits(dv, unfused)) << isa_name(isa) << ": " << first_difference(dv, unfused);
  }
}

// Signs written by quant's BitDelta encoder, read back with its decoder: the reference is within
// the bound of docs/FORMAT.md of the double product sum_i (d_i + alpha s_i) x_i. The bound is the
// draft's (activation rounding over |w_i|, (G + 2) 2^-23 for the f32 steps) with w = d + alpha s,
// plus one more f32 rounding per group and the final fmaf for the delta's own accumulator. With
// the quantised activations s_x q in place of x only the f32 steps remain: a tight check that
// every sign lands on its weight (a misplaced bit moves the result far more).
TEST(CpuDeltaKernels, ReferenceIsCloseToDoublePrecisionProduct) {
  for (int group : {12, 32, 36, 64, 128}) {  // 12, 36: groups that do not start on a sign byte
    for (int64_t in : {7, 111, 1023}) {
      for (auto mode : {quant::DeltaAlpha::kRow, quant::DeltaAlpha::kMatrix}) {
        const int64_t out = 17, rows = 5;
        const CaseWeights d(KernelCase{.out = out, .in = in, .group = group, .seed = uint32_t(in + group)});
        std::mt19937 rng(static_cast<uint32_t>(in));
        std::normal_distribution<float> nd(0.0f, 0.02f);
        std::vector<float> delta(size_t(out * in));
        for (auto& v : delta) v = nd(rng);
        const int64_t row_bytes = quant::delta_sign_row_bytes(in);
        std::vector<uint8_t> signs(size_t(out * row_bytes));
        std::vector<float> alpha(size_t(mode == quant::DeltaAlpha::kRow ? out : 1));
        quant::bitdelta_encode_ref(delta.data(), out, in, mode, signs.data(), alpha.data());
        const SignPlaneView sv{signs.data(), alpha.data(), out, in, row_bytes, mode == quant::DeltaAlpha::kRow};
        const auto x = random_activations(rows, in, 21);
        CaseActivations a;
        quantize_case(d, nullptr, x.data(), rows, a);
        const QuantizedActivations& qa = a.plane;
        std::vector<float> y(size_t(rows * out));
        draft_matmul_ref(d.views().draft, qa, y.data(), &sv);
        std::vector<float> pm(static_cast<size_t>(in)), w(pm.size());
        int delta_moves = 0, outputs = 0;
        for (int64_t o = 0; o < out; ++o) {
          const auto dw = d.dequantized_row(o);
          const float al = alpha[size_t(sv.alpha_per_row ? o : 0)];
          quant::bitdelta_decode_row_ref(signs.data() + o * row_bytes, al, in, pm.data());
          for (int64_t r = 0; r < rows; ++r) {
            // The variant's weights d + alpha s, in double: exact with the f32 activations,
            // exact_q with s_x q, where only the f32 steps round.
            double exact = 0, exact_q = 0, act = 0;
            for (int64_t i = 0; i < in; ++i) {
              const double xi = x[size_t(r * in + i)], sx = qa.scale[size_t(r * qa.groups + i / group)];
              const double wi = double(dw[size_t(i)]) + double(pm[size_t(i)]);
              exact += wi * xi;
              exact_q += wi * sx * qa.row_q(r)[i];
              act += std::fabs(wi) * (sx / 2 + std::ldexp(std::fabs(xi), -21));
            }
            const ProductTerms t = product_terms(dw.data(), x.data() + r * in, qa.row_q(r),
                                                 qa.scale.data() + r * qa.groups, in, group);
            const double terms = t.terms + std::fabs(al) * t.abs_xq;  // sum_i (|d_i| + |alpha|) |s_x q_i|
            const double steps = std::ldexp(double(qa.groups + 3), -23) * terms * 1.01;
            const double got = y[size_t(r * out + o)];
            EXPECT_LE(std::fabs(got - exact), act + steps) << "group " << group << " in " << in << " o " << o;
            ASSERT_LE(std::fabs(got - exact_q), steps) << "group " << group << " in " << in << " o " << o;
            // The signs must move the result by more than the tolerance, or the check above is blind.
            delta_moves += std::fabs(exact_q - t.exact_q) > steps;
            ++outputs;
          }
        }
        EXPECT_GT(delta_moves, outputs * 9 / 10) << "group " << group << " in " << in;
      }
    }
  }
}

// The documented order: 8 interleaved f32 partial sums (lane i % 8), the dot_f32 tree, then one fmaf.
float sign_sum_in_documented_order(const CaseWeights& s, int64_t o, const float* x) {
  float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < s.spec().in; ++i) p[i % 8] = p[i % 8] + s.sign(o, i) * x[i];
  return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

TEST(CpuDeltaKernels, SignMatmulAddF32) {
  for (int64_t in : {1, 9, 100, 1027}) {
    for (Signs signs : {Signs::kAlphaPerRow, Signs::kOneAlpha}) {
      const int64_t out = 23, rows = 4;
      const CaseWeights s(signed_draft(out, in, 64, signs, 1, uint32_t(in)));  // garbage padding must be ignored
      const auto x = random_activations(rows, in, uint32_t(in + 1));
      std::vector<float> y0(size_t(rows * out));
      std::mt19937 rng(9);
      std::normal_distribution<float> nd;
      for (auto& v : y0) v = nd(rng);
      std::vector<float> y = y0;
      sign_matmul_add_f32(s.views().signs, x.data(), rows, y.data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
          const float* xr = x.data() + r * in;
          const float got = y[size_t(r * out + o)], a = s.alpha_of(o);
          const float want = std::fma(a, sign_sum_in_documented_order(s, o, xr), y0[size_t(r * out + o)]);
          ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "in " << in << " r " << r << " o " << o;
          double exact = 0, mag = 0;
          for (int64_t i = 0; i < in; ++i) {
            exact += double(s.sign(o, i)) * double(xr[i]);
            mag += std::fabs(double(xr[i]));
          }
          exact = double(y0[size_t(r * out + o)]) + double(a) * exact;
          // f32 sums: ceil(in / 8) additions per partial sum, then 3 levels; then the fmaf.
          const double tol = std::ldexp(double((in + 7) / 8 + 3), -24) * mag * 1.01 * a + std::ldexp(std::fabs(exact), -24);
          EXPECT_LE(std::fabs(double(got) - exact), tol) << "in " << in << " r " << r << " o " << o;
        }
      }
    }
  }
}

}  // namespace
}  // namespace bitsplit::cpu
