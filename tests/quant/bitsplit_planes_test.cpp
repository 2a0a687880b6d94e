// Bit-split planes: packing layout, round trips, error bounds, and that the optimised draft
// fit never loses to min/max.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "bitsplit/quant.h"

namespace bitsplit::quant {
namespace {

TEST(BitsplitPack, LayoutOfTwoBitCodes) {
  // Group of 32: byte j holds weights j, j+8, j+16, j+24 at bits 0, 2, 4, 6.
  uint8_t codes[32];
  for (int i = 0; i < 32; ++i) codes[i] = uint8_t(i / 8);  // 0 x8, 1 x8, 2 x8, 3 x8
  uint8_t packed[8];
  pack_group_codes(codes, 32, 2, packed);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(packed[j], 0b11100100) << j;
}

TEST(BitsplitPack, LayoutOfSixBitCodes) {
  // Group of 32 at 6 bits: 16 bytes of low nibbles (byte j: weights j, j+16), then 8 bytes of
  // high 2-bit pairs (byte j: weights j, j+8, j+16, j+24).
  uint8_t codes[32] = {};
  codes[0] = 0x3f;   // low nibble 0xf, high bits 0b11
  codes[17] = 0x25;  // low nibble 0x5, high bits 0b10
  uint8_t packed[24];
  pack_group_codes(codes, 32, 6, packed);
  EXPECT_EQ(packed[0], 0x0f);
  EXPECT_EQ(packed[1], 0x50);
  EXPECT_EQ(packed[16], 0x03);
  EXPECT_EQ(packed[16 + 1], 0x20);  // weight 17 = 1 + 2*8: byte 1, bit 4
}

TEST(BitsplitPack, EveryWidthAndGroupRoundTrips) {
  std::mt19937 rng(1);
  for (int bits : {2, 3, 4, 6, 8}) {
    for (int group : {32, 64, 128, 256}) {
      std::vector<uint8_t> codes(static_cast<size_t>(group)), back(static_cast<size_t>(group), 0xaa),
          packed(static_cast<size_t>(group * bits / 8));
      for (auto& c : codes) c = uint8_t(rng() % (1u << bits));
      pack_group_codes(codes.data(), group, bits, packed.data());
      unpack_group_codes(packed.data(), group, bits, back.data());
      ASSERT_EQ(codes, back) << bits << " bits, group " << group;
    }
  }
}

struct Planes {
  std::vector<uint8_t> dc, rc;
  std::vector<uint16_t> ds, doff, rs;
  Planes(int64_t in, const SplitParams& p)
      : dc(static_cast<size_t>(code_row_bytes(in, p.group, p.draft_bits))),
        rc(static_cast<size_t>(code_row_bytes(in, p.group, p.residual_bits ? p.residual_bits : 8))),
        ds(static_cast<size_t>(groups_per_row(in, p.group))), doff(ds.size()), rs(ds.size()) {}
  DraftRow draft() { return {dc.data(), ds.data(), doff.data()}; }
  ResidualRow resid() { return {rc.data(), rs.data()}; }
};

std::vector<float> random_row(std::mt19937& rng, int64_t n) {
  // Student-t-like heavy tails, as trained weights have.
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::chi_squared_distribution<float> c(4.0f);
  std::vector<float> w(static_cast<size_t>(n));
  for (auto& v : w) v = g(rng) / std::sqrt(c(rng) / 4.0f);
  return w;
}

// The fit is written once and compiled per tier: every tier the CPU has gives the reference's
// bytes, over groups, widths (padded last groups), draft and residual bits, importance (with zero
// and negative columns), tiny and constant groups, and the min/max fit.
// The packed (tile) layout holds exactly the file layout's codes, scales and offsets for every
// shape it covers — rows that end mid-tile, a padded last group —, with the padding rows and bytes
// zero; code by code each code sits where unpack_tile_group (which follows the layout's
// description, not pack_tiles' byte copies) looks for it.
TEST(PackedTiles, EveryShapeRoundTripsThroughTheFileLayout) {
  std::mt19937 rng(11);
  for (const bool draft : {false, true}) {
    for (const int bits : draft ? std::vector<int>{2, 3, 4} : std::vector<int>{6, 8}) {
      for (const int group : {32, 64, 128}) {
        const int64_t out = 37, in = group * 3 + group / 2;  // 3 tiles, the last with 5 rows
        const PackedShape shape = packed_shape(out, in, group, bits, draft);
        ASSERT_EQ(shape.tiles, 3);
        ASSERT_EQ(shape.tile_bytes % 64, 0);
        const int64_t row_bytes = code_row_bytes(in, group, bits);
        std::vector<uint8_t> codes(size_t(out * row_bytes));
        std::vector<uint8_t> group_codes(static_cast<size_t>(group));
        for (int64_t o = 0; o < out; ++o)
          for (int64_t k = 0; k < shape.groups; ++k) {
            for (auto& c : group_codes) c = uint8_t(rng() % (1u << bits));
            pack_group_codes(group_codes.data(), group, bits, codes.data() + o * row_bytes + k * group * bits / 8);
          }
        std::vector<uint16_t> scales(size_t(out * shape.groups)), offsets(scales.size());
        for (auto& v : scales) v = uint16_t(rng());
        for (auto& v : offsets) v = uint16_t(rng());
        std::vector<uint8_t> tiles(size_t(shape.bytes()), 0xAB);  // garbage pack_tiles must overwrite
        pack_tiles(shape, codes.data(), scales.data(), draft ? offsets.data() : nullptr, tiles.data(), 0, shape.tiles);
        std::vector<uint8_t> codes2(codes.size());
        std::vector<uint16_t> scales2(scales.size()), offsets2(offsets.size());
        unpack_tiles(shape, tiles.data(), codes2.data(), scales2.data(), draft ? offsets2.data() : nullptr);
        const std::string what = std::string(draft ? "draft " : "residual ") + std::to_string(bits) + " bits, g " +
                                 std::to_string(group);
        EXPECT_EQ(codes2, codes) << what;
        EXPECT_EQ(scales2, scales) << what;
        if (draft) {
          EXPECT_EQ(offsets2, offsets) << what;
        }
        // Row 5 of the last tile (output 37) does not exist: its codes unpack as zeros.
        unpack_tile_group(shape, tiles.data() + 2 * shape.tile_bytes, 5, 0, group_codes.data());
        EXPECT_EQ(group_codes, std::vector<uint8_t>(size_t(group), 0)) << what;
        // The tile's tail past its scales (and offsets) is zero padding, whatever was there.
        const int64_t used = shape.groups * (shape.code_block_bytes() + (draft ? 64 : 32));
        for (int64_t t = 0; t < shape.tiles; ++t)
          for (int64_t b = used; b < shape.tile_bytes; ++b) ASSERT_EQ(tiles[size_t(t * shape.tile_bytes + b)], 0) << what;
      }
    }
  }
}

TEST(BitsplitQuantizer, EveryFitTierGivesTheReferenceBytes) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> imp(-0.5f, 4.0f);
  int tiers_checked = 0;
  for (FitTier tier : {FitTier::kAvx2, FitTier::kAvx512}) {
    if (!fit_tier_supported(tier)) continue;
    ++tiers_checked;
    int cases = 0;
    for (int group : {8, 32, 64, 128, 256}) {
      for (int dbits : {2, 3, 4}) {
        for (int rbits : {0, 6, 8}) {
          for (int64_t in : {1, 24, 64, 111, 300}) {
            SplitParams p;
            p.group = group;
            p.draft_bits = dbits;
            p.residual_bits = rbits;
            p.fit = cases % 7 == 3 ? DraftFit::kMinMax : DraftFit::kOptimized;
            auto w = random_row(rng, in);
            if (cases % 5 == 1) for (int64_t i = 0; i < std::min<int64_t>(in, 40); ++i) w[size_t(i)] = 0.25f;
            if (cases % 5 == 2) for (auto& v : w) v *= 1e-6f;  // fp16 subnormal scales
            std::vector<float> importance(static_cast<size_t>(in));
            for (auto& v : importance) v = imp(rng);
            const float* im = cases % 2 ? importance.data() : nullptr;
            Planes ref(in, p), got(in, p);
            split_row_ref(w.data(), im, in, p, ref.draft(), ref.resid());
            split_row(tier, w.data(), im, in, p, got.draft(), got.resid());
            const std::string what = std::string(fit_tier_name(tier)) + " group " + std::to_string(group) + " D" +
                                     std::to_string(dbits) + " R" + std::to_string(rbits) + " in " + std::to_string(in);
            ASSERT_EQ(got.dc, ref.dc) << what;
            ASSERT_EQ(got.ds, ref.ds) << what;
            ASSERT_EQ(got.doff, ref.doff) << what;
            if (rbits) {
              ASSERT_EQ(got.rc, ref.rc) << what;
              ASSERT_EQ(got.rs, ref.rs) << what;
            }
            ++cases;
          }
        }
      }
    }
  }
  if (tiers_checked == 0) GTEST_SKIP() << "this CPU has no vector fit tier beyond the reference";
}

// Ties between candidates' errors are rare, so a tier whose sums round differently (a fused
// multiply-add, another order) may show only over many groups: 16k groups of a real-model shape.
// The residual of a draft fitted elsewhere (error feedback): handed split_row's own decoded draft,
// fit_residual_row codes exactly split_row's residual, on every tier the CPU has.
TEST(BitsplitQuantizer, ResidualOfAGivenDraftIsSplitRowsResidual) {
  std::mt19937 rng(13);
  int cases = 0;
  for (FitTier tier : {FitTier::kReference, FitTier::kAvx2, FitTier::kAvx512}) {
    if (!fit_tier_supported(tier)) continue;
    for (int group : {32, 64, 128}) {
      for (int rbits : {6, 8}) {
        for (int64_t in : {24, 64, 300}) {
          SplitParams p;
          p.group = group;
          p.residual_bits = rbits;
          const auto w = random_row(rng, in);
          std::vector<float> importance(static_cast<size_t>(in));
          for (auto& v : importance) v = float(rng() % 100) / 25.0f;
          const float* im = cases++ % 2 ? importance.data() : nullptr;
          Planes ref(in, p), got(in, p);
          split_row_ref(w.data(), im, in, p, ref.draft(), ref.resid());
          std::vector<float> d(static_cast<size_t>(in));
          dequantize_draft_row_ref(ref.dc.data(), ref.ds.data(), ref.doff.data(), in, group, p.draft_bits, d.data());
          fit_residual_row(tier, w.data(), d.data(), im, in, p, got.resid());
          const std::string what = std::string(fit_tier_name(tier)) + " group " + std::to_string(group) + " R" +
                                   std::to_string(rbits) + " in " + std::to_string(in);
          ASSERT_EQ(got.rc, ref.rc) << what;
          ASSERT_EQ(got.rs, ref.rs) << what;
        }
      }
    }
  }
  EXPECT_GE(cases, 18);
}

TEST(BitsplitQuantizer, EveryFitTierGivesTheReferenceBytesOverManyGroups) {
  std::mt19937 rng(12);
  constexpr int64_t kIn = 4096;
  for (FitTier tier : {FitTier::kAvx2, FitTier::kAvx512}) {
    if (!fit_tier_supported(tier)) continue;
    for (int rbits : {6, 8}) {
      SplitParams p;
      p.residual_bits = rbits;
      for (int row = 0; row < 128; ++row) {
        const auto w = random_row(rng, kIn);
        Planes ref(kIn, p), got(kIn, p);
        split_row_ref(w.data(), nullptr, kIn, p, ref.draft(), ref.resid());
        split_row(tier, w.data(), nullptr, kIn, p, got.draft(), got.resid());
        ASSERT_TRUE(got.dc == ref.dc && got.ds == ref.ds && got.doff == ref.doff && got.rc == ref.rc && got.rs == ref.rs)
            << fit_tier_name(tier) << " R" << rbits << " row " << row;
      }
    }
  }
}

// D + R reproduces every weight to within one residual step of its group (the step bounds
// the rounding error, and clipping only ever cuts the single largest residual by < 1 step).
TEST(BitsplitQuantizer, DraftPlusResidualErrorWithinOneResidualStep) {
  std::mt19937 rng(2);
  for (int rbits : {6, 8}) {
    for (int group : {32, 64, 128}) {
      for (int64_t in : {1, 7, 64, 111, 172, 1023}) {
        SplitParams p;
        p.group = group;
        p.residual_bits = rbits;
        const auto w = random_row(rng, in);
        Planes planes(in, p);
        split_row_ref(w.data(), nullptr, in, p, planes.draft(), planes.resid());
        std::vector<float> d(static_cast<size_t>(in), NAN), r(static_cast<size_t>(in), NAN);
        dequantize_draft_row_ref(planes.dc.data(), planes.ds.data(), planes.doff.data(), in, group, 2, d.data());
        dequantize_residual_row_ref(planes.rc.data(), planes.rs.data(), in, group, rbits, r.data());
        for (int64_t i = 0; i < in; ++i) {
          // Tiny residual scales are fp16 subnormals, whose absolute precision is 2^-24: the
          // stored step may be off by half of that, times the largest code.
          const float step = fp16_to_fp32(planes.rs[size_t(i / group)]);
          const float tolerance = step + float(1 << (rbits - 1)) * 0x1p-25f;
          ASSERT_LE(std::fabs(w[size_t(i)] - (d[size_t(i)] + r[size_t(i)])), tolerance)
              << rbits << "-bit residual, group " << group << ", in " << in << ", i " << i;
        }
      }
    }
  }
}

double draft_error(const std::vector<float>& w, int group, DraftFit fit, int rbits = 8) {
  SplitParams p;
  p.group = group;
  p.fit = fit;
  p.residual_bits = rbits;
  const int64_t in = int64_t(w.size());
  Planes planes(in, p);
  split_row_ref(w.data(), nullptr, in, p, planes.draft(), planes.resid());
  std::vector<float> d(w.size());
  dequantize_draft_row_ref(planes.dc.data(), planes.ds.data(), planes.doff.data(), in, group, 2, d.data());
  double e = 0;
  for (size_t i = 0; i < w.size(); ++i) e += (w[i] - d[i]) * (w[i] - d[i]);
  return e;
}

TEST(BitsplitQuantizer, OptimisedDraftNeverWorseThanMinMaxPerGroup) {
  std::mt19937 rng(3);
  double opt_total = 0, mm_total = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const auto w = random_row(rng, 64);
    const double opt = draft_error(w, 64, DraftFit::kOptimized);
    const double mm = draft_error(w, 64, DraftFit::kMinMax);
    ASSERT_LE(opt, mm * (1 + 1e-6)) << trial;  // min/max is one of the candidates
    opt_total += opt;
    mm_total += mm;
  }
  // Clipping search pays off clearly on heavy-tailed groups (measured ~0.5x).
  EXPECT_LT(opt_total, 0.8 * mm_total);
}

