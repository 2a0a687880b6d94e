// bitsplit convert: file layout and metadata, determinism, loading D + R back, and errors.
#include <gtest/gtest.h>

#include <limits>

#include <cstring>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "bitsplit/convert.h"
#include "bitsplit/model.h"
#include "convert_testing.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

namespace fs = std::filesystem;

using testing::ConvertTest;
using testing::logits_of;

TEST_F(ConvertTest, WritesPlanesMetadataAndLoadsBackAsDPlusR) {
  testing::TinyModelSpec spec;
  spec.ff = 72;  // not a multiple of the group: ffn_down rows get a padded last group
  const std::string src = write_tiny(spec);
  const std::string out = path("out.gguf");
  auto source = open_weights(src);
  ASSERT_TRUE(source.is_ok());
  ConvertOptions options;
  ConvertReport report;
  int progress_calls = 0;
  ASSERT_TRUE(convert_model(**source, out, options, [&](const ConvertProgress&) { ++progress_calls; }, &report).is_ok());
  EXPECT_GT(progress_calls, 0);
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  EXPECT_EQ(report.source_sha256.size(), 64u);

  auto converted = open_weights(out);
  ASSERT_TRUE(converted.is_ok()) << converted.status().message();
  const auto& m = (*converted)->metadata();
  EXPECT_EQ(*m.get_int("bitsplit.group_size"), 64);
  EXPECT_EQ(*m.get_int("bitsplit.residual_bits"), 8);
  EXPECT_EQ(*m.get_string("bitsplit.source_sha256"), report.source_sha256);
  EXPECT_EQ((*converted)->find_tensor("blk.0.attn_q.weight"), nullptr);
  const auto* codes = (*converted)->find_tensor("blk.1.ffn_down.draft_codes");
  ASSERT_NE(codes, nullptr);
  EXPECT_EQ(codes->type, gguf::TensorType::I8);
  EXPECT_EQ(codes->dims, (std::vector<int64_t>{128 / 4, spec.embd}));  // 72 padded to 128
  EXPECT_EQ((*converted)->find_tensor("token_embd.weight")->type, gguf::TensorType::Q8_0);
  EXPECT_EQ((*converted)->find_tensor("blk.0.attn_norm.weight")->type, gguf::TensorType::F32);

  // The converted model's logits equal those of the f32 model with every projection replaced
  // by its D + R reconstruction and the embedding by Q8_0, computed independently here.
  auto src_model = Model::load(**source);
  ASSERT_TRUE(src_model.is_ok());
  auto expected = src_model->transformed(
      [](const std::string&, const std::vector<float>& w, int64_t rows, int64_t cols) {
        quant::SplitParams p;
        std::vector<float> out(w.size()), r(static_cast<size_t>(cols));
        for (int64_t o = 0; o < rows; ++o) {
          std::vector<uint8_t> dc(static_cast<size_t>(quant::code_row_bytes(cols, 64, 2)));
          std::vector<uint8_t> rc(static_cast<size_t>(quant::code_row_bytes(cols, 64, 8)));
          std::vector<uint16_t> ds(static_cast<size_t>(quant::groups_per_row(cols, 64))), dof(ds.size()), rs(ds.size());
          quant::split_row_ref(w.data() + o * cols, nullptr, cols, p, {dc.data(), ds.data(), dof.data()}, {rc.data(), rs.data()});
          quant::dequantize_draft_row_ref(dc.data(), ds.data(), dof.data(), cols, 64, 2, out.data() + o * cols);
          quant::dequantize_residual_row_ref(rc.data(), rs.data(), cols, 64, 8, r.data());
          for (int64_t i = 0; i < cols; ++i) out[size_t(o * cols + i)] += r[size_t(i)];
        }
        return out;
      },
      [](const std::string&, const std::vector<float>& w, int64_t, int64_t) {
        std::vector<quant::BlockQ8_0> b(w.size() / 32);
        std::vector<float> out(w.size());
        quant::quantize_q8_0_ref(w, b);
        quant::dequantize_q8_0_ref(b, out);
        return out;
      });
  KvCache cache(expected.config(), 5);
  auto want = forward_pass(expected, cache, Batch::causal(std::vector<int32_t>{1, 7, 3, 9, 4}, 0, true));
  auto got = logits_of(**converted);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(*got, *want);

  // The draft model loads too, and differs from the target.
  auto draft = logits_of(**converted, {.draft_only = true, .keep_planes = false});
  ASSERT_TRUE(draft.is_ok()) << draft.status().message();
  EXPECT_NE(*draft, *got);

  // The engine's path keeps the planes and quantises activations to int8 per group: close
  // to the f32 reconstruction. Each activation moves by at most amax/254 (0.4 % of its
  // group's largest), so logits move by a few tenths of a percent per layer; 3 % of the
  // logit scale over two layers and the head leaves room while catching a wrong plane.
  auto kernel = logits_of(**converted, {});
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().message();
  double scale = 0, diff = 0;
  for (size_t i = 0; i < got->size(); ++i) {
    scale = std::max(scale, std::fabs(double((*got)[i])));
    diff = std::max(diff, std::fabs(double((*got)[i]) - (*kernel)[i]));
  }
  EXPECT_LE(diff, 0.03 * scale) << "max |f32 - kernel| " << diff << " of scale " << scale;
  EXPECT_GT(diff, 0.0) << "int8 activations should change something";
}

