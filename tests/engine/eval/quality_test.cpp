// bitsplit eval and imatrix: statistics on a tiny model, and the quality targets of the
// bit-split formats on the real stories260K model.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "bitsplit/quality.h"
#include "bitsplit/tokenizer.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

Model tiny_model(const testing::TinyModelSpec& spec = {}) {
  auto m = Model::load(*testing::tiny_weights(spec));
  BITSPLIT_CHECK(m.is_ok(), m.status().message());
  return std::move(*m);
}

std::vector<int32_t> some_tokens(int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(3 + (i * 7 + i / 3) % 40);
  return t;
}

TEST(Imatrix, MeanSquaredActivationsOfEveryProjection) {
  const Model m = tiny_model();
  int64_t n = 0;
  auto im = collect_imatrix(m, some_tokens(50), 16, 1, nullptr, &n);
  ASSERT_TRUE(im.is_ok()) << im.status().message();
  EXPECT_EQ(im->size(), size_t(2 * 7 + 1));
  EXPECT_EQ(im->at("blk.0.attn_q.weight"), im->at("blk.0.attn_k.weight"));  // same input
  EXPECT_EQ(im->at("blk.1.ffn_down.weight").size(), 64u);
  EXPECT_EQ(im->at("output.weight").size(), 32u);
  for (const auto& [name, v] : *im)
    for (float x : v) ASSERT_TRUE(x >= 0 && std::isfinite(x)) << name;
  // The token embeddings feed attn_norm, so attn_q's statistics are positive everywhere.
  for (float x : im->at("blk.0.attn_q.weight")) EXPECT_GT(x, 0.0f);
  EXPECT_GT(n, 50);
}

TEST(Eval, ReportsEverySchemeWithSaneStatistics) {
  testing::TinyModelSpec spec;
  spec.embd = 64;  // every input width a multiple of the group: no padding in the bit counts
  spec.ff = 128;
  const Model m = tiny_model(spec);
  EvalOptions o;
  o.ctx = 16;
  o.bos = 1;
  auto r = evaluate_quality(m, some_tokens(60), o, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->tokens, 59);  // every token after the first is predicted once
  // --max-tokens stops at that many predictions, inside a window (it scored whole windows: 28).
  EvalOptions limited = o;
  limited.max_tokens = 20;
  limited.schemes = {"Q8_0"};
  auto l = evaluate_quality(m, some_tokens(60), limited, nullptr);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(l->tokens, 20);
  EXPECT_EQ(l->windows, 2);
  // llama-perplexity's windows: BOS + 60 tokens in 3 chunks of 16 (the rest dropped), positions
  // 8..14 of each scored (7 predictions); --max-tokens 16 takes 16 / 8 = 2 chunks.
  EvalOptions llama = o;
  llama.llama_windows = true;
  llama.schemes = {"Q8_0"};
  auto lw = evaluate_quality(m, some_tokens(60), llama, nullptr);
  ASSERT_TRUE(lw.is_ok()) << lw.status().message();
  EXPECT_EQ(lw->windows, 3);
  EXPECT_EQ(lw->tokens, 21);
  llama.max_tokens = 16;
  auto lw2 = evaluate_quality(m, some_tokens(60), llama, nullptr);
  ASSERT_TRUE(lw2.is_ok()) << lw2.status().message();
  EXPECT_EQ(lw2->windows, 2);
  EXPECT_EQ(lw2->tokens, 14);
  EXPECT_NE(lw2->rows[0].kl_mean, l->rows[0].kl_mean) << "other positions are scored";
  llama.ctx = 64;  // longer than BOS + 60 tokens: not one whole chunk
  EXPECT_NE(evaluate_quality(m, some_tokens(60), llama, nullptr).status().message().find("shorter than one window of 64"),
            std::string::npos);
  // Every scheme but the target's other activation arithmetics (/a8, /a16: only when named).
  ASSERT_EQ(r->rows.size(), eval_scheme_names().size() - 4);
  for (const auto& row : r->rows) {
    EXPECT_GE(row.kl_mean, 0.0) << row.scheme;
    EXPECT_GE(row.kl_p99, 0.0) << row.scheme;
    EXPECT_TRUE(row.top1_agreement >= 0 && row.top1_agreement <= 1) << row.scheme;
    EXPECT_GT(row.perplexity, 1.0) << row.scheme;
  }
  const auto find = [&](const std::string& name) {
    for (const auto& row : r->rows)
      if (row.scheme == name) return row;
    return EvalRow{};
  };
  // Bits per weight follow from the layouts: 2 + 32/64 VRAM for D (shapes are multiples of
  // 64 here), 8 + 16/64 RAM for R8, 8.5 for Q8_0.
  EXPECT_DOUBLE_EQ(find("D+R8").vram_bits_per_weight, 2.5);
  EXPECT_DOUBLE_EQ(find("D+R8").ram_bits_per_weight, 8.25);
  EXPECT_DOUBLE_EQ(find("D+R6").ram_bits_per_weight, 6.25);
  EXPECT_DOUBLE_EQ(find("D+R6/w").ram_bits_per_weight, 6.25);
  EXPECT_DOUBLE_EQ(find("Q8_0").ram_bits_per_weight, 8.5);
  EXPECT_LT(find("D+R8").kl_mean, find("draft(R8)").kl_mean);

  // The activation arithmetics share one split model; more precision, less KL.
  EvalOptions acts = o;
  acts.schemes = {"D+R8/a8", "D+R8", "D+R8/a16"};
  auto a = evaluate_quality(m, some_tokens(60), acts, nullptr);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  ASSERT_EQ(a->rows.size(), 3u);
  std::map<std::string, EvalRow> by_name;
  for (const auto& row : a->rows) by_name[row.scheme] = row;
  ASSERT_EQ(by_name.size(), 3u);
  EXPECT_DOUBLE_EQ(by_name["D+R8/a8"].ram_bits_per_weight, by_name["D+R8/a16"].ram_bits_per_weight);
  EXPECT_LT(by_name["D+R8"].kl_mean, by_name["D+R8/a8"].kl_mean);
  EXPECT_LT(by_name["D+R8/a16"].kl_mean, by_name["D+R8"].kl_mean);
}

