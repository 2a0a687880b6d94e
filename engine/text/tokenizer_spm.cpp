// SentencePiece-style encoding: split into UTF-8 characters, repeatedly merge the adjacent
// pair whose joined text is the highest-scoring token (leftmost on ties), then emit each
// symbol as its token or, failing that, as byte tokens <0xNN>.
#include "tokenizer_spm.h"

#include <cstdio>
#include <queue>

namespace bitsplit {
namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space

size_t utf8_char_len(unsigned char lead) {
  static constexpr size_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

struct Symbol {
  int prev, next;
  size_t start, len;  // bytes in the escaped text; len 0 once merged into its left neighbour
};

struct Bigram {
  int left, right;
  float score;
  size_t len;
  bool operator<(const Bigram& o) const {  // priority_queue pops the greatest
    return score < o.score || (score == o.score && left > o.left);
  }
};

}  // namespace

SpmTokenizer::SpmTokenizer(Vocabulary vocab) : Tokenizer(std::move(vocab)) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_tokens_[b] = vocab_.find(name);
  }
}

void SpmTokenizer::encode_fragment(std::string_view fragment, bool after_special, std::vector<int32_t>& out) const {
  std::string text;
  text.reserve(fragment.size() * 3 + 3);
  if (vocab_.add_space_prefix && after_special) text += kSpace;
  for (char c : fragment) {
    if (c == ' ') text += kSpace; else text += c;
  }
  if (text.empty()) return;

  std::vector<Symbol> symbols;
  for (size_t offs = 0; offs < text.size();) {
    const size_t len = std::min(text.size() - offs, utf8_char_len(static_cast<unsigned char>(text[offs])));
    symbols.push_back({int(symbols.size()) - 1, int(symbols.size()) + 1, offs, len});
    offs += len;
  }
  symbols.back().next = -1;

  std::priority_queue<Bigram> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t len = symbols[size_t(left)].len + symbols[size_t(right)].len;
    const int32_t id = vocab_.find(std::string_view(text).substr(symbols[size_t(left)].start, len));
    if (id < 0) return;
    queue.push({left, right, vocab_.scores[size_t(id)], len});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(int(i) - 1, int(i));

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = symbols[size_t(b.left)];
    Symbol& r = symbols[size_t(b.right)];
    // Stale entries (either side already merged elsewhere) no longer match their length.
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[size_t(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int i = 0; i != -1; i = symbols[size_t(i)].next) {
    const Symbol& s = symbols[size_t(i)];
    const std::string_view piece = std::string_view(text).substr(s.start, s.len);
    const int32_t id = vocab_.find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (unsigned char c : piece) {
      const int32_t byte_id = byte_tokens_[c];
      out.push_back(byte_id >= 0 ? byte_id : vocab_.unk);
    }
  }
}

std::string SpmTokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_.size()) return {};
  const std::string& text = vocab_.tokens[size_t(id)];
  switch (vocab_.types[size_t(id)]) {
    case TokenType::kControl:
      return render_special ? text : std::string();
    case TokenType::kUnknown:
      return " \xe2\x81\x87 ";  // " ⁇ ", as SentencePiece renders unknown pieces
    case TokenType::kByte: {
      unsigned value = 0;
      if (text.size() == 6 && std::sscanf(text.c_str(), "<0x%02X>", &value) == 1) return std::string(1, char(value));
      return text;
    }
    case TokenType::kUserDefined:
      return text;
    default: {
      std::string piece;
      piece.reserve(text.size());
      for (size_t i = 0; i < text.size();) {
        if (text.compare(i, kSpace.size(), kSpace) == 0) {
          piece += ' ';
          i += kSpace.size();
        } else {
          piece += text[i++];
        }
      }
      return piece;
    }
  }
}

}  // namespace bitsplit