TEST_F(ConvertTest, ConvertingTwiceGivesIdenticalBytes) {
  const std::string src = write_tiny({});
  auto source = open_weights(src);
  ASSERT_TRUE(source.is_ok());
  for (int residual : {6, 8}) {
    ConvertOptions o;
    o.split.residual_bits = residual;
    ASSERT_TRUE(convert_model(**source, path("a.gguf"), o, nullptr, nullptr).is_ok());
    ASSERT_TRUE(convert_model(**source, path("b.gguf"), o, nullptr, nullptr).is_ok());
    EXPECT_EQ(read_bytes(path("a.gguf")), read_bytes(path("b.gguf"))) << residual;
  }
}

TEST_F(ConvertTest, TiedOutputGetsItsOwnPlanes) {
  testing::TinyModelSpec spec;
  spec.tied_output = true;
  auto source = open_weights(write_tiny(spec));
  ASSERT_TRUE(source.is_ok());
  ASSERT_TRUE(convert_model(**source, path("t.gguf"), {}, nullptr, nullptr).is_ok());
  auto converted = open_weights(path("t.gguf"));
  ASSERT_TRUE(converted.is_ok());
  EXPECT_NE((*converted)->find_tensor("output.draft_codes"), nullptr);
  auto cfg = read_model_config(**converted);
  ASSERT_TRUE(cfg.is_ok());
  EXPECT_FALSE(cfg->tied_output);
  EXPECT_TRUE(logits_of(**converted).is_ok());
}

TEST_F(ConvertTest, QuantisedSourceIsReportedAndReproduced) {
  testing::TinyModelSpec spec;
  spec.type = gguf::TensorType::Q8_0;
  auto source = open_weights(write_tiny(spec));
  ASSERT_TRUE(source.is_ok());
  ConvertReport report;
  ASSERT_TRUE(convert_model(**source, path("q.gguf"), {}, nullptr, &report).is_ok());
  EXPECT_EQ(report.source_types.size(), 1u);
  EXPECT_EQ(report.source_types.begin()->first, "Q8_0");
}

