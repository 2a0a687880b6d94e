// Bit-split plane kernels: every ISA tier the CPU has against the scalar reference (bit-exact, odd
// shapes and tails), batch invariance, threading, and the reference against a double-precision
// dequantised matmul within a bound derived from the int8 activation rounding.
#include <gtest/gtest.h>

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

// Both planes of an [out x in] matrix, built with quant::split_row_ref from random weights, or
// (random_codes) filled with uniformly random codes and scales so every code value, including
// the extremes, meets every activation sign.
struct Planes {
  int64_t out, in;
  int group, draft_bits, resid_bits;
  std::vector<uint8_t> dc, rc;
  std::vector<uint16_t> ds, dm, rs;

  Planes(int64_t out_, int64_t in_, int group_, int draft_bits_, int resid_bits_, bool random_codes, uint32_t seed)
      : out(out_), in(in_), group(group_), draft_bits(draft_bits_), resid_bits(resid_bits_) {
    const int64_t g = quant::groups_per_row(in, group);
    dc.resize(size_t(out * quant::code_row_bytes(in, group, draft_bits)));
    rc.resize(size_t(out * quant::code_row_bytes(in, group, resid_bits)));
    ds.resize(size_t(out * g));
    dm.resize(ds.size());
    rs.resize(ds.size());
    std::mt19937 rng(seed);
    if (random_codes) {
      for (auto& b : dc) b = uint8_t(rng());
      for (auto& b : rc) b = uint8_t(rng());
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (size_t i = 0; i < ds.size(); ++i) {
        ds[i] = quant::fp32_to_fp16(0.01f + std::fabs(u(rng)));
        dm[i] = quant::fp32_to_fp16(u(rng));
        rs[i] = quant::fp32_to_fp16(0.001f * (0.1f + std::fabs(u(rng))));
      }
      return;
    }
    std::normal_distribution<float> nd(0.0f, 0.05f);
    std::vector<float> w(static_cast<size_t>(in));
    quant::SplitParams p;
    p.group = group;
    p.draft_bits = draft_bits;
    p.residual_bits = resid_bits;
    p.fit = quant::DraftFit::kMinMax;  // the kernels do not care how codes were chosen
    for (int64_t o = 0; o < out; ++o) {
      for (auto& v : w) v = nd(rng);
      quant::split_row_ref(
          w.data(), nullptr, in, p,
          {dc.data() + o * quant::code_row_bytes(in, group, draft_bits), ds.data() + o * g, dm.data() + o * g},
          {rc.data() + o * quant::code_row_bytes(in, group, resid_bits), rs.data() + o * g});
    }
  }
  ResidualPlaneView residual() const { return {rc.data(), rs.data(), out, in, group, resid_bits}; }
  DraftPlaneView draft() const { return {dc.data(), ds.data(), dm.data(), out, in, group, draft_bits}; }
};

std::vector<float> random_activations(int64_t rows, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(rows * in));
  for (auto& v : x) v = nd(rng);
  // An outlier now and then, as real activations have, so group scales differ widely.
  for (size_t i = 0; i < x.size(); i += 37) x[i] *= 20.0f;
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
    {
      char buf[96];
      std::snprintf(buf, sizeof(buf), "element %zu: %.9g vs %.9g", i, double(a[i]), double(b[i]));
      return buf;
    }
  return "sizes differ";
}

const int64_t kIns[] = {1, 3, 7, 64, 111, 1023};
const int kGroups[] = {32, 64, 128};
const int64_t kOuts[] = {1, 5, 17, 64};
const int64_t kRows[] = {1, 5, 16, 17};

TEST(CpuKernels, ReportsTiers) {
  for (Isa isa : supported_tiers()) std::printf("tier available: %s\n", isa_name(isa));
  std::printf("default tier: %s\n", isa_name(default_isa()));
  EXPECT_TRUE(isa_supported(default_isa()));
}