TEST(BitsplitQuantizer, MinMaxFitEqualsMinMaxBaseline) {
  std::mt19937 rng(4);
  const auto w = random_row(rng, 200);
  SplitParams p;
  p.fit = DraftFit::kMinMax;
  p.residual_bits = 0;
  Planes planes(200, p);
  split_row_ref(w.data(), nullptr, 200, p, planes.draft(), planes.resid());
  std::vector<float> d(200), base(200);
  dequantize_draft_row_ref(planes.dc.data(), planes.ds.data(), planes.doff.data(), 200, 64, 2, d.data());
  minmax_roundtrip_row_ref(w.data(), 200, 64, 2, base.data());
  EXPECT_EQ(d, base);
}

// The group's smallest weight is the min/max fit's offset; of equal smallest weights the first
// counts, which shows only in the sign of a zero (-0 and +0 are different fp16 codes). Every tier.
TEST(BitsplitQuantizer, ASignedZeroMinimumKeepsTheFirstZerosSign) {
  for (const bool negative_first : {true, false}) {
    std::vector<float> w(64);
    for (int i = 0; i < 64; ++i) w[size_t(i)] = 0.25f + 0.01f * float(i);
    w[3] = negative_first ? -0.0f : 0.0f;  // lane 3 of the first vector
    w[33] = negative_first ? 0.0f : -0.0f;  // lane 1 of the third: a lane-order scan sees it first
    SplitParams p;
    p.fit = DraftFit::kMinMax;
    p.residual_bits = 0;
    for (const FitTier tier : {FitTier::kReference, FitTier::kAvx2, FitTier::kAvx512}) {
      if (!fit_tier_supported(tier)) continue;
      Planes planes(64, p);
      split_row(tier, w.data(), nullptr, 64, p, planes.draft(), planes.resid());
      EXPECT_EQ(planes.doff[0], negative_first ? 0x8000 : 0x0000) << fit_tier_name(tier);
    }
  }
}