TEST_F(ConvertTest, ErrorsAreClearAndLeaveNothingBehind) {
  const std::string src = write_tiny({});
  auto source = open_weights(src);
  ASSERT_TRUE(source.is_ok());
  // Unwritable destination.
  Status st = convert_model(**source, path("missing_dir/out.gguf"), {}, nullptr, nullptr);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("missing_dir"), std::string::npos) << st.message();
  // Bad options.
  ConvertOptions bad;
  bad.split.group = 48;
  EXPECT_NE(convert_model(**source, path("x.gguf"), bad, nullptr, nullptr).message().find("group size"), std::string::npos);
  EXPECT_FALSE(fs::exists(path("x.gguf")));
  // A converted file cannot be converted again.
  ASSERT_TRUE(convert_model(**source, path("c.gguf"), {}, nullptr, nullptr).is_ok());
  auto converted = open_weights(path("c.gguf"));
  st = convert_model(**converted, path("d.gguf"), {}, nullptr, nullptr);
  EXPECT_NE(st.message().find("already a bit-split model"), std::string::npos) << st.message();
  // A GGUF that is not a model.
  gguf::Writer w;
  w.metadata().set("general.architecture", gguf::Value::string("bert"));
  ASSERT_TRUE(w.write_file(path("bert.gguf")).is_ok());
  auto bert = open_weights(path("bert.gguf"));
  st = convert_model(**bert, path("e.gguf"), {}, nullptr, nullptr);
  EXPECT_NE(st.message().find("not supported"), std::string::npos) << st.message();
  // A NaN in a projection (a corrupt source): named with its position, and nothing written. The
  // projections are fitted one ahead of the writer, so also a NaN in a small tensor that stops the
  // writer while the next projection is being fitted (the fit is waited for, not left running).
  for (const std::string bad : {"blk.1.ffn_up.weight", "blk.1.attn_norm.weight"}) {
    auto file = gguf::File::parse(gguf::storage_from_bytes(testing::tiny_model_bytes({})), "nan.gguf");
    ASSERT_TRUE(file.is_ok());
    gguf::Writer nan;
    for (const auto& [key, value] : file->metadata().entries()) nan.metadata().set(key, value);
    const int64_t row = bad.find("norm") != std::string::npos ? 0 : 3;
    for (const auto& t : file->tensors()) {
      auto span = file->tensor_bytes(t);
      std::vector<uint8_t> bytes(span.begin(), span.end());
      if (t.name == bad) {
        const float v = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(bytes.data() + (row * t.dims[0] + 5) * 4, &v, 4);  // row 3 (a vector: 0), column 5
      }
      ASSERT_TRUE(nan.add_tensor(t.name, t.type, t.dims, bytes).is_ok());
    }
    ASSERT_TRUE(nan.write_file(path("nan.gguf")).is_ok());
    auto with_nan = open_weights(path("nan.gguf"));
    ASSERT_TRUE(with_nan.is_ok());
    st = convert_model(**with_nan, path("n.gguf"), {}, nullptr, nullptr);
    EXPECT_NE(st.message().find("tensor '" + bad + "' has a non-finite weight (nan) at row " + std::to_string(row) +
                                ", column 5"),
              std::string::npos)
        << st.message();
    EXPECT_FALSE(fs::exists(path("n.gguf")));
  }
  // Unsupported tensor type: named, and nothing written.
  auto tiny = testing::make_tiny_model({});
  ASSERT_TRUE(tiny.add_tensor("extra.weight", gguf::TensorType::IQ2_XXS, {256, 1}, std::vector<uint8_t>(66)).is_ok());
  ASSERT_TRUE(tiny.write_file(path("iq.gguf")).is_ok());
  auto iq = open_weights(path("iq.gguf"));
  st = convert_model(**iq, path("f.gguf"), {}, nullptr, nullptr);
  EXPECT_NE(st.message().find("'extra.weight' has type IQ2_XXS"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(path("f.gguf")));
  EXPECT_FALSE(fs::exists(path("f.gguf.tmp")));
}

