// convert with the draft calibrated layer by layer (ConvertOptions::calibration): the text's
// errors, the file's record of its calibration, the memory plan's refusal, and that no
// calibration changes nothing.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "bitsplit/calibration.h"
#include "bitsplit/convert.h"
#include "bitsplit/planes.h"
#include "convert_testing.h"

namespace bitsplit {
namespace {

using testing::ConvertTest;

void write_file(const std::string& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

Status convert_with_text(const WeightSource& source, const std::string& out, const std::string& text_path,
                         ConvertReport* report = nullptr) {
  ConvertOptions o;
  o.split.group = 32;
  o.calibration = CalibrationOptions{.path = text_path};
  return convert_model(source, out, o, nullptr, report);
}

TEST_F(ConvertTest, CalibrationTextErrorsNameTheProblem) {
  auto source = open_weights(write_tiny({}));
  ASSERT_TRUE(source.is_ok());
  write_file(path("empty.txt"), " \n\n");
  write_file(path("binary.bin"), std::string("ab\0\x01\x02", 5));
  write_file(path("latin1.txt"), "caf\xe9 au lait");
  write_file(path("short.txt"), "a short text.");
  write_file(path("bad.jsonl"), "{\"kind\": \"prose\", \"text\": \"fine\"}\n[1, 2]\n");
  const std::pair<const char*, const char*> cases[] = {{"empty.txt", "is empty"},
                                                       {"binary.bin", "is binary"},
                                                       {"latin1.txt", "not UTF-8"},
                                                       {"short.txt", "too short"},
                                                       {"bad.jsonl", "line 2"},
                                                       {"missing.txt", "cannot be read"}};
  for (const auto& [file, message] : cases) {
    const Status st = convert_with_text(**source, path("out.gguf"), path(file));
    ASSERT_FALSE(st.is_ok()) << file;
    EXPECT_NE(st.message().find(message), std::string::npos) << file << ": " << st.message();
    EXPECT_FALSE(std::filesystem::exists(path("out.gguf"))) << file;
  }
}

// The built-in text calibrates every projection; the file says how; the fits' output error on
// the calibration inputs is reported, and (recomputed here from the files) below the
// uncalibrated fit's on the same inputs.
TEST_F(ConvertTest, CalibratedDraftIsRecordedAndLowersItsOutputError) {
  auto source = open_weights(write_tiny({.layers = 2, .tied_output = true}));
  ASSERT_TRUE(source.is_ok());
  ConvertReport report;
  ConvertOptions o;
  o.split.group = 32;
  o.calibration = CalibrationOptions{};
  bool planned = false;
  o.on_calibration_plan = [&](const CalibrationTokens& t, const CalibrationPlan& p) {
    planned = t.tokens >= kMinCalibrationTokens && p.total() > 0 && t.name == "built-in" && t.segments == 31;
    return Status::ok();
  };
  ASSERT_TRUE(convert_model(**source, path("cal.gguf"), o, nullptr, &report).is_ok());
  EXPECT_TRUE(planned);
  ASSERT_TRUE(report.calibration.has_value());
  EXPECT_TRUE(report.calibration_skipped.empty());
  // Every kind of projection and the (tied) head were fitted against moments.
  for (const char* kind : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "output"}) {
    ASSERT_TRUE(report.draft_output_error.count(kind)) << kind;
    const auto [err, ref] = report.draft_output_error.at(kind);
    EXPECT_GT(ref, 0.0) << kind;
    EXPECT_LT(err / ref, 0.5) << kind;
  }
  auto cal = open_weights(path("cal.gguf"));
  ASSERT_TRUE(cal.is_ok());
  const gguf::Metadata& m = (*cal)->metadata();
  EXPECT_EQ(*m.get_string("bitsplit.calibration.text"), "built-in");
  EXPECT_EQ(*m.get_string("bitsplit.calibration.sha256"), report.calibration->sha256);
  EXPECT_EQ(*m.get_int("bitsplit.calibration.tokens"), report.calibration->tokens);
  // The planes differ from the uncalibrated fit's, and the model still runs.
  ConvertOptions plain;
  plain.split.group = 32;
  ASSERT_TRUE(convert_model(**source, path("plain.gguf"), plain, nullptr, nullptr).is_ok());
  auto plain_file = open_weights(path("plain.gguf"));
  ASSERT_TRUE(plain_file.is_ok());
  EXPECT_FALSE((*plain_file)->metadata().contains("bitsplit.calibration.text"));
  auto codes = [](const WeightSource& w) {
    auto b = w.raw_bytes(*w.find_tensor("blk.1.ffn_down.draft_codes"));
    return std::vector<uint8_t>(b->begin(), b->end());
  };
  EXPECT_NE(codes(**cal), codes(**plain_file));
  auto logits = testing::logits_of(**cal);
  ASSERT_TRUE(logits.is_ok()) << logits.status().message();

  // On the calibration's own inputs the calibrated draft's output error, sum over rows of
  // eᵀ H e (e = w - d), is below the uncalibrated draft's, projection by projection.
  auto config = read_model_config(**source);
  auto tokens = calibration_tokens(**source, CalibrationOptions{});
  ASSERT_TRUE(config.is_ok() && tokens.is_ok());
  auto layers = LayerCalibration::start(**source, *config, *tokens, CalibrationOptions{});
  ASSERT_TRUE(layers.is_ok()) << layers.status().message();
  auto output_error = [](const std::vector<float>& w, const std::vector<float>& d, const Covariance& h, int64_t cols) {
    double sum = 0.0;
    for (size_t r = 0; r < w.size() / size_t(cols); ++r)
      for (int64_t i = 0; i < cols; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const size_t a = r * size_t(cols) + size_t(i), b = r * size_t(cols) + size_t(j);
          sum += double(w[a] - d[a]) * double(h.data[i * cols + j]) * double(w[b] - d[b]);
        }
    return sum;
  };
  for (const std::string base : {"blk.0.attn_q", "blk.0.ffn_down", "blk.1.attn_output", "blk.1.ffn_up"}) {
    const gguf::TensorInfo* t = (*source)->find_tensor(base + ".weight");
    ASSERT_TRUE(t) << base;
    const int64_t in = t->dims[0], out = t->dims[1];
    auto w = (*source)->load_f32(*t);
    auto h = (*layers)->covariance(base + ".weight");
    ASSERT_TRUE(w.is_ok() && h.is_ok() && *h && (*h)->block == 0) << base;
    double err[2];
    int k = 0;
    for (const WeightSource* f : {cal->get(), plain_file->get()}) {
      auto format = read_split_format(f->metadata());
      ASSERT_TRUE(format.is_ok() && format->has_value());
      auto d = load_split_f32(*f, base, in, out, **format, /*with_residual=*/false);
      ASSERT_TRUE(d.is_ok()) << d.status().message();
      err[k++] = output_error(*w, *d, **h, in);
    }
    EXPECT_LT(err[0], err[1]) << base << ": calibrated " << err[0] << ", uncalibrated " << err[1];
  }
}

// The calibration's plan is checked before anything is read: under a limit it does not fit, a
// clear refusal; under one it fits (though the whole model's covariances would not), it runs.
TEST_F(ConvertTest, CalibrationRefusedUpFrontWhenItsPlanDoesNotFit) {
  const testing::TinyModelSpec spec{.layers = 12, .embd = 64, .ff = 512};
  auto source = open_weights(write_tiny(spec));
  ASSERT_TRUE(source.is_ok());
  ConvertOptions o;
  o.split.group = 32;
  o.calibration = CalibrationOptions{.max_tokens = 512, .ctx = 128};
  o.memory_limit = 1000;
  Status st = convert_model(**source, path("out.gguf"), o, nullptr, nullptr);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("the calibration needs about"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--no-calibration"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(path("out.gguf")));

  auto config = read_model_config(**source);
  ASSERT_TRUE(config.is_ok());
  ConvertReport report;
  o.memory_limit = 0;
  ASSERT_TRUE(convert_model(**source, path("probe.gguf"), o, nullptr, &report).is_ok());
  const uint64_t plan = report.calibration_plan.total();
  // Every input's whole matrix for every layer, as imatrix --covariance keeps them.
  const uint64_t whole = uint64_t(spec.layers) * 4 * uint64_t(3 * spec.embd * spec.embd + spec.ff * spec.ff);
  ASSERT_LT(plan, whole);
  o.memory_limit = plan + 1;
  EXPECT_TRUE(convert_model(**source, path("fits.gguf"), o, nullptr, nullptr).is_ok());
}

// A dry run plans without reading a weight or writing a file: the output's size is the real
// conversion's to the byte (uniform draft), its planes split into draft and residual; the
// calibration's plan is the real one's, and a plan over the memory limit is reported, not refused.
TEST_F(ConvertTest, ADryRunPlansTheConversionAndWritesNothing) {
  const testing::TinyModelSpec spec{.layers = 4, .embd = 64, .ff = 256};
  auto source = open_weights(write_tiny(spec));
  ASSERT_TRUE(source.is_ok());
  ConvertOptions o;
  o.split.group = 32;
  ConvertReport real, dry;
  ASSERT_TRUE(convert_model(**source, path("real.gguf"), o, nullptr, &real).is_ok());
  o.dry_run = true;
  ASSERT_TRUE(convert_model(**source, path("dry.gguf"), o, nullptr, &dry).is_ok());
  EXPECT_FALSE(std::filesystem::exists(path("dry.gguf")));
  EXPECT_FALSE(std::filesystem::exists(path("dry.gguf.tmp")));
  EXPECT_EQ(dry.output_bytes, real.output_bytes);
  EXPECT_EQ(dry.split_weights, real.split_weights);
  EXPECT_GT(dry.draft_bytes, 0u);
  EXPECT_GT(dry.residual_bytes, dry.draft_bytes) << "8-bit residual planes outweigh 2-bit draft planes";
  EXPECT_LT(dry.draft_bytes + dry.residual_bytes, dry.output_bytes) << "norms and the embedding are the rest";
  EXPECT_TRUE(dry.source_sha256.empty()) << "nothing was read";

  // Under a draft budget the draft planes are the budget's bits per weight.
  o.draft_bpw = 3.5;
  ASSERT_TRUE(convert_model(**source, path("dry.gguf"), o, nullptr, &dry).is_ok());
  EXPECT_EQ(dry.draft_bytes, uint64_t(double(dry.split_weights) * 3.5 / 8.0));

  // The calibration: the same plan as the conversion that runs it, never refused in a dry run.
  o.draft_bpw = 0.0;
  o.calibration = CalibrationOptions{.max_tokens = 512, .ctx = 128};
  o.dry_run = false;
  ASSERT_TRUE(convert_model(**source, path("cal.gguf"), o, nullptr, &real).is_ok());
  o.dry_run = true;
  o.memory_limit = 1000;
  int told = 0;
  o.on_calibration_plan = [&](const CalibrationTokens&, const CalibrationPlan&) {
    ++told;
    return Status::ok();
  };
  ASSERT_TRUE(convert_model(**source, path("dry.gguf"), o, nullptr, &dry).is_ok());
  EXPECT_EQ(told, 1);
  ASSERT_TRUE(dry.calibration.has_value());
  EXPECT_EQ(dry.calibration_plan.total(), real.calibration_plan.total());
  EXPECT_EQ(dry.calibration_memory_available, 1000u);
  EXPECT_GT(dry.calibration_plan.total(), dry.calibration_memory_available) << "reported as over the limit";
  EXPECT_FALSE(std::filesystem::exists(path("dry.gguf")));
}

// Where error feedback does not apply (a 6-bit residual) the calibration is skipped with the
// reason, and the bytes are those of a conversion without one.
TEST_F(ConvertTest, CalibrationSkippedWithASixBitResidualChangesNoByte) {
  auto source = open_weights(write_tiny({}));
  ASSERT_TRUE(source.is_ok());
  ConvertOptions o;
  o.split.group = 32;
  o.split.residual_bits = 6;
  ASSERT_TRUE(convert_model(**source, path("plain.gguf"), o, nullptr, nullptr).is_ok());
  o.calibration = CalibrationOptions{};
  ConvertReport report;
  ASSERT_TRUE(convert_model(**source, path("skipped.gguf"), o, nullptr, &report).is_ok());
  EXPECT_NE(report.calibration_skipped.find("6-bit residual"), std::string::npos);
  EXPECT_EQ(read_bytes(path("plain.gguf")), read_bytes(path("skipped.gguf")));
}

// A calibrated conversion does not depend on the thread count (the BLAS calls are
// single-threaded on fixed slices): one worker and all of them write the same bytes.
TEST_F(ConvertTest, CalibratedConversionIsTheSameOnAnyThreadCount) {
  auto source = open_weights(write_tiny({.layers = 2, .ff = 96}));
  ASSERT_TRUE(source.is_ok());
  ConvertOptions o;
  o.split.group = 32;
  o.calibration = CalibrationOptions{.max_tokens = 600, .ctx = 100};
  {
    tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
    ASSERT_TRUE(convert_model(**source, path("one.gguf"), o, nullptr, nullptr).is_ok());
  }
  ASSERT_TRUE(convert_model(**source, path("all.gguf"), o, nullptr, nullptr).is_ok());
  EXPECT_EQ(read_bytes(path("one.gguf")), read_bytes(path("all.gguf")));
}

// The plan of a Llama-3-70B shape (80 layers, width 8192, FFN 28672, 64/8 heads, vocabulary
// 128256) at the default 4096 tokens: one block's worth, far below its whole-model covariances
// (imatrix --covariance: 80 x (3 x 8192^2 + 28672^2) floats, ~340 GB) and within a 32 GB
// machine; and the 8B shape's within issue 42's 8 GB. Only one sequence's KV cache grows with
// the layers.
TEST(CalibrationPlan, LargeShapesNeedOneBlockNotTheWholeModel) {
  auto shape = [](int64_t layers, int64_t embd, int64_t ff, int64_t heads, int64_t kv, int64_t vocab) {
    ModelConfig c;
    c.n_layers = layers, c.n_embd = embd, c.n_ff = ff, c.n_heads = heads, c.n_kv_heads = kv;
    c.head_dim = embd / heads, c.n_vocab = vocab;
    return c;
  };
  const ModelConfig b70 = shape(80, 8192, 28672, 64, 8, 128256), b8 = shape(32, 4096, 14336, 32, 8, 32000);
  const CalibrationOptions o;
  const CalibrationPlan p70 = plan_calibration(b70, o.max_tokens, o.ctx, o.covariance_block, 3);
  const CalibrationPlan p8 = plan_calibration(b8, o.max_tokens, o.ctx, o.covariance_block, 3);
  const double whole70 = 80.0 * (3.0 * 8192 * 8192 + 28672.0 * 28672) * 4;
  EXPECT_LT(double(p70.total()), whole70 / 20);
  EXPECT_LT(p70.total(), uint64_t{32} << 30);
  EXPECT_LT(p8.total(), uint64_t{8} << 30);
  // Twice the layers: only the KV cache of one sequence grows.
  ModelConfig deeper = b70;
  deeper.n_layers = 160;
  const CalibrationPlan p160 = plan_calibration(deeper, o.max_tokens, o.ctx, o.covariance_block, 3);
  EXPECT_EQ(p160.total() - p70.total(), uint64_t(80) * uint64_t(o.ctx) * uint64_t(b70.kv_dim()) * 8);
  std::printf("calibration plan, 70B shape: %.2f GiB (block weights %.2f, moments %.2f, fits %.2f); 8B shape: %.2f GiB\n",
              double(p70.total()) / (1 << 30), double(p70.block_weights) / (1 << 30), double(p70.moments) / (1 << 30),
              double(p70.fits) / (1 << 30), double(p8.total()) / (1 << 30));
}

// Without a calibration a conversion is what it was before calibrating existed: the bytes of
// a tiny model's conversion are pinned (the same on any machine: the ordinary fit's tiers agree
// bit for bit; pinned from the build whose SmolLM2 conversion `cmp` found identical to the
// previous build's), so a change to the uncalibrated path shows here.
TEST_F(ConvertTest, NoCalibrationWritesTheBytesItAlwaysWrote) {
  auto source = open_weights(write_tiny({.layers = 2, .tied_output = true}));
  ASSERT_TRUE(source.is_ok());
  ASSERT_TRUE(convert_model(**source, path("plain.gguf"), ConvertOptions{}, nullptr, nullptr).is_ok());
  auto out = open_weights(path("plain.gguf"));
  ASSERT_TRUE(out.is_ok());
  auto sha = (*out)->content_sha256();
  ASSERT_TRUE(sha.is_ok());
  EXPECT_EQ(*sha, "06ebc6e7a5e472ac0efead2ab115fefa2fd468b637a54f2e8f1353750c378f98");
}

}  // namespace
}  // namespace bitsplit
