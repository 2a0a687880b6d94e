// Model configuration and loading errors: each names the key or tensor and what is wrong.
#include <gtest/gtest.h>

#include "bitsplit/model.h"
#include "gguf_testing.h"

namespace bitsplit {
namespace {

class WriterWeights : public WeightSource {
 public:
  explicit WriterWeights(const gguf::Writer& w)
      : file_(*gguf::File::parse(gguf::storage_from_bytes(w.to_bytes()), "cfg.gguf")) {}
  const std::string& path() const override { return file_.name(); }
  const gguf::Metadata& metadata() const override { return file_.metadata(); }
  const std::vector<gguf::TensorInfo>& tensors() const override { return file_.tensors(); }
  const gguf::TensorInfo* find_tensor(std::string_view n) const override { return file_.find_tensor(n); }
  Result<std::vector<float>> load_f32(const gguf::TensorInfo& t) const override { return file_.read_f32(t); }
  std::string describe() const override { return "writer"; }

 private:
  gguf::File file_;
};

std::string load_error(const gguf::Writer& w) {
  WriterWeights source(w);
  auto m = Model::load(source);
  return m.is_ok() ? std::string() : m.status().message();
}

TEST(ModelConfig, ReadsShapesOfTinyModel) {
  testing::TinyModelSpec spec;
  WriterWeights source(testing::make_tiny_model(spec));
  auto c = read_model_config(source);
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
