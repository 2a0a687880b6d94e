// Bit-split planes: packing layout, round trips, error bounds, and that the optimised draft
// fit never loses to min/max.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
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
