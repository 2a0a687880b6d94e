// The Q8_0 baseline end to end: `bitsplit quantize` writes Q8_0 projections, and a model
// loaded with q8_0_kernels runs them on the Q8_0 kernel — close to the dequantised weights
// with f32 activations, batch invariant, and decoding the same text.
#include <gtest/gtest.h>

#include <cmath>

#include "bitsplit/convert.h"
#include "bitsplit/generate.h"
#include "gguf_testing.h"
#include "test_paths.h"

namespace bitsplit {
namespace {

std::string fixture(const std::string& name) { return testing::source_dir() + "/tests/models/" + name; }

std::vector<float> logits(const Model& m, const std::vector<int32_t>& tokens) {
  KvCache cache(m.config(), int64_t(tokens.size()));
  auto r = forward_pass(m, cache, Batch::causal(tokens, 0, true));
  BITSPLIT_CHECK(r.is_ok(), r.status().message());
  return *r;
}

TEST(Q8_0Model, KernelPathMatchesDequantisedWeightsAndIsBatchInvariant) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  testing::TempDir dir("q8-model");
  auto src = open_weights(fixture("bible-base.gguf"));
  ASSERT_TRUE(src.is_ok());
  const std::string path = dir.file("base.q8_0.gguf");
  uint64_t bytes = 0;
  ASSERT_TRUE(quantize_model_q8_0(**src, path, nullptr, &bytes).is_ok());
  auto q8 = open_weights(path);
  ASSERT_TRUE(q8.is_ok()) << q8.status().message();
  int q8_tensors = 0;
  for (const auto& t : (*q8)->tensors()) q8_tensors += t.type == gguf::TensorType::Q8_0;
  EXPECT_EQ(q8_tensors, 6 * 7 + 2) << "every projection, the head and the token embedding";

  auto kernel = Model::load(**q8, {.q8_0_kernels = true});
  auto dequant = Model::load(**q8);
  ASSERT_TRUE(kernel.is_ok() && dequant.is_ok());
  EXPECT_TRUE(kernel->has_q8_0());
  EXPECT_FALSE(dequant->has_q8_0());
  const std::vector<int32_t> tokens = {1, 450, 37, 921, 12, 77, 1500, 3, 260, 900, 41};
  const auto a = logits(*kernel, tokens), b = logits(*dequant, tokens);
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::fabs(double(b[i])));
  }
  // int8 activations per 32 move the logits a little, never wholesale.
  EXPECT_GT(max_diff, 0.0) << "the kernel path must actually run";
  EXPECT_LT(max_diff, 0.02 * max_ref);

  // Token by token through the cache gives bitwise the batch's rows.
  const int64_t V = kernel->config().n_vocab;
  KvCache cache(kernel->config(), int64_t(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) {
    Batch one = Batch::causal(std::span<const int32_t>(&tokens[i], 1), int32_t(i));
    auto r = forward_pass(*kernel, cache, one);
    ASSERT_TRUE(r.is_ok());
    for (int64_t v = 0; v < V; ++v) ASSERT_EQ((*r)[size_t(v)], a[i * size_t(V) + size_t(v)]) << "token " << i;
  }
}

// A tied head (no output.weight) reads the Q8_0 embedding's blocks on the Q8_0 kernel, as
// llama.cpp's does, instead of an f32 copy 3.8x the size.
TEST(Q8_0Model, TiedHeadRunsOnTheQ8_0Kernel) {
  testing::TempDir dir("q8-tied");
  testing::TinyModelSpec spec;
  spec.tied_output = true;
  const std::string src_path = dir.file("tied.gguf");
  ASSERT_TRUE(testing::make_tiny_model(spec).write_file(src_path).is_ok());
  auto src = open_weights(src_path);
  ASSERT_TRUE(src.is_ok());
  const std::string path = dir.file("tied.q8_0.gguf");
  ASSERT_TRUE(quantize_model_q8_0(**src, path, nullptr, nullptr).is_ok());
  auto q8 = open_weights(path);
  ASSERT_TRUE(q8.is_ok());
  EXPECT_EQ((*q8)->find_tensor("token_embd.weight")->type, gguf::TensorType::Q8_0);
  auto kernel = Model::load(**q8, {.q8_0_kernels = true});
  auto dequant = Model::load(**q8);
  ASSERT_TRUE(kernel.is_ok() && dequant.is_ok());
  ASSERT_NE(kernel->q8_0("output.weight"), nullptr) << "the tied head's blocks";
  const std::vector<int32_t> tokens = {1, 5, 9, 20, 33};
  const auto a = logits(*kernel, tokens), b = logits(*dequant, tokens);
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double(a[i]) - b[i]));
    max_ref = std::max(max_ref, std::fabs(double(b[i])));
  }
  EXPECT_GT(max_diff, 0.0);
  EXPECT_LT(max_diff, 0.03 * max_ref);
}

TEST(Q8_0Model, QuantizeRejectsAConvertedModel) {
  BITSPLIT_REQUIRE_FILE(fixture("bible-base.gguf"));
  testing::TempDir dir("q8-reject");
  auto src = open_weights(fixture("bible-base.gguf"));
  ASSERT_TRUE(src.is_ok());
  const std::string split = dir.file("split.gguf");
  ASSERT_TRUE(convert_model(**src, split, {}, nullptr, nullptr).is_ok());
  auto s = open_weights(split);
  ASSERT_TRUE(s.is_ok());
  Status st = quantize_model_q8_0(**s, dir.file("x.gguf"), nullptr, nullptr);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("bit-split"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace bitsplit
