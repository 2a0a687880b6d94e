// BitDelta: sign-plane packing (bit-exact), round trips over row tails, and delta files
// (layout, metadata, base identity checks, applying a delta) on tiny models. The identity of a
// converted base: tests/engine/convert/delta_base_identity_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "bitsplit/delta_format.h"
#include "delta_testing.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

using quant::DeltaAlpha;

std::vector<float> random_delta(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.01f);
  std::vector<float> d(static_cast<size_t>(n));
  for (auto& x : d) x = dist(rng);
  return d;
}

TEST(BitDeltaPacking, BitExactLayout) {
  // Row 0 (in = 9): signs - + - - + + + - | - ; row 1 all positive except element 8.
  const std::vector<float> d = {-1, 2, -3, -4, 5, 6, 7, -8, -9,  //
                                1, 1, 1, 1, 1, 1, 1, 1, -1};
  std::vector<uint8_t> signs(4, 0xAA);  // poisoned
  std::vector<float> alpha(2, NAN);
  quant::bitdelta_encode_ref(d.data(), 2, 9, DeltaAlpha::kRow, signs.data(), alpha.data());
  // bit j of byte k = sign of element 8k + j: row 0 byte 0 = bits 0,2,3,7 = 0b10001101.
  EXPECT_EQ(signs, (std::vector<uint8_t>{0x8D, 0x01, 0x00, 0x01}));
  EXPECT_EQ(alpha[0], 45.0f / 9.0f);
  EXPECT_EQ(alpha[1], 1.0f);
  float m = NAN;
  quant::bitdelta_encode_ref(d.data(), 2, 9, DeltaAlpha::kMatrix, signs.data(), &m);
  EXPECT_EQ(m, float(54.0 / 18.0));
  // Zero and negative zero count as positive (bit 0): Δ̂ then moves the weight by +α, which
  // costs the same as -α and keeps -0.0 from depending on how the subtraction was done.
  const float zeros[2] = {0.0f, -0.0f};
  uint8_t z = 0xFF;
  float za = NAN;
  quant::bitdelta_encode_ref(zeros, 1, 2, DeltaAlpha::kRow, &z, &za);
  EXPECT_EQ(z, 0);
  EXPECT_EQ(za, 0.0f);
}

class BitDeltaTails : public ::testing::TestWithParam<int64_t> {};

