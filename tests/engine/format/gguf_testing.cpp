// Builds small random-weight models through the GGUF writer for format and model tests.
#include "gguf_testing.h"

#include <cstring>
#include <random>

#include "bitsplit/quant.h"
#include "bitsplit/status.h"

namespace bitsplit::testing {

std::vector<uint8_t> encode_tensor(gguf::TensorType type, const std::vector<float>& values) {
  std::vector<uint8_t> out;
  switch (type) {
    case gguf::TensorType::F32:
      out.resize(values.size() * 4);
      std::memcpy(out.data(), values.data(), out.size());
      break;
    case gguf::TensorType::F16:
    case gguf::TensorType::BF16:
      out.resize(values.size() * 2);
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t h = type == gguf::TensorType::F16 ? quant::fp32_to_fp16(values[i]) : quant::fp32_to_bf16(values[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case gguf::TensorType::Q8_0: {
      std::vector<quant::BlockQ8_0> blocks(values.size() / 32);
      quant::quantize_q8_0_ref(values, blocks);
      out.resize(blocks.size() * sizeof(quant::BlockQ8_0));
      std::memcpy(out.data(), blocks.data(), out.size());
      break;
    }
    default:
      BITSPLIT_CHECK(false, "encode_tensor: unsupported type");
  }
  return out;
}

gguf::Writer make_tiny_model(const TinyModelSpec& s) {
  using gguf::Value;
  gguf::Writer w;
  auto& m = w.metadata();
  const std::string p = s.arch + ".";
  m.set("general.architecture", Value::string(s.arch));
  m.set("general.name", Value::string("tiny-" + s.arch));
  m.set(p + "block_count", Value::u32(uint32_t(s.layers)));
  m.set(p + "embedding_length", Value::u32(uint32_t(s.embd)));
  m.set(p + "feed_forward_length", Value::u32(uint32_t(s.ff)));
  m.set(p + "attention.head_count", Value::u32(uint32_t(s.heads)));
  m.set(p + "attention.head_count_kv", Value::u32(uint32_t(s.kv_heads)));
  m.set(p + "context_length", Value::u32(uint32_t(s.ctx)));
  m.set(p + "rope.freq_base", Value::f32(10000.0f));
  m.set(p + "attention.layer_norm_rms_epsilon", Value::f32(1e-5f));

  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  const char* pieces[] = {"\xe2\x96\x81", "a", "b", "c", "d", "e", "\xe2\x96\x81" "a", "ab", "abc", "\xe2\x96\x81" "ab"};
  for (const char* piece : pieces) {
    tokens.push_back(piece);
    scores.push_back(-float(tokens.size()));
    types.push_back(1);
  }
  while (int64_t(tokens.size()) < s.vocab) {
    tokens.push_back(std::string("t").append(std::to_string(tokens.size())));
    scores.push_back(-100.0f - float(tokens.size()));
    types.push_back(1);
  }
  m.set("tokenizer.ggml.model", Value::string("llama"));
  m.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  m.set("tokenizer.ggml.scores", Value::f32_array(scores));
  m.set("tokenizer.ggml.token_type", Value::i32_array(types));
  m.set("tokenizer.ggml.bos_token_id", Value::u32(1));
  m.set("tokenizer.ggml.eos_token_id", Value::u32(2));

  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto add = [&](const std::string& name, std::vector<int64_t> dims, bool matrix, float scale, float offset = 0.0f) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = offset + scale * normal(rng);
    const gguf::TensorType type = matrix ? s.type : gguf::TensorType::F32;
    Status st = w.add_tensor(name, type, dims, encode_tensor(type, values));
    BITSPLIT_CHECK(st.is_ok(), st.message());
  };
  const int64_t hd = s.embd / s.heads;
  const float ws = 1.0f / std::sqrt(float(s.embd));
  add("token_embd.weight", {s.embd, s.vocab}, true, 1.0f);
  add("output_norm.weight", {s.embd}, false, 0.1f, 1.0f);
  if (!s.tied_output) add("output.weight", {s.embd, s.vocab}, true, ws);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {s.embd}, false, 0.1f, 1.0f);
    add(b + "attn_q.weight", {s.embd, s.heads * hd}, true, ws);
    add(b + "attn_k.weight", {s.embd, s.kv_heads * hd}, true, ws);
    add(b + "attn_v.weight", {s.embd, s.kv_heads * hd}, true, ws);
    add(b + "attn_output.weight", {s.heads * hd, s.embd}, true, ws);
    if (s.arch == "qwen2") {
      add(b + "attn_q.bias", {s.heads * hd}, false, 0.1f);
      add(b + "attn_k.bias", {s.kv_heads * hd}, false, 0.1f);
      add(b + "attn_v.bias", {s.kv_heads * hd}, false, 0.1f);
    }
    if (s.arch == "qwen3" || s.arch == "gemma3") {
      add(b + "attn_q_norm.weight", {hd}, false, 0.1f, 1.0f);
      add(b + "attn_k_norm.weight", {hd}, false, 0.1f, 1.0f);
    }
    if (s.arch == "gemma2" || s.arch == "gemma3") {
      add(b + "post_attention_norm.weight", {s.embd}, false, 0.1f, 1.0f);
      add(b + "post_ffw_norm.weight", {s.embd}, false, 0.1f, 1.0f);
    }
    add(b + "ffn_norm.weight", {s.embd}, false, 0.1f, 1.0f);
    add(b + "ffn_gate.weight", {s.embd, s.ff}, true, ws);
    add(b + "ffn_up.weight", {s.embd, s.ff}, true, ws);
    add(b + "ffn_down.weight", {s.ff, s.embd}, true, 1.0f / std::sqrt(float(s.ff)));
  }
  return w;
}

std::vector<uint8_t> tiny_model_bytes(const TinyModelSpec& spec) { return make_tiny_model(spec).to_bytes(); }

std::unique_ptr<WeightSource> weights_from_writer(const gguf::Writer& writer, const std::string& name) {
  auto file = gguf::File::parse(gguf::storage_from_bytes(writer.to_bytes()), name);
  BITSPLIT_CHECK(file.is_ok(), file.status().message());
  return weights_from_gguf(std::move(*file));
}

}  // namespace bitsplit::testing