TEST(CpuKernels, QuantizerTiersMatchReference) {
  for (Isa isa : supported_tiers()) {
    CpuContext& ctx = tier_context(isa);
    for (int group : kGroups) {
      for (int64_t in : kIns) {
        for (int64_t rows : {int64_t(1), int64_t(5), int64_t(17)}) {
          auto x = random_activations(rows, in, uint32_t(in * 31 + rows));
          // Row 0's first group: exact halves after scaling (amax = 127 makes 127/amax = 1), a zero
          // group elsewhere when the row is long enough, and tiny values.
          const float halves[] = {127.0f, 0.5f, -0.5f, 1.5f, -2.5f, 3.5f, -126.5f, 0.0f};
          for (int64_t i = 0; i < std::min<int64_t>(in, 8); ++i) x[size_t(i)] = halves[i];
          if (in > group) std::fill(x.begin() + group, x.begin() + std::min<int64_t>(in, 2 * group), 0.0f);
          if (rows > 1) x[size_t(in)] = 1e-38f;
          QuantizedActivations want, got;
          quantize_activations_ref(x.data(), rows, in, group, want);
          got.q.assign(want.q.size(), int8_t(0x55));  // poison
          quantize_activations(ctx, x.data(), rows, in, group, got);
          const std::string where = std::string(isa_name(isa)) + " group " + std::to_string(group) + " in " +
                                    std::to_string(in) + " rows " + std::to_string(rows);
          ASSERT_EQ(want.q, got.q) << where;
          ASSERT_EQ(want.sum, got.sum) << where;
          ASSERT_EQ(0, std::memcmp(want.scale.data(), got.scale.data(), want.scale.size() * 4)) << where;
        }
      }
    }
  }
}

TEST(CpuKernels, QuantizerFollowsTheDefinition) {
  // amax = 127 gives 127/amax = 1: halves round away from zero, and s_x = 1.
  const float x[8] = {127.0f, 0.5f, -0.5f, 1.5f, -2.5f, 2.4999998f, -126.5f, 0.0f};
  QuantizedActivations qa;
  quantize_activations_ref(x, 1, 8, 32, qa);
  const int8_t want[8] = {127, 1, -1, 2, -3, 2, -127, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(qa.q[size_t(i)], want[i]) << i;
  EXPECT_EQ(qa.scale[0], 1.0f);
  EXPECT_EQ(qa.sum[0], 127 + 1 - 1 + 2 - 3 + 2 - 127);
  for (int i = 8; i < 32; ++i) EXPECT_EQ(qa.q[size_t(i)], 0);  // padding
  const float zeros[4] = {0, 0, 0, 0};
  quantize_activations_ref(zeros, 1, 4, 32, qa);
  EXPECT_EQ(qa.scale[0], 0.0f);
  EXPECT_EQ(qa.sum[0], 0);
}

// Every tier of one kernel against the reference, bitwise, on outputs poisoned with NaN.
template <typename Run>
void check_tiers(const char* name, bool draft, Run run_ref) {
  for (bool random_codes : {false, true}) {
    for (int group : kGroups) {
      for (int64_t in : kIns) {
        for (int64_t out : kOuts) {
          for (int bits : draft ? std::vector<int>{2, 3, 4} : std::vector<int>{8, 6}) {
            if (!random_codes && (draft ? bits != 2 : false)) continue;
            const Planes planes(out, in, group, draft ? bits : 2, draft ? 8 : bits, random_codes,
                                uint32_t(out * 7 + in * 13 + group + bits));
            // The packed layout (where it covers the shape) must give the same bits on every tier.
            std::optional<PackedPlane> packed;
            if (PackedPlane::supported(group, bits, draft))
              packed = draft ? PackedPlane::pack(tier_context(Isa::kScalar), planes.draft())
                             : PackedPlane::pack(tier_context(Isa::kScalar), planes.residual());
            for (int64_t rows : kRows) {
              const auto x = random_activations(rows, in, uint32_t(rows + in));
              QuantizedActivations qa;
              quantize_activations_ref(x.data(), rows, in, group, qa);
              auto want = poisoned(size_t(rows * out));
              run_ref(planes, qa, want.data());
              for (Isa isa : supported_tiers()) {
                CpuContext& ctx = tier_context(isa);
                auto got = poisoned(want.size());
                if (draft) draft_matmul(ctx, planes.draft(), qa, got.data());
                else residual_matmul(ctx, planes.residual(), qa, got.data());
                ASSERT_TRUE(same_bits(want, got))
                    << name << " " << isa_name(isa) << " bits " << bits << " group " << group << " in " << in
                    << " out " << out << " rows " << rows << (random_codes ? " random codes" : "") << ": "
                    << first_difference(want, got);
                if (!packed) continue;
                got = poisoned(want.size());
                if (draft) draft_matmul(ctx, *packed, qa, got.data());
                else residual_matmul(ctx, *packed, qa, got.data());
                ASSERT_TRUE(same_bits(want, got))
                    << name << " packed " << isa_name(isa) << " bits " << bits << " group " << group << " in "
                    << in << " out " << out << " rows " << rows << (random_codes ? " random codes" : "") << ": "
                    << first_difference(want, got);
              }
            }
          }
        }
      }
    }
  }
}

TEST(CpuKernels, ResidualTiersMatchReferenceBitwise) {
  check_tiers("residual", false, [](const Planes& p, const QuantizedActivations& qa, float* y) {
    residual_matmul_ref(p.residual(), qa, y);
  });
}

TEST(CpuKernels, DraftTiersMatchReferenceBitwise) {
  check_tiers("draft", true, [](const Planes& p, const QuantizedActivations& qa, float* y) {
    draft_matmul_ref(p.draft(), qa, y);
  });
}

// Packing moves bits only: every code, scale and offset reads back as in the file layout, for
// tails in both directions (out not a multiple of 16, in not a multiple of the group).
TEST(CpuKernels, PackedPlaneHoldsTheFileLayoutValues) {
  for (int group : kGroups) {
    for (int bits : {8, 6, 2}) {
      const bool draft = bits == 2;
      const int64_t out = 37, in = 3 * group - 5;
      const Planes planes(out, in, group, 2, draft ? 8 : bits, true, uint32_t(group * 3 + bits));
      const PackedPlane p = draft ? PackedPlane::pack(tier_context(Isa::kScalar), planes.draft())
                                  : PackedPlane::pack(tier_context(Isa::kScalar), planes.residual());
      EXPECT_EQ(p.tiles, 3);
      EXPECT_EQ(p.tile_bytes % 64, 0);
      const int64_t groups = quant::groups_per_row(in, group), row_bytes = quant::code_row_bytes(in, group, bits);
      const uint8_t* codes = draft ? planes.dc.data() : planes.rc.data();
      uint8_t want[quant::kMaxGroup], got[quant::kMaxGroup];
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t k = 0; k < groups; ++k) {
          quant::unpack_group_codes(codes + o * row_bytes + k * group * bits / 8, group, bits, want);
          p.unpack_group(o, k, got);
          ASSERT_EQ(std::memcmp(want, got, size_t(group)), 0) << "bits " << bits << " group " << group << " o " << o;
          EXPECT_EQ(p.scale(o, k), draft ? planes.ds[size_t(o * groups + k)] : planes.rs[size_t(o * groups + k)]);
          if (draft) {
            EXPECT_EQ(p.offset(o, k), planes.dm[size_t(o * groups + k)]);
          }
        }
      }
    }
  }
  EXPECT_FALSE(PackedPlane::supported(64, 3, true));
  EXPECT_FALSE(PackedPlane::supported(48, 8, false));
}

