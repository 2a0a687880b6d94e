// BitDelta sign planes fused into the draft kernel (docs/FORMAT.md, "Kernel arithmetic", step 5):
// every ISA tier against the scalar reference bit for bit on odd shapes, with the sign plane ending
// at a guard page (a kernel reading past a row's sign bytes faults), batch and thread invariance,
// the degenerate cases (no delta, alpha = 0), the bit convention against quant's BitDelta encoder,
// accuracy against a double-precision product, and the plain-f32 sign_matmul_add_f32.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
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

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}

std::string first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "element %zu: %.9g vs %.9g", i, double(a[i]), double(b[i]));
      return buf;
    }
  return "sizes differ";
}

// Bytes that end exactly where an inaccessible page begins.
class GuardedBytes {
 public:
  explicit GuardedBytes(size_t n) : n_(n) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    body_ = (n + page - 1) / page * page;
    map_ = static_cast<uint8_t*>(mmap(nullptr, body_ + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(map_, MAP_FAILED);
    EXPECT_EQ(mprotect(map_ + body_, page, PROT_NONE), 0);
    mapped_ = body_ + page;
  }
  ~GuardedBytes() { munmap(map_, mapped_); }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  uint8_t* data() const { return map_ + body_ - n_; }
  size_t size() const { return n_; }

 private:
  size_t n_, body_ = 0, mapped_ = 0;
  uint8_t* map_ = nullptr;
};

// A draft plane with uniformly random codes, scales and offsets.
struct Draft {
  int64_t out, in;
  int group, bits;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales, offsets;
  Draft(int64_t out_, int64_t in_, int group_, int bits_, uint32_t seed)
      : out(out_), in(in_), group(group_), bits(bits_) {
    std::mt19937 rng(seed);
    codes.resize(size_t(out * quant::code_row_bytes(in, group, bits)));
    for (auto& b : codes) b = uint8_t(rng());
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < out * quant::groups_per_row(in, group); ++i) {
      scales.push_back(quant::fp32_to_fp16(0.01f + std::fabs(u(rng))));
      offsets.push_back(quant::fp32_to_fp16(u(rng)));
    }
  }
  DraftPlaneView view() const { return {codes.data(), scales.data(), offsets.data(), out, in, group, bits}; }
  std::vector<float> row(int64_t o) const {
    std::vector<float> w(static_cast<size_t>(in));
    const int64_t g = quant::groups_per_row(in, group);
    quant::dequantize_draft_row_ref(codes.data() + o * quant::code_row_bytes(in, group, bits), scales.data() + o * g,
                                    offsets.data() + o * g, in, group, bits, w.data());
    return w;
  }
};

// A sign plane in guarded memory. Row stride is ceil(in / 8) + extra; the bits past `in` in the
// last byte and the extra bytes hold garbage (kernels must ignore them) unless `clean`.
struct Signs {
  int64_t out, in, row_bytes;
  bool per_row;
  GuardedBytes bytes;
  std::vector<float> alpha;
  Signs(int64_t out_, int64_t in_, bool per_row_, int extra, uint32_t seed, bool clean = false)
      : out(out_), in(in_), row_bytes((in_ + 7) / 8 + extra), per_row(per_row_), bytes(size_t(out_ * row_bytes)) {
    std::mt19937 rng(seed);
    for (size_t i = 0; i < bytes.size(); ++i) bytes.data()[i] = uint8_t(rng());
    if (clean) clear_padding();
    std::uniform_real_distribution<float> u(0.0f, 0.05f);
    alpha.resize(size_t(per_row ? out : 1));
    for (auto& a : alpha) a = u(rng);
  }
  void clear_padding() {
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = in; i < row_bytes * 8; ++i) bytes.data()[o * row_bytes + i / 8] &= uint8_t(~(1u << (i % 8)));
  }
  SignPlaneView view() const { return {bytes.data(), alpha.data(), out, in, row_bytes, per_row}; }
  float sign(int64_t o, int64_t i) const { return (bytes.data()[o * row_bytes + i / 8] >> (i % 8)) & 1 ? -1.0f : 1.0f; }
  float alpha_of(int64_t o) const { return alpha[size_t(per_row ? o : 0)]; }
};

std::vector<float> random_activations(int64_t rows, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * in));
  for (auto& v : x) v = nd(rng);
  for (size_t i = 0; i < x.size(); i += 37) x[i] *= 20.0f;  // outliers: group scales differ widely
  return x;
}

const int kGroups[] = {32, 64, 128};
// Widths off multiples of 8 and of the group (the last group's sign bytes are fewer than its share),
// and 256, where every span of sign bytes is whole.
const int64_t kIns[] = {1, 7, 12, 36, 100, 111, 200, 256, 1023};
const int64_t kOuts[] = {1, 5, 17, 33};