TEST(BitsplitQuantizer, ImportanceShiftsErrorToUnimportantColumns) {
  std::mt19937 rng(5);
  double err_important = 0, err_plain = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const auto w = random_row(rng, 64);
    std::vector<float> imp(64, 0.01f);
    for (int i = 0; i < 8; ++i) imp[size_t(i)] = 100.0f;  // first 8 columns matter most
    SplitParams p;
    p.residual_bits = 0;
    Planes a(64, p), b(64, p);
    split_row_ref(w.data(), imp.data(), 64, p, a.draft(), a.resid());
    split_row_ref(w.data(), nullptr, 64, p, b.draft(), b.resid());
    std::vector<float> da(64), db(64);
    dequantize_draft_row_ref(a.dc.data(), a.ds.data(), a.doff.data(), 64, 64, 2, da.data());
    dequantize_draft_row_ref(b.dc.data(), b.ds.data(), b.doff.data(), 64, 64, 2, db.data());
    for (int i = 0; i < 8; ++i) {
      err_important += std::pow(w[size_t(i)] - da[size_t(i)], 2);
      err_plain += std::pow(w[size_t(i)] - db[size_t(i)], 2);
    }
  }
  EXPECT_LT(err_important, err_plain);
}

TEST(BitsplitQuantizer, ConstantAndZeroGroups) {
  for (float value : {0.0f, 0.5f, -3.0f}) {
    std::vector<float> w(64, value);
    SplitParams p;
    Planes planes(64, p);
    split_row_ref(w.data(), nullptr, 64, p, planes.draft(), planes.resid());
    std::vector<float> d(64), r(64);
    dequantize_draft_row_ref(planes.dc.data(), planes.ds.data(), planes.doff.data(), 64, 64, 2, d.data());
    dequantize_residual_row_ref(planes.rc.data(), planes.rs.data(), 64, 64, 8, r.data());
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(d[size_t(i)] + r[size_t(i)], value, std::fabs(value) * 1e-3f);
  }
}

}  // namespace
}  // namespace bitsplit::quant

