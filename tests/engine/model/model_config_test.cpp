// Model configuration and loading errors: each names the key or tensor and what is wrong.
#include <gtest/gtest.h>

#include <cmath>

#include "bitsplit/fused_tensors.h"
#include "bitsplit/model.h"
#include "gguf_testing.h"

namespace bitsplit {
namespace {

std::string load_error(const gguf::Writer& w) {
  auto m = Model::load(*testing::weights_from_writer(w, "cfg.gguf"));
  return m.is_ok() ? std::string() : m.status().message();
}

TEST(ModelConfig, ReadsShapesOfTinyModel) {
  testing::TinyModelSpec spec;
  auto c = read_model_config(*testing::tiny_weights(spec));
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->n_layers, 2);
  EXPECT_EQ(c->head_dim, 8);
  EXPECT_EQ(c->n_kv_heads, 2);
  EXPECT_EQ(c->n_vocab, 48);
  EXPECT_FALSE(c->tied_output);
}

TEST(ModelConfig, UnknownArchitectureListsSupportedOnes) {
  auto w = testing::make_tiny_model({});
  w.metadata().set("general.architecture", gguf::Value::string("mamba"));
  const std::string e = load_error(w);
  EXPECT_NE(e.find("architecture 'mamba' is not supported (supported: llama (also Mixtral-style mixture of experts), qwen2, qwen3, gemma2, gemma3, phi3, qwen2moe, qwen3moe)"), std::string::npos) << e;
}

TEST(ModelConfig, MissingAndMistypedKeys) {
  auto w = testing::make_tiny_model({});
  w.metadata().set("llama.block_count", gguf::Value::string("two"));
  EXPECT_NE(load_error(w).find("'llama.block_count' has type string"), std::string::npos);
  auto w2 = testing::make_tiny_model({});
  w2.metadata().set("llama.attention.head_count_kv", gguf::Value::u32(3));
  EXPECT_NE(load_error(w2).find("not a multiple of head_count_kv 3"), std::string::npos) << load_error(w2);
  auto w3 = testing::make_tiny_model({});
  w3.metadata().set("llama.rope.scaling.type", gguf::Value::string("yarn"));
  EXPECT_NE(load_error(w3).find("'yarn' is not supported"), std::string::npos);
  auto w4 = testing::make_tiny_model({});
  w4.metadata().set("llama.block_count", gguf::Value::u32(3));
  EXPECT_NE(load_error(w4).find("tensor 'blk.2.attn_norm.weight' is missing"), std::string::npos) << load_error(w4);
}

// Gemma: which layers slide, and every bad value of its keys named.
TEST(ModelConfig, GemmaSlidingWindowAndItsErrors) {
  testing::TinyModelSpec spec;
  spec.arch = "gemma3";
  spec.layers = 7;
  auto w = testing::make_tiny_model(spec);
  w.metadata().set("gemma3.attention.sliding_window", gguf::Value::u32(4));
  auto c = read_model_config(*testing::weights_from_writer(w));
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->swa_layers, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0, 1}));
  EXPECT_FLOAT_EQ(c->rope_base_swa, 10000.0f);
  EXPECT_FLOAT_EQ(c->layer_rope_base(5), c->rope_base);
  EXPECT_EQ(load_error(w), "");

  auto period = w;
  period.metadata().set("gemma3.attention.sliding_window_pattern", gguf::Value::u32(3));
  c = read_model_config(*testing::weights_from_writer(period));
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->swa_layers, (std::vector<uint8_t>{1, 1, 0, 1, 1, 0, 1}));

  auto bools = w;
  bools.metadata().set("gemma3.attention.sliding_window_pattern",
                       gguf::Value::array(gguf::ValueType::kBool, {gguf::Value::boolean(true), gguf::Value::boolean(false)}));
  EXPECT_NE(load_error(bools).find("gemma3.attention.sliding_window_pattern has 2 entries, expected one per layer (7)"),
            std::string::npos)
      << load_error(bools);
  auto zero = w;
  zero.metadata().set("gemma3.attention.sliding_window_pattern", gguf::Value::i32(0));
  EXPECT_NE(load_error(zero).find("sliding_window_pattern is 0, must be positive"), std::string::npos) << load_error(zero);
  auto negative = w;
  negative.metadata().set("gemma3.attention.sliding_window", gguf::Value::i32(-1));
  EXPECT_NE(load_error(negative).find("gemma3.attention.sliding_window is -1"), std::string::npos) << load_error(negative);
  auto cap = w;
  cap.metadata().set("gemma3.final_logit_softcapping", gguf::Value::f32(-30.0f));
  EXPECT_NE(load_error(cap).find("gemma3.final_logit_softcapping must be a finite value >= 0"), std::string::npos)
      << load_error(cap);

  // A llama file relabelled gemma2 lacks the norms after each branch: the tensor is named.
  spec.arch = "llama";
  spec.layers = 2;
  auto relabelled = testing::make_tiny_model(spec);
  relabelled.metadata().set("general.architecture", gguf::Value::string("gemma2"));
  const auto entries = relabelled.metadata().entries();
  for (const auto& [key, value] : entries) {
    if (key.rfind("llama.", 0) == 0) relabelled.metadata().set("gemma2." + key.substr(6), value);
  }
  EXPECT_NE(load_error(relabelled).find("tensor 'blk.0.post_attention_norm.weight' is missing"), std::string::npos)
      << load_error(relabelled);
}