// Fused draft + signs on every tier vs draft_matmul_ref(..., &delta), on outputs poisoned with NaN.
TEST(CpuDeltaKernels, TiersMatchReferenceBitwise) {
  int checked = 0;
  for (int group : kGroups) {
    for (int64_t in : kIns) {
      for (int64_t out : kOuts) {
        for (int bits : {2, 3, 4}) {
          const Draft d(out, in, group, bits, uint32_t(out * 7 + in * 13 + group + bits));
          // The packed layout of the 2-bit plane must give the same bits on every tier.
          std::optional<PackedPlane> packed;
          if (bits == 2) packed = PackedPlane::pack(tier_context(Isa::kScalar), d.view());
          for (bool per_row : {true, false}) {
            const Signs s(out, in, per_row, per_row ? 0 : 3, uint32_t(in + out + per_row));
            const SignPlaneView sv = s.view();
            for (int64_t rows = 1; rows <= 17; ++rows) {
              if (bits != 2 && rows != 1 && rows != 5 && rows != 17) continue;  // 3/4 bits: the scalar path
              const auto x = random_activations(rows, in, uint32_t(rows * 3 + in));
              QuantizedActivations qa;
              quantize_activations_ref(x.data(), rows, in, group, qa);
              auto want = poisoned(size_t(rows * out));
              draft_matmul_ref(d.view(), qa, want.data(), &sv);
              for (Isa isa : supported_tiers()) {
                auto got = poisoned(want.size());
                draft_matmul(tier_context(isa), d.view(), qa, got.data(), &sv);
                ASSERT_TRUE(same_bits(want, got))
                    << isa_name(isa) << " bits " << bits << " group " << group << " in " << in << " out " << out
                    << " rows " << rows << (per_row ? " alpha per row" : " alpha per matrix") << ": "
                    << first_difference(want, got);
                ++checked;
                if (!packed) continue;
                got = poisoned(want.size());
                draft_matmul(tier_context(isa), *packed, qa, got.data(), &sv);
                ASSERT_TRUE(same_bits(want, got))
                    << "packed " << isa_name(isa) << " group " << group << " in " << in << " out " << out << " rows "
                    << rows << (per_row ? " alpha per row" : " alpha per matrix") << ": " << first_difference(want, got);
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// Garbage in the sign bits past `in` and in a wider stride's extra bytes changes nothing.
TEST(CpuDeltaKernels, PaddingSignsAreIgnored) {
  for (int group : kGroups) {
    for (int64_t in : {int64_t(5), int64_t(37), int64_t(111)}) {
      const int64_t out = 19, rows = 3;
      const Draft d(out, in, group, 2, uint32_t(in));
      Signs dirty(out, in, true, 2, 77);
      Signs clean(out, in, true, 2, 77, true);
      // Garbage must not be all zero for the test to mean anything.
      bool any = false;
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = in; i < dirty.row_bytes * 8; ++i) any |= dirty.sign(o, i) < 0;
      ASSERT_TRUE(any);
      const auto x = random_activations(rows, in, 5);
      QuantizedActivations qa;
      quantize_activations_ref(x.data(), rows, in, group, qa);
      const SignPlaneView dv = dirty.view(), cv = clean.view();
      std::vector<float> want(size_t(rows * out));
      draft_matmul_ref(d.view(), qa, want.data(), &cv);
      for (Isa isa : supported_tiers()) {
        auto got = poisoned(want.size());
        draft_matmul(tier_context(isa), d.view(), qa, got.data(), &dv);
        ASSERT_TRUE(same_bits(want, got)) << isa_name(isa) << " group " << group << " in " << in;
        const PackedPlane packed = PackedPlane::pack(tier_context(isa), d.view());
        got = poisoned(want.size());
        draft_matmul(tier_context(isa), packed, qa, got.data(), &dv);
        ASSERT_TRUE(same_bits(want, got)) << "packed " << isa_name(isa) << " group " << group << " in " << in;
      }
    }
  }
}

// delta == nullptr is exactly the plain draft, and alpha = 0 gives exactly the plain draft too
// (fmaf(0, dacc, y) == y bit for bit unless y is -0, which needs an underflow these data lack).
TEST(CpuDeltaKernels, NoDeltaAndZeroAlphaGiveThePlainDraft) {
  for (int group : kGroups) {
    for (int64_t in : {int64_t(3), int64_t(100), int64_t(513)}) {
      for (bool per_row : {true, false}) {
        const int64_t out = 37, rows = 9;
        const Draft d(out, in, group, 2, uint32_t(in + group));
        Signs s(out, in, per_row, 0, 3);
        for (auto& a : s.alpha) a = 0.0f;
        const SignPlaneView sv = s.view();
        const auto x = random_activations(rows, in, 8);
        QuantizedActivations qa;
        quantize_activations_ref(x.data(), rows, in, group, qa);
        std::vector<float> plain(size_t(rows * out));
        draft_matmul_ref(d.view(), qa, plain.data());
        for (Isa isa : supported_tiers()) {
          CpuContext& ctx = tier_context(isa);
          auto none = poisoned(plain.size()), zero = poisoned(plain.size());
          draft_matmul(ctx, d.view(), qa, none.data(), nullptr);
          draft_matmul(ctx, d.view(), qa, zero.data(), &sv);
          ASSERT_TRUE(same_bits(plain, none)) << isa_name(isa) << ": " << first_difference(plain, none);
          ASSERT_TRUE(same_bits(plain, zero)) << isa_name(isa) << ": " << first_difference(plain, zero);
        }
        // And a non-zero alpha does change the result (the signs are really applied).
        s.alpha.assign(s.alpha.size(), 0.5f);
        std::vector<float> with(plain.size());
        draft_matmul_ref(d.view(), qa, with.data(), &sv);
        EXPECT_FALSE(same_bits(plain, with));
      }
    }
  }
}

// A row's result is the same bits alone, in any batch of 1..17 rows, at any position.
TEST(CpuDeltaKernels, BatchInvariantOnEveryTier) {
  const int64_t in = 333, out = 37;
  for (int group : kGroups) {
    const Draft d(out, in, group, 2, uint32_t(group));
    const Signs s(out, in, true, 0, uint32_t(group + 1));
    const SignPlaneView sv = s.view();
    const auto pool = random_activations(17, in, 99);
    const auto probe = random_activations(1, in, 7);
    for (Isa isa : supported_tiers()) {
      CpuContext& ctx = tier_context(isa);
      QuantizedActivations qa;
      quantize_activations(ctx, probe.data(), 1, in, group, qa);
      std::vector<float> alone(static_cast<size_t>(out));
      draft_matmul(ctx, d.view(), qa, alone.data(), &sv);
      for (int64_t n = 1; n <= 17; ++n) {
        for (int64_t pos : {int64_t(0), n / 2, n - 1}) {
          std::vector<float> x(pool.begin(), pool.begin() + n * in);
          std::copy(probe.begin(), probe.end(), x.begin() + pos * in);
          quantize_activations(ctx, x.data(), n, in, group, qa);
          auto y = poisoned(size_t(n * out));
          draft_matmul(ctx, d.view(), qa, y.data(), &sv);
          ASSERT_TRUE(same_bits(alone.data(), y.data() + pos * out, size_t(out)))
              << isa_name(isa) << " group " << group << " n " << n << " pos " << pos;
        }
      }
    }
  }
}

TEST(CpuDeltaKernels, ThreadCountDoesNotChangeResults) {
  const int64_t in = 515, out = 211, rows = 16;
  const Draft d(out, in, 64, 2, 5);
  const Signs s(out, in, true, 0, 6);
  const SignPlaneView sv = s.view();
  const auto x = random_activations(rows, in, 3);
  QuantizedActivations qa;
  quantize_activations_ref(x.data(), rows, in, 64, qa);
  std::vector<float> want(size_t(rows * out));
  draft_matmul_ref(d.view(), qa, want.data(), &sv);
  for (Isa isa : supported_tiers()) {
    for (int threads : {1, 2, 3, 0}) {
      CpuContext ctx({.threads = threads, .isa = isa});
      auto got = poisoned(want.size());
      draft_matmul(ctx, d.view(), qa, got.data(), &sv);
      ASSERT_TRUE(same_bits(want, got)) << isa_name(isa) << " " << threads << " threads: "
                                        << first_difference(want, got);
    }
  }
}

// The target layer with a delta is the variant's draft plus the residual, in that order; and the
// GPU tier's unfused step (sign_delta_accumulate on a plain draft) equals the fused kernel.
TEST(CpuDeltaKernels, TargetAndUnfusedStepMatchTheFusedDraft) {
  const int64_t in = 200, out = 19, rows = 5;
  const int group = 64;
  const Draft d(out, in, group, 2, 11);
  const Signs s(out, in, false, 1, 12);
  const SignPlaneView sv = s.view();
  std::vector<uint8_t> rc(size_t(out * quant::code_row_bytes(in, group, 8)));
  std::vector<uint16_t> rs(size_t(out * quant::groups_per_row(in, group)));
  std::mt19937 rng(4);
  for (auto& b : rc) b = uint8_t(rng());
  for (auto& v : rs) v = quant::fp32_to_fp16(0.001f * float(1 + rng() % 100));
  const ResidualPlaneView r{rc.data(), rs.data(), out, in, group, 8};
  const auto x = random_activations(rows, in, 4);
  QuantizedActivations qa;
  quantize_activations_ref(x.data(), rows, in, group, qa);
  std::vector<float> dv(size_t(rows * out)), res(dv.size());
  draft_matmul_ref(d.view(), qa, dv.data(), &sv);
  residual_matmul_ref(r, qa, res.data());
  for (Isa isa : supported_tiers()) {
    CpuContext& ctx = tier_context(isa);
    std::vector<float> y = poisoned(dv.size()), scratch;
    target_matmul(ctx, d.view(), r, qa, y.data(), scratch, &sv);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], dv[i] + res[i]) << isa_name(isa) << " " << i;
    std::vector<float> unfused = poisoned(dv.size());
    draft_matmul(ctx, d.view(), qa, unfused.data());
    sign_delta_accumulate(ctx, sv, qa, unfused.data());
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
    for (int64_t in : {int64_t(7), int64_t(111), int64_t(1023)}) {
      for (auto mode : {quant::DeltaAlpha::kRow, quant::DeltaAlpha::kMatrix}) {
        const int64_t out = 17, rows = 5;
        const Draft d(out, in, group, 2, uint32_t(in + group));
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
        QuantizedActivations qa;
        quantize_activations_ref(x.data(), rows, in, group, qa);
        std::vector<float> y(size_t(rows * out));
        draft_matmul_ref(d.view(), qa, y.data(), &sv);
        const int64_t groups = qa.groups;
        std::vector<float> pm(static_cast<size_t>(in));
        int delta_moves = 0, outputs = 0;
        for (int64_t o = 0; o < out; ++o) {
          const auto dw = d.row(o);
          const float a = alpha[size_t(sv.alpha_per_row ? o : 0)];
          quant::bitdelta_decode_row_ref(signs.data() + o * row_bytes, a, in, pm.data());
          for (int64_t r = 0; r < rows; ++r) {
            // exact: with the f32 activations; exact_q: with s_x q, where only the f32 steps round.
            double exact = 0, exact_q = 0, draft_q = 0, act = 0, terms = 0;
            for (int64_t i = 0; i < in; ++i) {
              const double xi = x[size_t(r * in + i)], sx = qa.scale[size_t(r * groups + i / group)];
              const double qi = qa.q[size_t(r * qa.padded + i)];
              const double w = double(dw[size_t(i)]) + double(pm[size_t(i)]);
              exact += w * xi;
              exact_q += w * sx * qi;
              draft_q += double(dw[size_t(i)]) * sx * qi;
              act += std::fabs(w) * (sx / 2 + std::ldexp(std::fabs(xi), -21));
              terms += (std::fabs(dw[size_t(i)]) + std::fabs(a)) * std::fabs(sx * qi);
            }
            const double steps = std::ldexp(double(groups + 3), -23) * terms * 1.01;
            const double got = y[size_t(r * out + o)];
            EXPECT_LE(std::fabs(got - exact), act + steps) << "group " << group << " in " << in << " o " << o;
            ASSERT_LE(std::fabs(got - exact_q), steps) << "group " << group << " in " << in << " o " << o;
            // The signs must move the result by more than the tolerance, or the check above is blind.
            delta_moves += std::fabs(exact_q - draft_q) > steps;
            ++outputs;
          }
        }
        EXPECT_GT(delta_moves, outputs * 9 / 10) << "group " << group << " in " << in;
      }
    }
  }
}

// The documented order: 8 interleaved f32 partial sums (lane i % 8), the dot_f32 tree, then one fmaf.
float sign_sum_in_documented_order(const Signs& s, int64_t o, const float* x) {
  float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < s.in; ++i) p[i % 8] = p[i % 8] + s.sign(o, i) * x[i];
  return ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

TEST(CpuDeltaKernels, SignMatmulAddF32) {
  for (int64_t in : {int64_t(1), int64_t(9), int64_t(100), int64_t(1027)}) {
    for (bool per_row : {true, false}) {
      const int64_t out = 23, rows = 4;
      const Signs s(out, in, per_row, 1, uint32_t(in));  // garbage padding must be ignored
      const auto x = random_activations(rows, in, uint32_t(in + 1));
      std::vector<float> y0(size_t(rows * out));
      std::mt19937 rng(9);
      std::normal_distribution<float> nd;
      for (auto& v : y0) v = nd(rng);
      std::vector<float> y = y0;
      sign_matmul_add_f32(s.view(), x.data(), rows, y.data());
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