// ---- draft precision under a budget (quant.h) ----
namespace bitsplit::quant {
namespace {

DraftTensorErrors tensor(const std::string& name, int64_t rows, int64_t cols, double e2, double e3, double e4) {
  DraftTensorErrors t;
  t.name = name;
  t.rows = rows;
  t.cols = cols;
  t.error[0] = e2;
  t.error[1] = e3;
  t.error[2] = e4;
  return t;
}

double bits_per_weight(const std::vector<DraftTensorErrors>& ts, const DraftAllocation& a, int group) {
  double bytes = 0, weights = 0;
  for (const auto& t : ts) {
    bytes += double(draft_plane_bytes(t.rows, t.cols, group, a.bits.at(t.name)));
    weights += double(t.rows * t.cols);
  }
  return 8.0 * bytes / weights;
}

TEST(DraftBudget, StaysWithinTheBudgetAndSpendsItWhereTheErrorDropsMost) {
  // Same shapes; "hot" loses 10x more error per added bit than "cold".
  const std::vector<DraftTensorErrors> ts = {tensor("cold", 64, 256, 0.10, 0.03, 0.01),
                                             tensor("hot", 64, 256, 1.00, 0.30, 0.10)};
  // Budget for one tensor at 3 bits: 2.5 / 3.5 bits per weight at group 64 -> 3.0 on average.
  auto a = allocate_draft_bits(ts, 64, 3.0);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->bits.at("hot"), 3);
  EXPECT_EQ(a->bits.at("cold"), 2);
  EXPECT_DOUBLE_EQ(a->bits_per_weight, 3.0);
  EXPECT_DOUBLE_EQ(a->bits_per_weight, bits_per_weight(ts, *a, 64));
  EXPECT_DOUBLE_EQ(a->weighted_error, 0.10 + 0.30);
  // Slightly less than that: nothing fits but all-2-bit.
  a = allocate_draft_bits(ts, 64, 2.99);
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->bits.at("hot"), 2);
  EXPECT_DOUBLE_EQ(a->bits_per_weight, 2.5);
}

