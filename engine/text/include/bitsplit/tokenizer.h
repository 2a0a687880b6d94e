// Tokenizers from GGUF metadata (llama.cpp conventions) or a Hugging Face tokenizer.json. A
// shared base handles special-token splitting, BOS/EOS and decoding; each family (SentencePiece,
// BPE by merge rank) implements encoding of plain-text fragments.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bitsplit/gguf.h"
#include "bitsplit/status.h"

namespace bitsplit {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

enum class TokenizerFamily { kSentencePiece, kBytePairEncoding };

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct Vocabulary {
  TokenizerFamily family = TokenizerFamily::kSentencePiece;
  std::string model;  // tokenizer.ggml.model ("tokenizer.json" when read from one)
  std::string pre;    // tokenizer.ggml.pre: the BPE pre-tokenizer
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<TokenType> types;
  TokenMap token_to_id;
  std::vector<std::pair<std::string, std::string>> merges;  // BPE: rank = index
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = true;

  int32_t size() const { return int32_t(tokens.size()); }
  int32_t find(std::string_view text) const {
    auto it = token_to_id.find(text);
    return it == token_to_id.end() ? -1 : it->second;
  }
};

struct EncodeOptions {
  bool add_special = true;     // BOS/EOS as the vocabulary asks for
  bool parse_special = false;  // text like "<s>" becomes the control token instead of plain text
  // With parse_special, when set: a control or unknown token's text becomes the token only where
  // it lies inside one of these byte ranges [first, second) of the text (sorted by first, not
  // overlapping), and stays plain text elsewhere — so a chat prompt's template markup is special
  // while the messages' text inside it is not.
  const std::vector<std::pair<size_t, size_t>>* special_ranges = nullptr;
};

class Tokenizer {
 public:
  // Builds the tokenizer the metadata describes; errors name the key or the unsupported model.
  static Result<std::unique_ptr<Tokenizer>> from_metadata(const gguf::Metadata& metadata);
  // Reads a Hugging Face tokenizer.json (model BPE: byte-level, or SentencePiece-style with byte
  // fallback). A tokenizer_config.json beside it, when present, names BOS/EOS and whether to add them.
  static Result<std::unique_ptr<Tokenizer>> from_hf_json(const std::string& path);
  virtual ~Tokenizer() = default;

  const Vocabulary& vocab() const { return vocab_; }
  std::vector<int32_t> encode(std::string_view text, EncodeOptions options = {}) const;
  // The bytes one token stands for. Control tokens are empty unless render_special.
  virtual std::string token_to_piece(int32_t id, bool render_special = false) const = 0;
  // Joins pieces; drops the space the tokenizer added in front of the text.
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;
  std::string describe() const;

 protected:
  explicit Tokenizer(Vocabulary vocab);
  // Encodes plain text with no special tokens in it. `after_special` is true at the start of
  // the text and right after a special token (where SentencePiece adds its leading space).
  virtual void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  // The algorithm, for describe(): "SentencePiece", "byte-level BPE, pre-tokenizer gpt-2, ...".
  virtual std::string describe_family() const { return "SentencePiece"; }

  Vocabulary vocab_;
  std::vector<int32_t> special_tokens_;  // control, unknown and user-defined, longest text first
};

// Streaming decode: holds back an incomplete UTF-8 sequence at the end of what it was given,
// so a terminal never receives half a character.
class Utf8StreamDecoder {
 public:
  std::string push(std::string_view bytes);
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace bitsplit
