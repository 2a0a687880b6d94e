// BPE by merge rank, GPT-2 byte-level (tokenizer.ggml.model = gpt2) or SentencePiece-style over
// characters with byte fallback (Llama-type tokenizer.json). Internal to engine/.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bitsplit/tokenizer.h"
#include "tokenizer_pretok.h"

namespace bitsplit {

struct BpeOptions {
  std::vector<std::string> patterns;  // pre-tokenizer regexes, applied in sequence
  size_t mapped_from = SIZE_MAX;      // patterns from this index on see the byte-mapped text (HF)
  std::string pre_name;               // for describe()
  bool byte_level = true;             // false: characters, "▁" for spaces, <0xXX> byte fallback
  bool ignore_merges = false;         // a piece that is itself a token is emitted whole
  bool byte_fallback = true;          // characters: unknown ones become <0xXX> tokens (else <unk>)
  int linear_merge_limit = 48;        // words up to this many symbols merge by linear scan, longer by heap
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Builds the merge table from vocab.merges; errors name the bad regex or merge.
  static Result<std::unique_ptr<Tokenizer>> create(Vocabulary vocab, BpeOptions options);
  std::string token_to_piece(int32_t id, bool render_special = false) const override;

 protected:
  void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;
  std::string describe_family() const override;

 private:
  struct Scratch;
  // Open-addressing map (left symbol, right symbol) -> (rank, merged symbol).
  class PairTable {
   public:
    struct Slot {
      uint64_t key;
      int32_t rank;
      int32_t merged;
    };
    void init(size_t expected);
    void insert(int32_t left, int32_t right, int32_t rank, int32_t merged);  // the first insert wins
    const Slot* find(int32_t left, int32_t right) const;

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    std::vector<Slot> slots_;
    uint64_t mask_ = 0;
    int shift_ = 64;
  };

  BpeTokenizer(Vocabulary vocab, BpeOptions options, PreTokenizer pretok);
  int32_t symbol_for(std::string_view text) const;  // vocab id, extra symbol, or -1
  int32_t add_symbol(const std::string& text);
  void encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const;
  void merge_linear(Scratch& s) const;
  void merge_heap(Scratch& s) const;
  void emit_unknown(std::string_view bytes, std::vector<int32_t>& out) const;
  std::vector<int32_t> replacement_tokens() const;

  BpeOptions options_;
  PreTokenizer pretok_;
  PairTable pairs_;
  std::vector<std::string> extra_symbols_;  // merge operands/results that are not tokens: ids from vocab size on
  TokenMap extra_ids_;
  std::array<int32_t, 256> byte_symbol_{};  // byte-level: the symbol each byte starts as
  std::array<int32_t, 256> byte_token_{};   // byte-level: the token of a lone byte (-1: none)
  std::array<int32_t, 256> fallback_token_{};  // character mode: <0xXX>
  std::array<int32_t, 128> ascii_symbol_{};    // character mode: symbols of ASCII characters
  std::vector<int32_t> replacement_;           // byte-level: what a byte without a token becomes
};

}  // namespace bitsplit