TEST(Eval, RejectsBadOptions) {
  const Model m = tiny_model();
  EvalOptions o;
  o.ctx = 1;
  EXPECT_FALSE(evaluate_quality(m, some_tokens(10), o, nullptr).is_ok());
  o.ctx = 1000;  // beyond the tiny model's context of 64
  EXPECT_NE(evaluate_quality(m, some_tokens(10), o, nullptr).status().message().find("context length"), std::string::npos);
  o.ctx = 16;
  o.schemes = {"Q4_K"};
  EXPECT_NE(evaluate_quality(m, some_tokens(10), o, nullptr).status().message().find("unknown scheme"), std::string::npos);
  o.schemes = {};
  EXPECT_FALSE(evaluate_quality(m, {5}, o, nullptr).is_ok());
}

// A model and a text in its tokens.
struct ModelOnText {
  Model model;
  std::vector<int32_t> tokens;
  int32_t bos = 0;
};

// The real stories260K model (../shared) and tests/data/stories260K_sample.txt in its tokens.
Result<ModelOnText> stories260k_on_sample(const std::string& path) {
  BITSPLIT_ASSIGN_OR_RETURN(auto source, open_weights(path));
  BITSPLIT_ASSIGN_OR_RETURN(Model model, Model::load(*source));
  BITSPLIT_ASSIGN_OR_RETURN(auto tok, Tokenizer::from_metadata(source->metadata()));
  std::ifstream in(testing::source_dir() + "/tests/data/stories260K_sample.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  return ModelOnText{std::move(model), tok->encode(ss.str(), {.add_special = false}), 1};
}

// The quality targets on a real trained model: D+R8 halves Q8_0's KL, D+R6 beats
// Q8_0, and the optimised draft beats plain 2-bit min/max.
TEST(Eval, BitSplitTargetsOnStories260K) {
  const std::string shared = testing::shared_dir();
  const std::string path = shared.empty() ? "" : shared + "/models/stories260K.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto real = stories260k_on_sample(path);
  ASSERT_TRUE(real.is_ok()) << real.status().message();
  EvalOptions o;
  o.ctx = 128;
  o.bos = real->bos;
  auto r = evaluate_quality(real->model, real->tokens, o, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  std::map<std::string, EvalRow> by;
  for (const auto& row : r->rows) by[row.scheme] = row;
  // The quantiser's targets are about weight error: the /w rows (f32 activations, as the
  // Q8_0 row). The engine's int8 activations add their own error on top (docs/QUALITY.md).
  EXPECT_LE(by["D+R8/w"].kl_mean, 0.5 * by["Q8_0"].kl_mean);
  EXPECT_LE(by["D+R6/w"].kl_mean, by["Q8_0"].kl_mean);
  EXPECT_GT(by["D+R8"].kl_mean, by["D+R8/w"].kl_mean);
  EXPECT_GT(by["draft(R8)"].top1_agreement, by["minmax2"].top1_agreement);
  EXPECT_LT(by["draft(R8)"].kl_mean, by["minmax2"].kl_mean);
  // RAM cost of R6 against Q8_0 on the same (padded) shapes.
  EXPECT_LE(by["D+R6"].ram_bits_per_weight, 0.75 * by["Q8_0"].ram_bits_per_weight);
}


// The draft fitted with error feedback against the inputs' covariances (collected on the first
// half of the text) beats the ordinary fit with the same importance vectors on the second half, on
// a real trained model (measured: KL 1.96 against 2.49; width 64 gives each row a single group, so
// there is less to feed forward than in real models, where it halves the KL); D + R8 stays within
// 25 % of the ordinary fit's KL (measured 0.000265 against 0.000287).
TEST(Eval, ErrorFeedbackDraftBeatsTheOrdinaryFitOnStories260K) {
  const std::string shared = testing::shared_dir();
  const std::string path = shared.empty() ? "" : shared + "/models/stories260K.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto real = stories260k_on_sample(path);
  ASSERT_TRUE(real.is_ok()) << real.status().message();
  const Model& model = real->model;
  const auto& tokens = real->tokens;
  const std::vector<int32_t> calibration(tokens.begin(), tokens.begin() + std::ptrdiff_t(tokens.size() / 2));
  const std::vector<int32_t> text(tokens.begin() + std::ptrdiff_t(tokens.size() / 2), tokens.end());
  InputCovariances cov;
  auto im = collect_imatrix(model, calibration, 128, real->bos, nullptr, nullptr, &cov);
  ASSERT_TRUE(im.is_ok()) << im.status().message();
  EvalOptions o;
  o.ctx = 128;
  o.bos = real->bos;
  o.imatrix = &*im;
  o.schemes = {"draft(R8)", "D+R8"};
  auto ordinary = evaluate_quality(model, text, o, nullptr);
  o.covariances = &cov;
  auto fed = evaluate_quality(model, text, o, nullptr);
  ASSERT_TRUE(ordinary.is_ok() && fed.is_ok()) << ordinary.status().message() << fed.status().message();
  EXPECT_LT(fed->rows[0].kl_mean, 0.9 * ordinary->rows[0].kl_mean)
      << "draft KL: feedback " << fed->rows[0].kl_mean << ", ordinary " << ordinary->rows[0].kl_mean;
  EXPECT_LT(fed->rows[1].kl_mean, 1.25 * ordinary->rows[1].kl_mean)
      << "D+R8 KL: feedback " << fed->rows[1].kl_mean << ", ordinary " << ordinary->rows[1].kl_mean;
}

// Real models (../shared/models/fetch-real-models.sh) from the folder in BITSPLIT_REAL_MODELS;
// skipped without it.
// The model at `path` and the first `bytes` of tests/models/text/kjv.valid.txt in its tokens.
Result<ModelOnText> model_on_kjv(const std::string& path, size_t bytes) {
  BITSPLIT_ASSIGN_OR_RETURN(auto source, open_weights(path));
  BITSPLIT_ASSIGN_OR_RETURN(Model model, Model::load(*source));
  BITSPLIT_ASSIGN_OR_RETURN(auto tok, Tokenizer::from_metadata(source->metadata()));
  std::ifstream in(testing::source_dir() + "/tests/models/text/kjv.valid.txt");
  std::string text(bytes, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  return ModelOnText{std::move(model), tok->encode(text, {.add_special = false}), tok->vocab().bos};
}

// SmolLM2-135M: its uniform 2-bit draft is useless (KL ~10, docs/QUALITY.md)
// and a 3.5-bit budget must cut the draft's KL at least 3x while staying within the budget.
TEST(RealModels, DraftBudgetBeatsTheUniformTwoBitDraftOnSmolLM2) {
  const char* dir = std::getenv("BITSPLIT_REAL_MODELS");
  if (!dir || !*dir) GTEST_SKIP() << "set BITSPLIT_REAL_MODELS to the folder of fetch-real-models.sh";
  const std::string path = std::string(dir) + "/smollm2-135m-instruct.q4_1.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto real = model_on_kjv(path, 12000);
  ASSERT_TRUE(real.is_ok()) << real.status().message();
  const Model& model = real->model;
  const std::vector<int32_t>& tokens = real->tokens;
  EvalOptions o;
  o.ctx = 256;
  o.max_tokens = 510;
  o.bos = real->bos;
  o.schemes = {"draft(R8)"};
  auto uniform = evaluate_quality(model, tokens, o, nullptr);
  o.draft_bpw = 3.5;
  auto mixed = evaluate_quality(model, tokens, o, nullptr);
  ASSERT_TRUE(uniform.is_ok() && mixed.is_ok()) << uniform.status().message() << mixed.status().message();
  const EvalRow& u = uniform->rows.at(0);
  const EvalRow& m = mixed->rows.at(0);
  EXPECT_LE(m.vram_bits_per_weight, 3.5);
  EXPECT_GT(m.vram_bits_per_weight, 3.4);
  EXPECT_LT(m.kl_mean, u.kl_mean / 3) << "uniform " << u.kl_mean << ", mixed " << m.kl_mean;
  EXPECT_GT(m.top1_agreement, u.top1_agreement + 0.2);
}

// Issue 14, item 3, on a real model: the engine's own arithmetic (the draft-remainder default) is
// better than llama.cpp's Q8_0 — D+R8 at most half its KL, D+R6 at most its KL — where one int8
// row per row (D+R8/a8) is worse than it. llama.cpp c392e50's Q8_0 KL on this text and context
// (0.00422, docs/QUALITY.md) is a measured constant here: llama.cpp is not built in tests.
TEST(RealModels, TargetArithmeticBeatsLlamaCppQ8_0OnSmolLM2) {
  const char* dir = std::getenv("BITSPLIT_REAL_MODELS");
  if (!dir || !*dir) GTEST_SKIP() << "set BITSPLIT_REAL_MODELS to the folder of fetch-real-models.sh";
  const std::string path = std::string(dir) + "/smollm2-135m-instruct.q4_1.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto real = model_on_kjv(path, 60000);
  ASSERT_TRUE(real.is_ok()) << real.status().message();
  const Model& model = real->model;
  const std::vector<int32_t>& tokens = real->tokens;
  EvalOptions o;
  o.ctx = 512;
  o.max_tokens = 1024;
  o.bos = real->bos;
  o.schemes = {"D+R8", "D+R6", "D+R8/a8"};
  auto r = evaluate_quality(model, tokens, o, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  std::map<std::string, double> kl;
  for (const auto& row : r->rows) kl[row.scheme] = row.kl_mean;
  constexpr double kLlamaCppQ8_0 = 0.00422;
  EXPECT_LE(kl["D+R8"], 0.5 * kLlamaCppQ8_0);
  EXPECT_LE(kl["D+R6"], kLlamaCppQ8_0);
  EXPECT_GT(kl["D+R8/a8"], kLlamaCppQ8_0) << "one int8 row per row: the gap the remainder closes";
}

// Issue 14, item 2, on a real model: with error feedback from the inputs' covariances (collected
// on the 30 KB of kjv.valid.txt after the evaluated 60 KB, as docs/QUALITY.md's table), the
// draft at 3.0 bits/weight has KL <= 1.0 (measured 0.82; importance vectors alone: 2.11).
TEST(RealModels, ErrorFeedbackDraftAtThreeBitsOnSmolLM2) {
  const char* dir = std::getenv("BITSPLIT_REAL_MODELS");
  if (!dir || !*dir) GTEST_SKIP() << "set BITSPLIT_REAL_MODELS to the folder of fetch-real-models.sh";
  const std::string path = std::string(dir) + "/smollm2-135m-instruct.q4_1.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  auto real = model_on_kjv(path, 90000);
  auto evaluated = model_on_kjv(path, 60000);
  ASSERT_TRUE(real.is_ok() && evaluated.is_ok()) << real.status().message();
  // The 60 KB prefix's tokens are a prefix of the 90 KB text's up to the last few (a word cut at
  // byte 60000 may tokenise differently): calibrate on what follows them, a few tokens apart.
  const auto& all = real->tokens;
  const size_t start = evaluated->tokens.size() + 8;
  ASSERT_LT(start, all.size());
  const std::vector<int32_t> calibration(all.begin() + std::ptrdiff_t(start), all.end());
  InputCovariances cov;
  auto im = collect_imatrix(real->model, calibration, 512, real->bos, nullptr, nullptr, &cov);
  ASSERT_TRUE(im.is_ok()) << im.status().message();
  EvalOptions o;
  o.ctx = 512;
  o.max_tokens = 1024;
  o.bos = real->bos;
  o.imatrix = &*im;
  o.covariances = &cov;
  o.schemes = {"draft(R8)"};
  o.draft_bpw = 3.0;
  auto r = evaluate_quality(real->model, evaluated->tokens, o, nullptr);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_LE(r->rows[0].vram_bits_per_weight, 3.0);
  EXPECT_LE(r->rows[0].kl_mean, 1.0);
}

}  // namespace
}  // namespace bitsplit