// Packed planes on more threads than tiles and on partial tiles: same bits as the reference.
TEST(CpuKernels, PackedThreadCountDoesNotChangeResults) {
  const int64_t in = 515, out = 211, rows = 16;
  const Planes planes(out, in, 64, 2, 6, true, 9);
  const auto x = random_activations(rows, in, 4);
  QuantizedActivations qa;
  quantize_activations_ref(x.data(), rows, in, 64, qa);
  std::vector<float> want_r(size_t(rows * out)), want_d(want_r.size());
  residual_matmul_ref(planes.residual(), qa, want_r.data());
  draft_matmul_ref(planes.draft(), qa, want_d.data());
  for (int threads : {1, 2, 3, 0}) {
    CpuContext ctx({.threads = threads});
    const PackedPlane r = PackedPlane::pack(ctx, planes.residual()), d = PackedPlane::pack(ctx, planes.draft());
    auto got = poisoned(want_r.size());
    residual_matmul(ctx, r, qa, got.data());
    ASSERT_TRUE(same_bits(want_r, got)) << threads << " threads: " << first_difference(want_r, got);
    got = poisoned(want_d.size());
    draft_matmul(ctx, d, qa, got.data());
    ASSERT_TRUE(same_bits(want_d, got)) << threads << " threads: " << first_difference(want_d, got);
  }
}

