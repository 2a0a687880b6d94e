// BPE pre-tokenizers: llama.cpp's regexes per tokenizer.ggml.pre value and a PCRE2 splitter
// (UTF + UCP, JIT) that applies a list of them in sequence. Internal to engine/.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit {

// What a tokenizer.ggml.pre name stands for.
struct PreTokenizerSpec {
  std::string name;                   // canonical name (the one llama.cpp's table uses)
  std::vector<std::string> patterns;  // applied in order; each splits the pieces the previous one left
  bool ignore_merges = false;         // a piece that is itself a token is emitted whole (Llama 3)
  bool add_bos = false;               // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};

// The spec for a tokenizer.ggml.pre value ("" means "default", as in llama.cpp). An unknown name
// is an error that lists the supported ones.
Result<PreTokenizerSpec> pretokenizer_spec(std::string_view pre);
std::string supported_pretokenizers();

// GPT-2's reversible byte -> printable code point table (the UTF-8 of the code point).
const std::array<std::string, 256>& gpt2_byte_to_unicode();
// The byte a code point stands for, or -1 when it is not one of the table's 256 code points.
int gpt2_unicode_to_byte(uint32_t code_point);

// GPT-2's own pattern (also HF's ByteLevel pre-tokenizer with use_regex).
extern const char* const kGpt2Pattern;

// Length of the valid UTF-8 sequence at the start of s (1-4), or 0 when s does not start with
// one (bad lead byte, truncated, overlong, surrogate, or above U+10FFFF), as PCRE2 would judge.
size_t valid_utf8_prefix(std::string_view s);

class PreTokenizer {
 public:
  // Compiles the patterns (PCRE2 syntax plus llama.cpp's meaning of \s: Unicode White_Space).
  // An empty list makes a splitter that only isolates invalid bytes. Patterns from index
  // `mapped_from` on match against the GPT-2 byte-mapped text of each piece, as pre-tokenizers
  // after ByteLevel in an HF Sequence do ("Ġ" for a space); piece bounds stay on raw bytes.
  static Result<PreTokenizer> compile(const std::vector<std::string>& patterns, size_t mapped_from = SIZE_MAX);
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Splits text into pieces that cover it in order, like llama.cpp's unicode_regex_split: each
  // pattern splits every piece into its matches and the gaps between them. Bytes that are not
  // valid UTF-8 become one-byte pieces of their own and never reach PCRE2 (whose behaviour on
  // invalid input with PCRE2_NO_UTF_CHECK is undefined).
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  size_t size() const;
  bool uses_jit() const;

 private:
  struct Impl;
  explicit PreTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace bitsplit
