// Test helper: builds small llama/qwen2/qwen3 GGUF models with random weights in memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bitsplit/gguf.h"
#include "bitsplit/weights.h"

namespace bitsplit::testing {

struct TinyModelSpec {
  std::string arch = "llama";
  int64_t layers = 2, embd = 32, heads = 4, kv_heads = 2, ff = 64, vocab = 48, ctx = 64;
  gguf::TensorType type = gguf::TensorType::F32;  // type of the 2-D weights
  bool tied_output = false;
  uint64_t seed = 1;
};

// A complete model file (metadata, SentencePiece vocabulary, tensors) as a Writer.
gguf::Writer make_tiny_model(const TinyModelSpec& spec);
std::vector<uint8_t> tiny_model_bytes(const TinyModelSpec& spec);

// The model (or any writer's output) as an in-memory weight source.
std::unique_ptr<WeightSource> weights_from_writer(const gguf::Writer& writer, const std::string& name = "tiny.gguf");
inline std::unique_ptr<WeightSource> tiny_weights(const TinyModelSpec& spec) { return weights_from_writer(make_tiny_model(spec)); }

// Encodes f32 values as `type` (F32, F16, BF16 or Q8_0) bytes.
std::vector<uint8_t> encode_tensor(gguf::TensorType type, const std::vector<float>& values);

}  // namespace bitsplit::testing