// A row's result is the same bits alone, in any batch of 1..17 rows, at any position.
TEST(CpuKernels, BatchInvariantOnEveryTier) {
  const int64_t in = 333, out = 37;
  for (int group : kGroups) {
    for (int bits : {8, 6}) {
      const Planes planes(out, in, group, 2, bits, true, uint32_t(group + bits));
      const auto pool = random_activations(17, in, 99);  // candidate batch rows
      const auto probe = random_activations(1, in, 7);
      for (Isa isa : supported_tiers()) {
        CpuContext& ctx = tier_context(isa);
        QuantizedActivations qa;
        quantize_activations(ctx, probe.data(), 1, in, group, qa);
        std::vector<float> alone_r(static_cast<size_t>(out)), alone_d(static_cast<size_t>(out));
        residual_matmul(ctx, planes.residual(), qa, alone_r.data());
        draft_matmul(ctx, planes.draft(), qa, alone_d.data());
        for (int64_t n = 1; n <= 17; ++n) {
          for (int64_t pos : {int64_t(0), n / 2, n - 1}) {
            std::vector<float> x(pool.begin(), pool.begin() + n * in);
            std::copy(probe.begin(), probe.end(), x.begin() + pos * in);
            quantize_activations(ctx, x.data(), n, in, group, qa);
            auto yr = poisoned(size_t(n * out)), yd = poisoned(size_t(n * out));
            residual_matmul(ctx, planes.residual(), qa, yr.data());
            draft_matmul(ctx, planes.draft(), qa, yd.data());
            const std::vector<float> row_r(yr.begin() + pos * out, yr.begin() + (pos + 1) * out);
            const std::vector<float> row_d(yd.begin() + pos * out, yd.begin() + (pos + 1) * out);
            ASSERT_TRUE(same_bits(alone_r, row_r)) << isa_name(isa) << " residual n " << n << " pos " << pos;
            ASSERT_TRUE(same_bits(alone_d, row_d)) << isa_name(isa) << " draft n " << n << " pos " << pos;
          }
        }
      }
    }
  }
}

// The arena's static partition must not change a single bit (slices are whole 16-row blocks).
TEST(CpuKernels, ThreadCountDoesNotChangeResults) {
  const int64_t in = 515, out = 211, rows = 16;
  const Planes planes(out, in, 64, 2, 8, true, 5);
  const auto x = random_activations(rows, in, 3);
  QuantizedActivations qa;
  quantize_activations_ref(x.data(), rows, in, 64, qa);
  std::vector<float> want(size_t(rows * out));
  residual_matmul_ref(planes.residual(), qa, want.data());
  for (int threads : {1, 2, 3, 0}) {
    CpuContext ctx({.threads = threads});
    auto got = poisoned(want.size());
    residual_matmul(ctx, planes.residual(), qa, got.data());
    ASSERT_TRUE(same_bits(want, got)) << threads << " threads: " << first_difference(want, got);
  }
}

TEST(CpuKernels, TargetIsDraftPlusResidual) {
  const int64_t in = 200, out = 19, rows = 5;
  const Planes planes(out, in, 64, 2, 6, false, 11);
  const auto x = random_activations(rows, in, 4);
  CpuContext ctx;
  QuantizedActivations qa;
  quantize_activations(ctx, x.data(), rows, in, 64, qa);
  std::vector<float> d(size_t(rows * out)), r(d.size()), y = poisoned(d.size()), scratch;
  draft_matmul_ref(planes.draft(), qa, d.data());
  residual_matmul_ref(planes.residual(), qa, r.data());
  target_matmul(ctx, planes.draft(), planes.residual(), qa, y.data(), scratch);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], d[i] + r[i]) << i;
}