// --draft-bpw: every projection gets the bits the budget allocation chose, the file says which
// (per-tensor keys, format version 2), the planes have those widths, the total stays within the
// budget, and the model loads and runs with a draft closer to the target than the all-2-bit one.
TEST_F(ConvertTest, DraftBudgetGivesPerTensorBitsWithinTheBudget) {
  testing::TinyModelSpec spec;
  spec.embd = 64;
  spec.ff = 128;
  spec.vocab = 64;
  auto source = open_weights(write_tiny(spec));
  ASSERT_TRUE(source.is_ok());
  ConvertOptions o;
  o.draft_bpw = 3.2;
  ConvertReport report;
  int measuring = 0;
  ASSERT_TRUE(convert_model(**source, path("mixed.gguf"), o, [&](const ConvertProgress& p) { measuring += p.measuring; },
                            &report).is_ok());
  EXPECT_GT(measuring, 0);
  ASSERT_TRUE(report.draft.has_value());
  EXPECT_LE(report.draft->bits_per_weight, 3.2);
  EXPECT_GT(report.draft->bits_per_weight, 3.0);  // the budget is spent, not left unused
  auto converted = open_weights(path("mixed.gguf"));
  ASSERT_TRUE(converted.is_ok()) << converted.status().message();
  auto format = read_split_format((*converted)->metadata());
  ASSERT_TRUE(format.is_ok() && format->has_value()) << format.status().message();
  EXPECT_EQ(*(*converted)->metadata().get_int("bitsplit.format_version"), 3);
  std::set<int> widths;
  double vram_bits = 0, weights = 0;
  for (const auto& [base, bits] : report.draft->bits) {
    EXPECT_EQ((*format)->draft_bits_for(base), bits) << base;
    widths.insert(bits);
    const auto* codes = (*converted)->find_tensor(base + ".draft_codes");
    ASSERT_NE(codes, nullptr) << base;
    const auto* scales = (*converted)->find_tensor(base + ".draft_scales");
    const int64_t in = codes->dims[0] * 8 / bits;  // widths here are multiples of 64
    EXPECT_EQ(codes->dims[0], quant::code_row_bytes(in, 64, bits)) << base;
    vram_bits += 8.0 * double(codes->nbytes + 2 * scales->nbytes);
    weights += double(in * codes->dims[1]);
  }
  EXPECT_GT(widths.size(), 1u) << "a budget between 2.5 and 4.5 should mix widths";
  EXPECT_NEAR(vram_bits / weights, report.draft->bits_per_weight, 1e-9);

  // Loads; the target is D + R whatever D's width (close to the uniform file's target), and
  // the mixed draft is closer to the target than an all-2-bit draft.
  ASSERT_TRUE(convert_model(**source, path("two.gguf"), {}, nullptr, nullptr).is_ok());
  auto two = open_weights(path("two.gguf"));
  ASSERT_TRUE(two.is_ok());
  auto target = logits_of(**converted, {});
  auto target2 = logits_of(**two, {});
  auto draft = logits_of(**converted, {.draft_only = true});
  auto draft2 = logits_of(**two, {.draft_only = true});
  ASSERT_TRUE(target.is_ok() && target2.is_ok() && draft.is_ok() && draft2.is_ok());
  double d_mixed = 0, d_two = 0, d_targets = 0, scale = 0;
  for (size_t i = 0; i < target->size(); ++i) {
    d_mixed += std::pow(double((*draft)[i]) - (*target)[i], 2);
    d_two += std::pow(double((*draft2)[i]) - (*target)[i], 2);
    d_targets = std::max(d_targets, std::fabs(double((*target)[i]) - (*target2)[i]));
    scale = std::max(scale, std::fabs(double((*target)[i])));
  }
  EXPECT_LT(d_mixed, d_two);
  EXPECT_LE(d_targets, 0.03 * scale);

  // A budget below the all-2-bit draft is refused before anything is written.
  o.draft_bpw = 2.0;
  const Status st = convert_model(**source, path("small.gguf"), o, nullptr, nullptr);
  EXPECT_NE(st.message().find("below the smallest draft"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(path("small.gguf")));
}

// Files written before per-tensor draft bits (format version 1) still load.
TEST_F(ConvertTest, FormatVersionOneStillLoads) {
  auto source = open_weights(write_tiny({}));
  ASSERT_TRUE(convert_model(**source, path("v2.gguf"), {}, nullptr, nullptr).is_ok());
  gguf::Metadata m;
  m.set("bitsplit.format_version", gguf::Value::u32(1));
  m.set("bitsplit.group_size", gguf::Value::u32(64));
  m.set("bitsplit.draft_bits", gguf::Value::u32(2));
  m.set("bitsplit.residual_bits", gguf::Value::u32(8));
  auto f = read_split_format(m);
  ASSERT_TRUE(f.is_ok() && f->has_value());
  EXPECT_EQ((*f)->draft_bits_for("blk.0.attn_q"), 2);
  EXPECT_FALSE((*f)->packed_residual());
  m.set("bitsplit.format_version", gguf::Value::u32(4));
  f = read_split_format(m);
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("versions 1 to 3"), std::string::npos) << f.status().message();
  // Per-tensor keys that disagree are named.
  m.set("bitsplit.format_version", gguf::Value::u32(2));
  m.set("bitsplit.draft_bits.tensors", gguf::Value::string_array({"blk.0.attn_v", "output"}));
  m.set("bitsplit.draft_bits.values", gguf::Value::i32_array({4}));
  EXPECT_NE(read_split_format(m).status().message().find("2 names but"), std::string::npos);
  m.set("bitsplit.draft_bits.values", gguf::Value::i32_array({4, 5}));
  EXPECT_NE(read_split_format(m).status().message().find("'output' has 5 draft bits"), std::string::npos);
  m.set("bitsplit.draft_bits.values", gguf::Value::i32_array({4, 3}));
  f = read_split_format(m);
  ASSERT_TRUE(f.is_ok() && f->has_value()) << f.status().message();
  EXPECT_EQ((*f)->draft_bits_for("output"), 3);
  EXPECT_EQ((*f)->draft_bits_for("blk.0.attn_v"), 4);
  EXPECT_EQ((*f)->draft_bits_for("blk.0.attn_q"), 2);
}