TEST(DraftBudget, SmallTensorsAreCheapToUpgrade) {
  // Equal error at every width; "small" costs a quarter of the bytes, so it goes up first.
  const std::vector<DraftTensorErrors> ts = {tensor("big", 256, 256, 1.0, 0.3, 0.1),
                                             tensor("small", 64, 256, 1.0, 0.3, 0.1)};
  auto a = allocate_draft_bits(ts, 64, 2.95);  // room for small -> 4 bits (+2 x 64 x 256 bits = 2.9), not big -> 3
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->bits.at("small"), 4);
  EXPECT_EQ(a->bits.at("big"), 2);
  EXPECT_DOUBLE_EQ(a->bits_per_weight, 2.9);
}

TEST(DraftBudget, MoreBudgetNeverMeansMoreError) {
  std::vector<DraftTensorErrors> ts;
  for (int i = 0; i < 12; ++i) {
    const double s = 0.5 + 0.37 * i;
    ts.push_back(tensor(std::string("t").append(std::to_string(i)), 32 * (1 + i % 4), 64 * (1 + i % 3), s, s * (0.2 + 0.05 * (i % 5)), s * 0.05));
  }
  double previous = INFINITY;
  for (double budget = 2.5; budget <= 4.6; budget += 0.1) {
    auto a = allocate_draft_bits(ts, 64, budget);
    ASSERT_TRUE(a.is_ok()) << budget;
    EXPECT_LE(a->bits_per_weight, budget + 1e-9);
    EXPECT_DOUBLE_EQ(a->bits_per_weight, bits_per_weight(ts, *a, 64));
    EXPECT_LE(a->weighted_error, previous + 1e-12) << budget;
    previous = a->weighted_error;
  }
  auto all4 = allocate_draft_bits(ts, 64, 4.5);
  ASSERT_TRUE(all4.is_ok());
  for (const auto& [name, bits] : all4->bits) EXPECT_EQ(bits, 4) << name;
}

