// Gemma 2, Gemma 3 and Phi-3 against an independent implementation: Hugging Face transformers' own
// modeling code (tools/hf_reference.py, float32, eager attention) on the same GGUF weights.
// Always: the tiny random gemma2/gemma3 fixtures in tests/models (sliding window 8, so the
// window is crossed; gemma2 with both soft caps). With BITSPLIT_REAL_MODELS: the real
// Gemma-3-270M (window 512, crossed by a 700-token prompt).
//
// For every golden case: the prompt tokenises to the recorded ids; the prompt is prefilled in
// one batch and the recorded continuation fed one token at a time through the KV cache; at
// every recorded position our logits of the reference's top-k tokens agree with its values, and
// our argmax is its greedy token wherever its top-2 gap is at least 1e-3 (closer is a tie two
// correct f32 implementations may break either way).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bitsplit/model.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/weights.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

constexpr double kTie = 1e-3;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

// Logits of every position of prompt + continuation[:-1]: the prompt as one batch, then one
// token per step (the decode path, where the sliding window reads positions from the cache).
// The KV cache has `slots` slots (0: just enough).
std::vector<std::vector<float>> logits_by_position(const Model& model, const std::vector<int32_t>& prompt,
                                                   const std::vector<int32_t>& continuation, int64_t slots = 0) {
  const ModelConfig& c = model.config();
  KvCache cache(c, slots > 0 ? slots : int64_t(prompt.size() + continuation.size()));
  std::vector<std::vector<float>> rows;
  auto prefill = forward_pass(model, cache, Batch::causal(prompt, 0, /*all_logits=*/true));
  EXPECT_TRUE(prefill.is_ok()) << prefill.status().message();
  if (!prefill.is_ok()) return rows;
  for (size_t i = 0; i < prompt.size(); ++i) {
    rows.emplace_back(prefill->begin() + int64_t(i) * c.n_vocab, prefill->begin() + int64_t(i + 1) * c.n_vocab);
  }
  for (size_t i = 0; i + 1 < continuation.size(); ++i) {
    const int32_t token = continuation[i];
    auto step = forward_pass(model, cache, Batch::causal(std::span(&token, 1), int32_t(prompt.size() + i)));
    EXPECT_TRUE(step.is_ok()) << step.status().message();
    if (!step.is_ok()) return rows;
    rows.push_back(std::move(*step));
  }
  return rows;
}

// `tolerance`: allowed |ours - reference| per logit, relative to max(1, |reference|).
void expect_matches_reference(const std::string& model_path, const std::string& golden_path, double tolerance) {
  auto source = open_weights(model_path);
  ASSERT_TRUE(source.is_ok()) << source.status().message();
  auto model = Model::load(**source);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  auto tokenizer = Tokenizer::from_metadata((*source)->metadata());
  ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().message();
  const nlohmann::json g = read_json(golden_path);
  ASSERT_FALSE(g["cases"].empty());
  int compared = 0, greedy_checked = 0;
  for (size_t ci = 0; ci < g["cases"].size(); ++ci) {
    SCOPED_TRACE("case " + std::to_string(ci));
    const auto& cs = g["cases"][ci];
    const auto prompt = cs["prompt_tokens"].get<std::vector<int32_t>>();
    const auto generated = cs["generated"].get<std::vector<int32_t>>();
    if (cs.contains("prompt") && cs["prompt"].is_string()) {
      EXPECT_EQ((*tokenizer)->encode(cs["prompt"].get<std::string>()), prompt) << "tokenization differs";
    }
    const auto rows = logits_by_position(*model, prompt, generated);
    ASSERT_EQ(rows.size(), prompt.size() + (generated.empty() ? 0 : generated.size() - 1));
    const size_t first = cs["first_position"].get<size_t>();
    const auto& top_ids = cs["top_ids"];
    const auto& top_logits = cs["top_logits"];
    ASSERT_EQ(first + top_ids.size(), rows.size());
    double worst = 0.0;
    for (size_t r = 0; r < top_ids.size(); ++r) {
      const std::vector<float>& ours = rows[first + r];
      const auto ids = top_ids[r].get<std::vector<int32_t>>();
      const auto ref = top_logits[r].get<std::vector<double>>();
      for (size_t k = 0; k < ids.size(); ++k) {
        const double err = std::fabs(double(ours[size_t(ids[k])]) - ref[k]) / std::max(1.0, std::fabs(ref[k]));
        worst = std::max(worst, err);
        EXPECT_LE(err, tolerance) << "position " << first + r << ", token " << ids[k] << ": ours "
                                  << ours[size_t(ids[k])] << ", reference " << ref[k];
        ++compared;
      }
      // The greedy continuation: position p predicts generated[p - prompt + 1].
      const size_t pos = first + r;
      if (pos + 1 >= prompt.size() && ref.size() >= 2 && ref[0] - ref[1] >= kTie) {
        const size_t gi = pos + 1 - prompt.size();
        const auto argmax = int32_t(std::max_element(ours.begin(), ours.end()) - ours.begin());
        EXPECT_EQ(argmax, generated[gi]) << "greedy token " << gi << " (reference top-2 gap " << ref[0] - ref[1] << ")";
        ++greedy_checked;
      }
    }
    std::printf("[ case %zu ] %zu positions, worst relative logit error %.2e\n", ci, top_ids.size(), worst);
  }
  EXPECT_GT(compared, 0);
  EXPECT_GT(greedy_checked, 0);
}