// A source that cannot promise its bytes outlive a call (keep_alive null), like a container that
// converts as it reads: the loader must copy.
class NoSharing final : public WeightSource {
 public:
  explicit NoSharing(const WeightSource& inner) : inner_(inner) {}
  const std::string& path() const override { return inner_.path(); }
  const gguf::Metadata& metadata() const override { return inner_.metadata(); }
  const std::vector<gguf::TensorInfo>& tensors() const override { return inner_.tensors(); }
  const gguf::TensorInfo* find_tensor(std::string_view name) const override { return inner_.find_tensor(name); }
  Result<std::vector<float>> load_f32(const gguf::TensorInfo& t) const override { return inner_.load_f32(t); }
  std::string describe() const override { return inner_.describe(); }
  Result<std::span<const uint8_t>> raw_bytes(const gguf::TensorInfo& t) const override { return inner_.raw_bytes(t); }

 private:
  const WeightSource& inner_;
};

// Format version 3 stores each residual in the kernels' packed layout: the loader uses the file's
// memory map in place (no copy, and the map lives as long as the model), and the model computes
// exactly what the version-2 file of the same conversion computes, whose residual is repacked at
// load into the same bytes. A source that cannot share its bytes gets them unpacked and repacked.
TEST_F(ConvertTest, PackedResidualIsUsedFromTheFileMapAndMatchesVersionTwo) {
  testing::TinyModelSpec spec;
  spec.ff = 72;  // a padded last group in ffn_down, and ffn_gate/up rows that end mid-tile
  auto source = open_weights(write_tiny(spec));
  ASSERT_TRUE(source.is_ok());
  ConvertOptions v2;
  v2.format_version = 2;
  ASSERT_TRUE(convert_model(**source, path("v3.gguf"), {}, nullptr, nullptr).is_ok());
  ASSERT_TRUE(convert_model(**source, path("v2.gguf"), v2, nullptr, nullptr).is_ok());
  ConvertOptions v4;
  v4.format_version = 4;
  EXPECT_NE(convert_model(**source, path("v4.gguf"), v4, nullptr, nullptr).message().find("format version 4"),
            std::string::npos);
  auto f3 = open_weights(path("v3.gguf"));
  auto f2 = open_weights(path("v2.gguf"));
  ASSERT_TRUE(f3.is_ok() && f2.is_ok());
  EXPECT_EQ(*(*f3)->metadata().get_int("bitsplit.format_version"), 3);
  EXPECT_EQ(*(*f2)->metadata().get_int("bitsplit.format_version"), 2);
  EXPECT_EQ((*f3)->find_tensor("blk.0.attn_q.resid_codes"), nullptr);
  EXPECT_EQ((*f2)->find_tensor("blk.0.attn_q.resid_packed"), nullptr);

  auto m3 = Model::load(**f3, {});
  auto m2 = Model::load(**f2, {});
  NoSharing copying(**f3);
  auto mc = Model::load(copying, {});
  ASSERT_TRUE(m3.is_ok() && m2.is_ok() && mc.is_ok());
  int projections = 0;
  for (const auto& t : (*f3)->tensors()) {
    if (!t.name.ends_with(".resid_packed")) continue;
    ++projections;
    const std::string weight = t.name.substr(0, t.name.size() - std::strlen(".resid_packed")) + ".weight";
    const SplitProjection* s3 = m3->split(weight);
    const SplitProjection* s2 = m2->split(weight);
    const SplitProjection* sc = mc->split(weight);
    ASSERT_TRUE(s3 && s2 && sc && s3->packed_residual && s2->packed_residual && sc->packed_residual) << weight;
    EXPECT_TRUE(s3->packed_residual->borrowed()) << weight;
    EXPECT_EQ(s3->packed_residual->data(), (*f3)->raw_bytes(t)->data()) << weight << ": used in place";
    EXPECT_TRUE(s3->resid_codes.empty() && s3->resid_scales.empty()) << weight;
    EXPECT_FALSE(s2->packed_residual->borrowed()) << weight;
    EXPECT_FALSE(sc->packed_residual->borrowed()) << weight;
    const size_t n = s3->packed_residual->size_bytes();
    ASSERT_EQ(n, t.nbytes);
    EXPECT_EQ(std::memcmp(s2->packed_residual->data(), s3->packed_residual->data(), n), 0) << weight;
    EXPECT_EQ(std::memcmp(sc->packed_residual->data(), s3->packed_residual->data(), n), 0) << weight;
  }
  EXPECT_EQ(projections, 7 * spec.layers + 1);  // every layer projection and the head

  // Bit for bit the same model: the plane kernels, and D + R dequantised to f32.
  auto kernels3 = logits_of(**f3, {}), kernels2 = logits_of(**f2, {});
  auto f32_3 = logits_of(**f3), f32_2 = logits_of(**f2);
  ASSERT_TRUE(kernels3.is_ok() && kernels2.is_ok() && f32_3.is_ok() && f32_2.is_ok());
  EXPECT_EQ(*kernels3, *kernels2);
  EXPECT_EQ(*f32_3, *f32_2);
  // The model keeps the map alive after its source is gone.
  f3->reset();
  KvCache cache(m3->config(), 5);
  auto after = forward_pass(*m3, cache, Batch::causal(std::vector<int32_t>{1, 7, 3, 9, 4}, 0, true));
  ASSERT_TRUE(after.is_ok());
  EXPECT_EQ(*after, *kernels3);
}