TEST(DraftBudget, ImpossibleBudgetsAreClearErrors) {
  const std::vector<DraftTensorErrors> ts = {tensor("a", 64, 100, 1, 0.5, 0.1)};  // 100 -> padded to 128
  auto a = allocate_draft_bits(ts, 64, 2.5);
  ASSERT_FALSE(a.is_ok());
  EXPECT_NE(a.status().message().find("below the smallest draft (3.200"), std::string::npos) << a.status().message();
  EXPECT_FALSE(allocate_draft_bits(ts, 64, 0.0).is_ok());
  EXPECT_FALSE(allocate_draft_bits(ts, 64, NAN).is_ok());
}

TEST(DraftBudget, RowErrorsFallWithBitsAndFollowTheImportance) {
  std::vector<float> w(192);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * float(i)) * (1.0f + 0.01f * float(i % 17));
  SplitParams p;
  double err[3] = {}, signal = 0;
  draft_row_errors(w.data(), nullptr, int64_t(w.size()), p, err, &signal);
  EXPECT_GT(err[0], err[1]);
  EXPECT_GT(err[1], err[2]);
  EXPECT_GT(err[2], 0.0);
  double sum_sq = 0;
  for (float v : w) sum_sq += double(v) * v;
  EXPECT_NEAR(signal, sum_sq, 1e-9 * sum_sq);
  // Zero importance on the second half: only the first half's error and signal count.
  std::vector<float> imp(w.size(), 1.0f);
  std::fill(imp.begin() + 96, imp.end(), 0.0f);
  double err_half[3] = {}, signal_half = 0;
  draft_row_errors(w.data(), imp.data(), int64_t(w.size()), p, err_half, &signal_half);
  EXPECT_LT(signal_half, signal);
  EXPECT_LT(err_half[0], err[0]);
  EXPECT_GT(draft_class_weight("blk.3.attn_v", 30), draft_class_weight("blk.3.attn_q", 30));
  EXPECT_GT(draft_class_weight("blk.0.attn_q", 30), draft_class_weight("blk.3.attn_q", 30));
  EXPECT_EQ(draft_class_weight("output", 30), 75.0);
}

}  // namespace
}  // namespace bitsplit::quant
