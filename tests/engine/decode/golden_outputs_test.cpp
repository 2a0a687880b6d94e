// Golden tests against independent implementations: llama.cpp's outputs for stories260K
// (../shared/golden) and the PyTorch reference outputs for our fixture models
// (tests/models/golden). Greedy tokens must match until the recorded top-2 gap gets too
// small to decide, and the last-prompt-position logits must agree to f32 accuracy.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bitsplit/generate.h"
#include "bitsplit/tokenizer.h"
#include "bitsplit/variant.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

namespace fs = std::filesystem;

struct GoldenSet {
  std::string name, model, dir;
  // llama.cpp keeps K and V in f16 by default and so multiplies Q·K and P·V in f16.
  bool reference_attention_in_f16 = false;
  // A LoRA adapter on `model` at a scale (the dir's variant.json), or none.
  std::string lora;
  float lora_scale = 1.0f;
};

// Every golden directory whose model file exists.
std::vector<GoldenSet> golden_sets() {
  std::vector<GoldenSet> sets;
  const std::string shared = testing::shared_dir();
  if (!shared.empty()) sets.push_back({"stories260K", shared + "/models/stories260K.gguf", shared + "/golden/stories260K", true});
  const fs::path ours = fs::path(testing::source_dir()) / "tests/models/golden";
  std::error_code ec;
  if (fs::is_directory(ours, ec)) {
    for (const auto& entry : fs::directory_iterator(ours)) {
      if (!entry.is_directory()) continue;
      const std::string name = entry.path().filename().string();
      const fs::path models = fs::path(testing::source_dir()) / "tests/models";
      // {"base": MODEL, "lora": ADAPTER, "scale": S}: the golden outputs of MODEL with the adapter.
      const fs::path variant = entry.path() / "variant.json";
      if (fs::exists(variant)) {
        std::ifstream in(variant);
        const auto v = nlohmann::json::parse(in);
        sets.push_back({name, (models / v["base"].get<std::string>()).string(), entry.path().string(), false,
                        (models / v["lora"].get<std::string>()).string(), v.value("scale", 1.0f)});
        continue;
      }
      const fs::path model = models / (name + ".gguf");
      if (fs::exists(model)) sets.push_back({name, model.string(), entry.path().string()});
    }
  }
  return sets;
}

std::vector<float> read_f32_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const auto size = size_t(in.tellg());
  std::vector<float> v(size / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
  return v;
}

// Below this recorded top-2 logit gap, two correct f32 implementations may pick different
// tokens (the README of ../shared/golden says so); comparison stops at the first such step.
constexpr double kUndecidableGap = 1e-3;

TEST(Golden, GreedyTokensAndPromptLogitsMatchIndependentImplementation) {
  const auto sets = golden_sets();
  if (sets.empty()) GTEST_SKIP() << "no golden data found (../shared absent and tests/models/golden empty)";
  for (const auto& set : sets) {
    SCOPED_TRACE(set.name);
    auto source = open_weights(set.model);
    ASSERT_TRUE(source.is_ok()) << source.status().message();
    auto model = Model::load(**source);
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    auto tokenizer = Tokenizer::from_metadata((*source)->metadata());
    ASSERT_TRUE(tokenizer.is_ok()) << tokenizer.status().message();
    std::shared_ptr<const Variant> variant;
    if (!set.lora.empty()) {
      auto lora = open_lora(set.lora);
      ASSERT_TRUE(lora.is_ok()) << lora.status().message();
      auto v = Variant::load(*lora, *model, "lora", set.lora_scale);
      ASSERT_TRUE(v.is_ok()) << v.status().message();
      variant = *v;
    }
    int cases = 0;
    for (int i = 0;; ++i) {
      const std::string json_path = set.dir + "/" + std::to_string(i) + ".json";
      if (!fs::exists(json_path)) break;
      ++cases;
      SCOPED_TRACE("case " + std::to_string(i));
      std::ifstream in(json_path);
      const auto g = nlohmann::json::parse(in);
      const auto prompt_ids = g["prompt_ids"].get<std::vector<int32_t>>();
      const auto greedy = g["greedy_ids"].get<std::vector<int32_t>>();
      const auto gaps = g["top2_gaps"].get<std::vector<double>>();
      EXPECT_EQ((*tokenizer)->encode(g["prompt"].get<std::string>()), prompt_ids) << "tokenization differs";

      size_t decidable = 0;
      while (decidable < gaps.size() && gaps[decidable] >= kUndecidableGap) ++decidable;
      SamplingParams params;
      params.temperature = 0.0f;
      Sampler sampler(params);
      GenerateOptions options;
      options.n_predict = int32_t(greedy.size());
      options.variant = variant.get();
      std::vector<int32_t> ours;
      std::vector<float> logits;
      auto stats = generate(*model, prompt_ids, options, sampler,
                            [&](int32_t t) { ours.push_back(t); return true; }, &logits);
      ASSERT_TRUE(stats.is_ok()) << stats.status().message();
      ASSERT_GE(ours.size(), decidable);
      for (size_t k = 0; k < decidable; ++k) ASSERT_EQ(ours[k], greedy[k]) << "greedy token " << k << " differs";

      // Two f32 implementations differ only in summation order: over a few layers of dots
      // of length <= max(n_embd, n_ff) that stays within a few hundred ulps of the logits'
      // scale, so 2^-12 of the scale (~2000 ulps) has margin yet catches any real error.
      // llama.cpp's reference rounds Q, K, V and the attention weights to f16 (its default
      // f16 KV cache), which moves logits by up to a couple of f16 ulps (2^-11) of the
      // scale: there the bound is 4 f16 ulps. (Emulating that f16 rounding in our pass
      // brought 4 of the 5 stories260K cases to <= 4e-6 — the f32 level — and the fifth
      // to 2e-3, so the f16 cache is the whole difference.)
      const auto ref = read_f32_file(set.dir + "/" + std::to_string(i) + ".logits.f32");
      ASSERT_EQ(ref.size(), logits.size());
      double scale = 0.0, max_diff = 0.0;
      for (float v : ref) scale = std::max(scale, std::fabs(double(v)));
      for (size_t k = 0; k < ref.size(); ++k) max_diff = std::max(max_diff, std::fabs(double(ref[k]) - logits[k]));
      const double tolerance = (set.reference_attention_in_f16 ? 4 * std::ldexp(1.0, -11) : std::ldexp(1.0, -12)) * (1.0 + scale);
      EXPECT_LE(max_diff, tolerance) << "max |logit difference| " << max_diff << " (scale " << scale << ")";
      RecordProperty(set.name + "_" + std::to_string(i) + "_max_logit_diff", std::to_string(max_diff));
    }
    EXPECT_GT(cases, 0) << "no cases in " << set.dir;
  }
}

}  // namespace
}  // namespace bitsplit
