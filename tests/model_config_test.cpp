// Model configuration and loading errors: each names the key or tensor and what is wrong.
#include <gtest/gtest.h>

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
  EXPECT_NE(e.find("architecture 'mamba' is not supported (supported: llama, qwen2, qwen3)"), std::string::npos) << e;
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

TEST(ModelConfig, WrongTensorShapeIsNamed) {
  auto w = testing::make_tiny_model({});
  w.metadata().set("llama.feed_forward_length", gguf::Value::u32(60));
  const std::string e = load_error(w);
  EXPECT_NE(e.find("tensor 'blk.0.ffn_gate.weight' has shape [32, 64], expected [32, 60]"), std::string::npos) << e;
}

}  // namespace
}  // namespace bitsplit
