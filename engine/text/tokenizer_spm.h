// SentencePiece-style tokenizer (tokenizer.ggml.model = llama): score-ordered bigram merging
// over UTF-8 characters, with byte fallback. Internal to engine/.
#pragma once

#include "bitsplit/tokenizer.h"

namespace bitsplit {

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocabulary vocab);
  std::string token_to_piece(int32_t id, bool render_special) const override;

 protected:
  void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;

 private:
  int32_t byte_tokens_[256];
};

}  // namespace bitsplit