// Phi-3: a fused q/k/v tensor whose rows do not add up, and LongRoPE files that cannot be run
// (a factor set or its context missing, a factor of 0, factors of the wrong size), are named.
TEST(ModelConfig, Phi3FusedTensorsAndLongRopeErrors) {
  testing::TinyModelSpec spec;
  spec.arch = "phi3";
  auto w = testing::make_tiny_model(spec);
  EXPECT_EQ(load_error(w), "");  // separate tensors: a plain llama layout
  auto bad = w;
  ASSERT_TRUE(bad.add_tensor("blk.0.attn_qkv.weight", gguf::TensorType::F32, {32, 50},
                             testing::encode_tensor(gguf::TensorType::F32, std::vector<float>(32 * 50)))
                  .is_ok());
  auto unfused = unfuse_projections(testing::weights_from_writer(bad));
  ASSERT_FALSE(unfused.is_ok());
  EXPECT_NE(unfused.status().message().find("tensor 'blk.0.attn_qkv.weight' has shape [32, 50], expected [32, 64]"),
            std::string::npos)
      << unfused.status().message();
  auto plain = read_model_config(*testing::weights_from_writer(w));
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  EXPECT_EQ(plain->rope_original_context, 0);
  const int64_t half = plain->n_rot / 2;
  auto factors = [&](gguf::Writer& to, const char* name, std::vector<float> v) {
    ASSERT_TRUE(to.add_tensor(name, gguf::TensorType::F32, {int64_t(v.size())}, testing::encode_tensor(gguf::TensorType::F32, v))
                    .is_ok());
  };
  auto long_only = w;
  factors(long_only, "rope_factors_long.weight", std::vector<float>(size_t(half), 2.0f));
  EXPECT_NE(load_error(long_only).find("tensor 'rope_factors_short.weight' is missing"), std::string::npos)
      << load_error(long_only);
  auto both = long_only;
  factors(both, "rope_factors_short.weight", std::vector<float>(size_t(half), 1.0f));
  EXPECT_NE(load_error(both).find("phi3.rope.scaling.original_context_length is missing"), std::string::npos)
      << load_error(both);
  both.metadata().set("phi3.rope.scaling.original_context_length", gguf::Value::u32(16));
  EXPECT_EQ(load_error(both), "");
  auto c = read_model_config(*testing::weights_from_writer(both));
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  const double stretch = double(c->n_ctx_train) / 16.0;  // the attention factor when the file gives none
  EXPECT_NEAR(c->rope_attn_factor, std::sqrt(1.0 + std::log(stretch) / std::log(16.0)), 1e-6);
  both.metadata().set("phi3.rope.scaling.attn_factor", gguf::Value::f32(1.5f));
  c = read_model_config(*testing::weights_from_writer(both));
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  EXPECT_EQ(c->rope_attn_factor, 1.5f);
  auto huge = both;  // an attention factor that would overflow q·k
  huge.metadata().set("phi3.rope.scaling.attn_factor", gguf::Value::f32(1e30f));
  EXPECT_NE(load_error(huge).find("phi3.rope.scaling.attn_factor must be in (0, 100]"), std::string::npos) << load_error(huge);
  auto zero = long_only;
  std::vector<float> with_zero(size_t(half), 1.0f);
  with_zero[1] = 0.0f;
  factors(zero, "rope_factors_short.weight", with_zero);
  zero.metadata().set("phi3.rope.scaling.original_context_length", gguf::Value::u32(16));
  EXPECT_NE(load_error(zero).find("tensor 'rope_factors_short.weight': factor 1 is 0"), std::string::npos) << load_error(zero);
  auto short_size = long_only;
  factors(short_size, "rope_factors_short.weight", std::vector<float>(size_t(half) + 1, 1.0f));
  short_size.metadata().set("phi3.rope.scaling.original_context_length", gguf::Value::u32(16));
  EXPECT_NE(load_error(short_size).find("tensor 'rope_factors_short.weight' has shape"), std::string::npos)
      << load_error(short_size);
  auto no_tensors = w;
  no_tensors.metadata().set("phi3.rope.scaling.type", gguf::Value::string("longrope"));
  EXPECT_NE(load_error(no_tensors).find("rope_factors_long.weight and rope_factors_short.weight are missing"), std::string::npos)
      << load_error(no_tensors);
}

TEST(ModelConfig, WrongTensorShapeIsNamed) {
  auto w = testing::make_tiny_model({});
  w.metadata().set("llama.feed_forward_length", gguf::Value::u32(60));
  const std::string e = load_error(w);
  EXPECT_NE(e.find("tensor 'blk.0.ffn_gate.weight' has shape [32, 64], expected [32, 60]"), std::string::npos) << e;
}

}  // namespace
}  // namespace bitsplit