TEST(HfGolden, TinyGemma3MatchesTransformers) {
  const std::string dir = testing::source_dir() + "/tests/models/";
  BITSPLIT_REQUIRE_FILE(dir + "gemma3-tiny.gguf");
  expect_matches_reference(dir + "gemma3-tiny.gguf", dir + "hf/gemma3-tiny.json", 1e-4);
}

TEST(HfGolden, TinyGemma2MatchesTransformers) {
  const std::string dir = testing::source_dir() + "/tests/models/";
  BITSPLIT_REQUIRE_FILE(dir + "gemma2-tiny.gguf");
  expect_matches_reference(dir + "gemma2-tiny.gguf", dir + "hf/gemma2-tiny.json", 1e-4);
}

// Phi-3: fused q/k/v and gate/up (read as separate tensors), every layer sliding (window 6).
TEST(HfGolden, TinyPhi3MatchesTransformers) {
  const std::string dir = testing::source_dir() + "/tests/models/";
  BITSPLIT_REQUIRE_FILE(dir + "phi3-tiny.gguf");
  expect_matches_reference(dir + "phi3-tiny.gguf", dir + "hf/phi3-tiny.json", 1e-4);
  auto source = open_weights(dir + "phi3-tiny.gguf");
  ASSERT_TRUE(source.is_ok());
  EXPECT_TRUE((*source)->find_tensor("blk.0.attn_qkv.weight") == nullptr);
  ASSERT_TRUE((*source)->find_tensor("blk.0.attn_k.weight") != nullptr);
  EXPECT_EQ((*source)->find_tensor("blk.0.attn_k.weight")->dims, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ((*source)->find_tensor("blk.0.ffn_gate.weight")->dims, (std::vector<int64_t>{64, 96}));
  auto c = read_model_config(**source);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->swa_layers, (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ(c->sliding_window, 6);
}

// Phi-3 with LongRoPE (the 128k models' per-frequency factors): trained for 32 positions, stretched
// to 256, cos/sin x 1.265. The short case's sequence (17 positions) turns by the short factors and
// the long one's (65) by the long factors, as transformers picks them by the sequence's length and
// we by the KV cache's context (a cache of just enough slots here).
TEST(HfGolden, TinyPhi3LongRopeMatchesTransformers) {
  const std::string dir = testing::source_dir() + "/tests/models/";
  BITSPLIT_REQUIRE_FILE(dir + "phi3-longrope-tiny.gguf");
  expect_matches_reference(dir + "phi3-longrope-tiny.gguf", dir + "hf/phi3-longrope-tiny.json", 1e-4);
  auto source = open_weights(dir + "phi3-longrope-tiny.gguf");
  ASSERT_TRUE(source.is_ok());
  auto model = Model::load(**source);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  const ModelConfig& c = model->config();
  EXPECT_EQ(c.rope_original_context, 32);
  EXPECT_NEAR(c.rope_attn_factor, std::sqrt(1.0 + std::log(8.0) / std::log(32.0)), 1e-6);
  ASSERT_EQ(model->rope_freq_factors(32).size(), 8u);
  EXPECT_NE(model->rope_freq_factors(32), model->rope_freq_factors(33));
  // The same short sequence in a 256-slot cache (a sequence meant to reach 256 positions) turns by
  // the long factors.
  const nlohmann::json g = read_json(dir + "hf/phi3-longrope-tiny.json");
  const auto prompt = g["cases"][0]["prompt_tokens"].get<std::vector<int32_t>>();
  const auto generated = g["cases"][0]["generated"].get<std::vector<int32_t>>();
  ASSERT_LE(prompt.size() + generated.size(), 32u);
  const auto fitted = logits_by_position(*model, prompt, generated);
  const auto stretched = logits_by_position(*model, prompt, generated, 256);
  ASSERT_EQ(fitted.size(), stretched.size());
  double largest = 0.0;
  for (size_t r = 1; r < fitted.size(); ++r) {  // position 0 turns by nothing
    for (size_t t = 0; t < fitted[r].size(); ++t) largest = std::max(largest, double(std::fabs(fitted[r][t] - stretched[r][t])));
  }
  EXPECT_GT(largest, 1e-2) << "a 256-slot cache should use the long factors";
}

// A mixture of experts trained on the KJV (tools/fixtures/train_moe.py: qwen3moe, 4 layers, 8
// experts of width 64, 2 per token): its router is trained, so rows really spread over experts.
TEST(HfGolden, TrainedMixtureOfExpertsMatchesTransformers) {
  const std::string dir = testing::source_dir() + "/tests/models/";
  BITSPLIT_REQUIRE_FILE(dir + "qwen3moe-bible.gguf");
  expect_matches_reference(dir + "qwen3moe-bible.gguf", dir + "hf/qwen3moe-bible.json", 1e-4);
  auto source = open_weights(dir + "qwen3moe-bible.gguf");
  ASSERT_TRUE(source.is_ok());
  auto c = read_model_config(**source);
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->n_layers, 4);
  EXPECT_EQ(c->n_expert, 8);
  EXPECT_EQ(c->n_ff_exp, 64);
}

// Mixtures of experts: 8 experts, 2 per token, routed per row; qwen2moe with a shared expert
// and unnormalised weights, qwen3moe with QK-norm, Mixtral as a llama file with expert_count.
TEST(HfGolden, TinyMixturesOfExpertsMatchTransformers) {
  const std::string dir = testing::source_dir() + "/tests/models/";
  for (const char* name : {"mixtral-tiny", "qwen2moe-tiny", "qwen3moe-tiny"}) {
    SCOPED_TRACE(name);
    BITSPLIT_REQUIRE_FILE(dir + name + ".gguf");
    expect_matches_reference(dir + name + ".gguf", dir + "hf/" + name + ".json", 1e-4);
    auto source = open_weights(dir + name + ".gguf");
    ASSERT_TRUE(source.is_ok());
    auto c = read_model_config(**source);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_EQ(c->n_expert, 8);
    EXPECT_EQ(c->n_expert_used, 2);
    EXPECT_EQ(c->n_ff_exp, 32);
    EXPECT_EQ(c->expert_weights_norm, std::string(name) != "qwen2moe-tiny");
    EXPECT_EQ(c->n_ff_shexp, std::string(name) == "qwen2moe-tiny" ? 48 : 0);
    ASSERT_TRUE((*source)->find_tensor("blk.1.ffn_down.7.weight") != nullptr) << "per-expert views";
    EXPECT_EQ((*source)->find_tensor("blk.1.ffn_down.7.weight")->dims, (std::vector<int64_t>{32, 64}));
  }
}

// The configuration the fixtures exercise: sliding-window layers where the families put them.
TEST(HfGolden, GemmaLayerPatterns) {
  const std::string dir = testing::source_dir() + "/tests/models/";
  BITSPLIT_REQUIRE_FILE(dir + "gemma3-tiny.gguf");
  for (const auto& [file, pattern] : {std::pair{"gemma3-tiny.gguf", std::vector<uint8_t>{1, 1, 1, 1, 1, 0}},
                                      std::pair{"gemma2-tiny.gguf", std::vector<uint8_t>{1, 0, 1, 0}}}) {
    auto source = open_weights(dir + file);
    ASSERT_TRUE(source.is_ok());
    auto c = read_model_config(**source);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_EQ(c->swa_layers, pattern) << file;
    EXPECT_EQ(c->sliding_window, 8);
    EXPECT_FLOAT_EQ(c->embd_scale, 8.0f);
    EXPECT_EQ(c->ffn_act, FfnActivation::kGeluTanh);
    EXPECT_TRUE(c->has_post_norms);
  }
}

TEST(HfGolden, RealGemma3_270MMatchesTransformers) {
  const char* dir = std::getenv("BITSPLIT_REAL_MODELS");
  if (!dir || !*dir) GTEST_SKIP() << "set BITSPLIT_REAL_MODELS to the folder of fetch-real-models.sh";
  const std::string path = std::string(dir) + "/gemma-3-270m.q4_k_m.gguf";
  BITSPLIT_REQUIRE_FILE(path);
  expect_matches_reference(path, testing::source_dir() + "/tests/models/hf/gemma-3-270m.json", 1e-4);
}

}  // namespace
}  // namespace bitsplit