// An older bit-split file is rewritten as format 3 without fitting anything: the result is the
// very file a format-3 conversion of the original writes. A format-3 file or an original is
// refused by name.
TEST_F(ConvertTest, UpgradingAFormatTwoFileGivesTheFormatThreeConversion) {
  testing::TinyModelSpec spec;
  spec.ff = 72;
  auto source = open_weights(write_tiny(spec));
  ASSERT_TRUE(source.is_ok());
  ConvertOptions v2;
  v2.format_version = 2;
  ASSERT_TRUE(convert_model(**source, path("v2.gguf"), v2, nullptr, nullptr).is_ok());
  ASSERT_TRUE(convert_model(**source, path("v3.gguf"), {}, nullptr, nullptr).is_ok());
  auto old = open_weights(path("v2.gguf"));
  ASSERT_TRUE(old.is_ok());
  ConvertReport report;
  size_t last_done = 0;
  ASSERT_TRUE(upgrade_split_model(**old, path("up.gguf"), {}, [&](size_t done, size_t) { last_done = done; }, &report)
                  .is_ok());
  EXPECT_EQ(read_bytes(path("up.gguf")), read_bytes(path("v3.gguf")));
  EXPECT_EQ(report.output_paths, std::vector<std::string>{path("up.gguf")});
  EXPECT_GT(last_done, 0u);
  auto v3 = open_weights(path("v3.gguf"));
  ASSERT_TRUE(v3.is_ok());
  EXPECT_NE(upgrade_split_model(**v3, path("again.gguf"), {}, nullptr, nullptr).message().find("already bit-split format 3"),
            std::string::npos);
  EXPECT_NE(upgrade_split_model(**source, path("orig.gguf"), {}, nullptr, nullptr).message().find("not a bit-split model"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(path("again.gguf")));
  EXPECT_FALSE(fs::exists(path("orig.gguf")));
}

// A converted model keeps its Q8_0 embedding as blocks (a quarter of an f32 copy): lookups
// dequantise a row, a tied head runs on its planes, and nothing expands it until an f32 copy is
// asked for, whose rows are exactly what the lookups read.
TEST_F(ConvertTest, ConvertedModelKeepsItsQ8_0EmbeddingAsBlocks) {
  testing::TinyModelSpec spec;
  spec.tied_output = true;
  auto source = open_weights(write_tiny(spec));
  ASSERT_TRUE(source.is_ok());
  ASSERT_TRUE(convert_model(**source, path("m.gguf"), {}, nullptr, nullptr).is_ok());
  auto converted = open_weights(path("m.gguf"));
  ASSERT_TRUE(converted.is_ok());
  ASSERT_EQ((*converted)->find_tensor("token_embd.weight")->type, gguf::TensorType::Q8_0);
  auto m = Model::load(**converted, {});
  ASSERT_TRUE(m.is_ok());
  EXPECT_TRUE(m->embedding_in_q8_0());
  EXPECT_TRUE(m->embedding_mapped()) << "a file's embedding is read from its map, not copied";
  // Every prompt position's logits, and embed_row against the f32 copy's rows.
  auto logits = [](const Model& model) {
    KvCache cache(model.config(), 5);
    auto l = forward_pass(model, cache, Batch::causal(std::vector<int32_t>{1, 7, 3, 9, 4}, 0, true));
    EXPECT_TRUE(l.is_ok()) << l.status().message();
    return l ? *l : std::vector<float>{};
  };
  auto expect_rows = [&](const Model& model, const std::vector<float>& all) {
    std::vector<float> row(size_t(spec.embd));
    for (int64_t token : {int64_t(0), int64_t(7), spec.vocab - 1}) {
      model.embed_row(token, row.data());
      EXPECT_TRUE(std::equal(row.begin(), row.end(), all.begin() + token * spec.embd)) << token;
    }
  };
  const std::vector<float> before = logits(*m);
  ASSERT_FALSE(before.empty());
  // The f32 reference load of the same file expands the embedding at load: same first rows.
  auto f32 = Model::load(**converted, {.keep_planes = false});
  ASSERT_TRUE(f32.is_ok());
  EXPECT_FALSE(f32->embedding_in_q8_0());
  const std::vector<float>& all = m->token_embd();
  EXPECT_EQ(all, f32->token_embd());
  expect_rows(*m, all);
  EXPECT_EQ(logits(*m), before);
  // A container that cannot keep its bytes alive gets a copy: the same rows and logits, also
  // from a copy of the model after the loaded one (and the source) are gone.
  std::optional<Model> copied;
  {
    NoSharing no_sharing(**converted);
    auto c = Model::load(no_sharing, {});
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_TRUE(c->embedding_in_q8_0());
    EXPECT_FALSE(c->embedding_mapped());
    copied.emplace(*c);
  }
  expect_rows(*copied, all);
  EXPECT_EQ(logits(*copied), before);
}

// On a machine with several NUMA nodes (a synthetic hwloc topology: two nodes of one core) the
// residual is not used from the map, whose pages the page cache puts on one node, but copied into
// plane buffers interleaved over the nodes; the model computes the same.
TEST_F(ConvertTest, OnSeveralNumaNodesTheResidualIsCopiedInterleaved) {
  auto source = open_weights(write_tiny({}));
  ASSERT_TRUE(source.is_ok());
  ASSERT_TRUE(convert_model(**source, path("v3.gguf"), {}, nullptr, nullptr).is_ok());
  auto converted = open_weights(path("v3.gguf"));
  ASSERT_TRUE(converted.is_ok());
  ::setenv("HWLOC_SYNTHETIC", "Package:1 NUMANode:2 Core:1 PU:1", 1);
  auto two_nodes = std::make_shared<cpu::CpuContext>();
  ::unsetenv("HWLOC_SYNTHETIC");
  ASSERT_EQ(two_nodes->topology().numa_nodes, 2) << two_nodes->describe();
  auto numa = Model::load(**converted, {.cpu = two_nodes});
  auto one = Model::load(**converted, {});
  ASSERT_TRUE(numa.is_ok() && one.is_ok());
  const SplitProjection* a = numa->split("blk.0.ffn_down.weight");
  const SplitProjection* b = one->split("blk.0.ffn_down.weight");
  ASSERT_TRUE(a && b && a->packed_residual && b->packed_residual);
  EXPECT_FALSE(a->packed_residual->borrowed());
  EXPECT_EQ(b->packed_residual->borrowed(), one->cpu().topology().numa_nodes == 1);
  // `--no-mmap` asks for the same copy on any machine.
  auto copied = Model::load(**converted, {.copy_residual = true});
  ASSERT_TRUE(copied.is_ok());
  const SplitProjection* c = copied->split("blk.0.ffn_down.weight");
  ASSERT_TRUE(c && c->packed_residual);
  EXPECT_FALSE(c->packed_residual->borrowed());
  EXPECT_FALSE(copied->embedding_mapped()) << "--no-mmap copies the embedding too";
  EXPECT_TRUE(one->embedding_mapped());
  EXPECT_EQ(std::memcmp(c->packed_residual->data(), b->packed_residual->data(), c->packed_residual->size_bytes()), 0);
  EXPECT_EQ(std::memcmp(a->packed_residual->data(), b->packed_residual->data(), a->packed_residual->size_bytes()), 0);
  KvCache ca(numa->config(), 5), cb(one->config(), 5);
  auto la = forward_pass(*numa, ca, Batch::causal(std::vector<int32_t>{1, 7, 3, 9, 4}, 0, true));
  auto lb = forward_pass(*one, cb, Batch::causal(std::vector<int32_t>{1, 7, 3, 9, 4}, 0, true));
  ASSERT_TRUE(la.is_ok() && lb.is_ok());
  EXPECT_EQ(*la, *lb);
}

TEST(SplitNames, WhichTensorsAreSplit) {
  EXPECT_TRUE(is_split_projection("output.weight"));
  EXPECT_TRUE(is_split_projection("blk.0.attn_q.weight"));
  EXPECT_TRUE(is_split_projection("blk.31.ffn_down.weight"));
  EXPECT_FALSE(is_split_projection("blk.0.attn_norm.weight"));
  EXPECT_FALSE(is_split_projection("blk.0.attn_q.bias"));
  EXPECT_FALSE(is_split_projection("blk.x.attn_q.weight"));
  EXPECT_FALSE(is_split_projection("blk..attn_q.weight"));
  EXPECT_FALSE(is_split_projection("token_embd.weight"));
  EXPECT_FALSE(is_split_projection("blk.1.attn_q_norm.weight"));
}

TEST_F(ConvertTest, ImatrixRoundTripAndValidation) {
  ImportanceMatrix m{{"blk.0.attn_q.weight", std::vector<float>(32, 2.0f)}};
  ASSERT_TRUE(write_imatrix(m, nullptr, 100, "text.txt", path("i.gguf")).is_ok());
  auto back = read_imatrix(path("i.gguf"));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(*back, m);
  // Missing entries are an error (the matrix was made for another model).
  auto source = open_weights(write_tiny({}));
  ConvertOptions o;
  o.imatrix = &*back;
  Status st = convert_model(**source, path("o.gguf"), o, nullptr, nullptr);
  EXPECT_NE(st.message().find("no entry for"), std::string::npos) << st.message();
  EXPECT_FALSE(read_imatrix(write_tiny({}, "not_imatrix.gguf")).is_ok());
}

}  // namespace
}  // namespace bitsplit