TEST_P(BitDeltaTails, RoundTripPerRowAndPerMatrix) {
  const int64_t in = GetParam(), out = 5;
  const int64_t rb = quant::delta_sign_row_bytes(in);
  EXPECT_EQ(rb, (in + 7) / 8);
  const std::vector<float> d = random_delta(out * in, uint64_t(in));
  for (DeltaAlpha mode : {DeltaAlpha::kRow, DeltaAlpha::kMatrix}) {
    std::vector<uint8_t> signs(size_t(out * rb), 0x5A);
    std::vector<float> alpha(size_t(mode == DeltaAlpha::kRow ? out : 1), NAN);
    quant::bitdelta_encode_ref(d.data(), out, in, mode, signs.data(), alpha.data());
    double total = 0;
    for (int64_t r = 0; r < out; ++r) {
      double row = 0;
      for (int64_t i = 0; i < in; ++i) {
        const float x = d[size_t(r * in + i)];
        row += std::fabs(double(x));
        ASSERT_EQ((signs[size_t(r * rb + i / 8)] >> (i % 8)) & 1, x < 0 ? 1 : 0) << "row " << r << " col " << i;
      }
      for (int64_t i = in; i < rb * 8; ++i)  // unused tail bits are zero
        ASSERT_EQ((signs[size_t(r * rb + i / 8)] >> (i % 8)) & 1, 0) << "tail bit " << i;
      if (mode == DeltaAlpha::kRow) {
        EXPECT_EQ(alpha[size_t(r)], float(row / double(in)));
      }
      total += row;
    }
    if (mode == DeltaAlpha::kMatrix) {
      EXPECT_EQ(alpha[0], float(total / double(out * in)));
    }
    for (int64_t r = 0; r < out; ++r) {
      const float a = alpha[mode == DeltaAlpha::kRow ? size_t(r) : 0];
      std::vector<float> row(size_t(in), NAN);
      quant::bitdelta_decode_row_ref(signs.data() + r * rb, a, in, row.data());
      for (int64_t i = 0; i < in; ++i) {
        const float x = d[size_t(r * in + i)];
        ASSERT_EQ(row[size_t(i)], x < 0 ? -a : a);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, BitDeltaTails, ::testing::Values(1, 7, 9, 64, 111));

// ---- delta files ----

using testing::DeltaFileTest;

TEST_F(DeltaFileTest, WritesSignPlanesFullTensorsAndMetadata) {
  testing::TinyModelSpec spec;
  spec.type = gguf::TensorType::F16;  // a source type other than f32
  spec.ff = 72;                       // ffn_down rows of 72: a sign row tail of 0 bits; attn rows of 32
  const std::string base_path = dir_.file("base.gguf"), ft_path = dir_.file("ft.gguf"), out = dir_.file("v.delta.gguf");
  ASSERT_TRUE(testing::make_tiny_model(spec).write_file(base_path).is_ok());
  auto base = open_weights(base_path);
  ASSERT_TRUE(base.is_ok());
  ASSERT_TRUE(finetune(**base, 7).write_file(ft_path).is_ok());
  auto ft = open_weights(ft_path);
  ASSERT_TRUE(ft.is_ok());

  for (DeltaAlpha mode : {DeltaAlpha::kRow, DeltaAlpha::kMatrix}) {
    DeltaReport report;
    ASSERT_TRUE(make_delta(**base, **ft, out, {mode}, &report).is_ok());
    EXPECT_EQ(report.sign_tensors, 2 * 7 + 2);  // projections, output, token_embd
    EXPECT_EQ(report.omitted_tensors, 1);       // blk.1.ffn_norm
    EXPECT_EQ(report.base_sha256, *(*base)->content_sha256());
    auto d = open_delta(out);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_EQ(d->alpha, mode);
    EXPECT_EQ(d->name, "tiny-ft");
    EXPECT_EQ(d->base_sha256, report.base_sha256);
    EXPECT_EQ(d->finetuned_sha256, *(*ft)->content_sha256());
    const auto& m = d->file->metadata();
    EXPECT_EQ(*m.get_string("general.type"), "bitsplit.delta");
    EXPECT_EQ(*m.get_int("bitsplit.delta.format_version"), 1);
    EXPECT_EQ(*m.get_string("bitsplit.delta.alpha"), mode == DeltaAlpha::kRow ? "row" : "matrix");

    const auto* down = d->file->find_tensor("blk.1.ffn_down.delta_signs");
    ASSERT_NE(down, nullptr);
    EXPECT_EQ(down->type, gguf::TensorType::I8);
    EXPECT_EQ(down->dims, (std::vector<int64_t>{9, spec.embd}));  // ceil(72 / 8) bytes per row
    const auto* alpha = d->file->find_tensor("blk.1.ffn_down.delta_alpha");
    ASSERT_NE(alpha, nullptr);
    EXPECT_EQ(alpha->dims, (std::vector<int64_t>{mode == DeltaAlpha::kRow ? spec.embd : 1}));
    EXPECT_NE(d->find("token_embd.weight"), nullptr);
    ASSERT_NE(d->find("blk.0.attn_norm.weight"), nullptr);
    EXPECT_EQ(d->find("blk.0.attn_norm.weight")->kind, DeltaTensor::Kind::kFull);
    EXPECT_EQ(d->find("blk.1.ffn_norm.weight"), nullptr);

    // Applying: full tensors come back exactly, omitted ones as the base, sign planes as
    // base + α·sign recomputed here from the two models.
    EXPECT_EQ(*apply_delta_f32(*d, **base, "blk.0.attn_norm.weight"),
              *(*ft)->load_f32(*(*ft)->find_tensor("blk.0.attn_norm.weight")));
    EXPECT_EQ(*apply_delta_f32(*d, **base, "blk.1.ffn_norm.weight"),
              *(*base)->load_f32(*(*base)->find_tensor("blk.1.ffn_norm.weight")));
    const auto bw = *(*base)->load_f32(*(*base)->find_tensor("blk.1.ffn_down.weight"));
    const auto fw = *(*ft)->load_f32(*(*ft)->find_tensor("blk.1.ffn_down.weight"));
    auto applied = apply_delta_f32(*d, **base, "blk.1.ffn_down.weight");
    ASSERT_TRUE(applied.is_ok()) << applied.status().message();
    const int64_t in = spec.ff, rows = spec.embd;
    double all = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < in; ++i) all += std::fabs(double(fw[size_t(r * in + i)]) - bw[size_t(r * in + i)]);
    for (int64_t r = 0; r < rows; ++r) {
      double row = 0;
      for (int64_t i = 0; i < in; ++i) row += std::fabs(double(fw[size_t(r * in + i)] - bw[size_t(r * in + i)]));
      const float a = mode == DeltaAlpha::kRow ? float(row / double(in)) : float(all / double(rows * in));
      for (int64_t i = 0; i < in; ++i) {
        const size_t k = size_t(r * in + i);
        const float step = fw[k] - bw[k] < 0 ? -a : a;
        // α may differ from the writer's in the last bit (f32 vs double differences).
        ASSERT_NEAR((*applied)[k], bw[k] + step, 1e-6f * (std::fabs(bw[k]) + a)) << r << "," << i;
      }
    }
  }
}

TEST_F(DeltaFileTest, ShapeChangesAreStoredInFullAndMissingTensorsAreErrors) {
  testing::TinyModelSpec spec;
  const std::string base_path = dir_.file("base.gguf");
  ASSERT_TRUE(testing::make_tiny_model(spec).write_file(base_path).is_ok());
  auto base = open_weights(base_path);
  // The fine-tune grows the vocabulary (token_embd and output get more rows).
  testing::TinyModelSpec bigger = spec;
  bigger.vocab = spec.vocab + 16;
  bigger.seed = 5;
  ASSERT_TRUE(testing::make_tiny_model(bigger).write_file(dir_.file("ft.gguf")).is_ok());
  auto ft = open_weights(dir_.file("ft.gguf"));
  ASSERT_TRUE(make_delta(**base, **ft, dir_.file("v.gguf"), {}, nullptr).is_ok());
  auto d = open_delta(dir_.file("v.gguf"));
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  ASSERT_NE(d->find("token_embd.weight"), nullptr);
  EXPECT_EQ(d->find("token_embd.weight")->kind, DeltaTensor::Kind::kFull);
  EXPECT_EQ(d->find("blk.0.attn_q.weight")->kind, DeltaTensor::Kind::kSigns);
  EXPECT_EQ(apply_delta_f32(*d, **base, "output.weight")->size(), size_t(bigger.vocab * spec.embd));

  // A fine-tune without a tensor of the base cannot be expressed.
  gguf::Writer partial;
  for (const auto& [k, v] : (*base)->metadata().entries())
    if (k != "general.alignment") partial.metadata().set(k, v);
  for (const auto& t : (*base)->tensors()) {
    if (t.name == "blk.1.ffn_up.weight") continue;
    ASSERT_TRUE(partial.add_tensor(t.name, gguf::TensorType::F32, t.dims,
                                   testing::encode_tensor(gguf::TensorType::F32, *(*base)->load_f32(t)))
                    .is_ok());
  }
  auto p = testing::weights_from_writer(partial, "partial.gguf");
  const Status st = make_delta(**base, *p, dir_.file("w.gguf"), {}, nullptr);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("blk.1.ffn_up.weight"), std::string::npos) << st.message();
  EXPECT_FALSE(std::filesystem::exists(dir_.file("w.gguf")));
}

}  // namespace
}  // namespace bitsplit