// The reference against sum_i w_i x_i in double, w the dequantised plane, x the f32 activations.
// Bound per output (docs/FORMAT.md, "Kernel arithmetic"):
//  * activation rounding: |x_i - s_x q_i| <= s_x / 2 + 2^-21 |x_i| (q rounds x * f32(127/amax) to
//    the nearest integer; the three f32 roundings in s_x * f32(x * inv) are below 2^-21 relative),
//    so the integer path differs from the exact product by <= sum_i |w_i| (s_x/2 + 2^-21 |x_i|);
//  * float steps: each group adds one f32 product and one fma rounding (two more for the draft),
//    each <= 2^-24 relative to a partial sum bounded by sum_k |term_k|: (G + 2) 2^-23 sum_k |term_k|.
TEST(CpuKernels, ReferenceIsCloseToDoublePrecisionMatmul) {
  for (int group : kGroups) {
    for (int64_t in : {int64_t(7), int64_t(111), int64_t(1023)}) {
      for (int bits : {8, 6}) {
        const int64_t out = 17, rows = 5;
        const Planes planes(out, in, group, 2, bits, false, uint32_t(in + bits));
        const auto x = random_activations(rows, in, 21);
        QuantizedActivations qa;
        quantize_activations_ref(x.data(), rows, in, group, qa);
        std::vector<float> yr(size_t(rows * out)), yd(yr.size());
        residual_matmul_ref(planes.residual(), qa, yr.data());
        draft_matmul_ref(planes.draft(), qa, yd.data());
        const int64_t groups = qa.groups;
        std::vector<float> wr(static_cast<size_t>(in)), wd(static_cast<size_t>(in));
        for (int64_t o = 0; o < out; ++o) {
          quant::dequantize_residual_row_ref(planes.rc.data() + o * quant::code_row_bytes(in, group, bits),
                                             planes.rs.data() + o * groups, in, group, bits, wr.data());
          quant::dequantize_draft_row_ref(planes.dc.data() + o * quant::code_row_bytes(in, group, 2),
                                          planes.ds.data() + o * groups, planes.dm.data() + o * groups, in, group,
                                          2, wd.data());
          for (int64_t r = 0; r < rows; ++r) {
            double exact_r = 0, exact_d = 0, act_r = 0, act_d = 0, terms_r = 0, terms_d = 0;
            for (int64_t i = 0; i < in; ++i) {
              const double xi = x[size_t(r * in + i)], sx = qa.scale[size_t(r * groups + i / group)];
              const double qi = qa.q[size_t(r * qa.padded + i)];
              exact_r += double(wr[size_t(i)]) * xi;
              exact_d += double(wd[size_t(i)]) * xi;
              const double e = sx / 2 + std::ldexp(std::fabs(xi), -21);
              act_r += std::fabs(wr[size_t(i)]) * e;
              act_d += std::fabs(wd[size_t(i)]) * e;
              terms_r += std::fabs(wr[size_t(i)] * sx * qi);
              terms_d += std::fabs(wd[size_t(i)] * sx * qi);
            }
            const double fl = std::ldexp(double(groups + 2), -23);
            const double tol_r = act_r + fl * terms_r * 1.01, tol_d = act_d + fl * terms_d * 1.01;
            EXPECT_LE(std::fabs(yr[size_t(r * out + o)] - exact_r), tol_r) << "residual in " << in << " o " << o;
            EXPECT_LE(std::fabs(yd[size_t(r * out + o)] - exact_d), tol_d) << "draft in " << in << " o " << o;
          }
        }
      }
    }
  }
}

// BITSPLIT_ISA is read once per process, so it is checked in a child process (the CLI).
TEST(CpuKernels, EnvironmentForcesTier) {
  for (Isa isa : supported_tiers()) {
    const std::string cmd = std::string("BITSPLIT_ISA=") + isa_name(isa) + " " + BITSPLIT_CLI + " info --topology";
    FILE* f = popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string text;
    char buf[256];
    while (std::fgets(buf, sizeof(buf), f)) text += buf;
    ASSERT_EQ(pclose(f), 0) << text;
    EXPECT_NE(text.find(std::string("isa tier:      ") + isa_name(isa) + " "), std::string::npos) << text;
  }
}

TEST(CpuKernels, ContextDescribesTopology) {
  CpuContext ctx;
  EXPECT_GE(ctx.topology().physical_cores, 1);
  EXPECT_GE(ctx.topology().numa_nodes, 1);
  EXPECT_EQ(ctx.threads(), ctx.topology().physical_cores);
  EXPECT_NE(ctx.describe().find("isa tier"), std::string::npos);
  PlaneBuffer buf(ctx, 3 << 20);
  ASSERT_NE(buf.data(), nullptr);
  std::memset(buf.data(), 1, buf.size());
  EXPECT_EQ(buf.data()[buf.size() - 1], 1);
}

}  // namespace
}  // namespace bitsplit::cpu
