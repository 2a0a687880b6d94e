// Test helper: tokenizer metadata (the tokenizer.ggml.* keys of a GGUF file) for small hand-made
// vocabularies, shared by the tokenizer tests and the fuzz harnesses (tests/fuzz/harness_tokenizer.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "../../../engine/text/tokenizer_pretok.h"
#include "bitsplit/gguf.h"

namespace bitsplit::testing {

// A SentencePiece vocabulary: <unk>, <s>, </s>, a user-defined <|user|>, a byte-fallback token
// for every byte, then `pieces` (normal tokens, with their scores).
inline gguf::Metadata spm_byte_fallback_metadata(const std::vector<std::pair<std::string, float>>& pieces) {
  using gguf::Value;
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<|user|>"};
  std::vector<float> scores = {0, 0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3, 4};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
    scores.push_back(0);
    types.push_back(6);
  }
  for (const auto& [piece, score] : pieces) {
    tokens.push_back(piece);
    scores.push_back(score);
    types.push_back(1);
  }
  gguf::Metadata m;
  m.set("tokenizer.ggml.model", Value::string("llama"));
  m.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  m.set("tokenizer.ggml.scores", Value::f32_array(scores));
  m.set("tokenizer.ggml.token_type", Value::i32_array(types));
  return m;
}

// A byte-level vocabulary: the 256 byte characters, the given merges (and their results), the
// extra tokens, a control token <|endoftext|> (also BOS and EOS) and a user-defined <|user|>.
inline gguf::Metadata byte_level_bpe_metadata(const std::vector<std::string>& merges, const std::string& pre = "gpt-2",
                                              const std::vector<std::string>& extra_tokens = {}) {
  using gguf::Value;
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(gpt2_byte_to_unicode()[size_t(b)]);
    types.push_back(1);
  }
  for (const std::string& merge : merges) {
    const size_t space = merge.find(' ', 1);
    tokens.push_back(merge.substr(0, space) + merge.substr(space + 1));
    types.push_back(1);
  }
  for (const std::string& t : extra_tokens) {
    tokens.push_back(t);
    types.push_back(1);
  }
  tokens.push_back("<|endoftext|>");
  types.push_back(3);
  tokens.push_back("<|user|>");
  types.push_back(4);
  gguf::Metadata m;
  m.set("tokenizer.ggml.model", Value::string("gpt2"));
  m.set("tokenizer.ggml.pre", Value::string(pre));
  m.set("tokenizer.ggml.tokens", Value::string_array(tokens));
  m.set("tokenizer.ggml.token_type", Value::i32_array(types));
  m.set("tokenizer.ggml.merges", Value::string_array(merges));
  m.set("tokenizer.ggml.bos_token_id", Value::u32(uint32_t(tokens.size() - 2)));
  m.set("tokenizer.ggml.eos_token_id", Value::u32(uint32_t(tokens.size() - 2)));
  return m;
}

}  // namespace bitsplit::testing
