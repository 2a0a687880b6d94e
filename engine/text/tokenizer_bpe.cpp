// BPE encoding by merge rank (lowest rank first, leftmost on ties, as llama.cpp and HF do) over
// byte-level or character symbols, with a per-call word cache, and decoding back to bytes.
#include "tokenizer_bpe.h"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstring>

namespace bitsplit {
namespace {

constexpr std::string_view kMetaspace = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space
constexpr std::string_view kReplacementCharacter = "\xef\xbf\xbd";  // U+FFFD
constexpr int32_t kNoRank = INT32_MAX;
constexpr int32_t kDead = -2;         // a symbol merged into its left neighbour
constexpr size_t kMaxCachedWord = 64;  // longer pieces rarely repeat
constexpr size_t kMaxCacheEntries = 1 << 16;

// The byte a "<0xXX>" token stands for, or -1.
int hex_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') value |= c - '0';
    else if (c >= 'A' && c <= 'F') value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') value |= c - 'a' + 10;
    else return -1;
  }
  return value;
}

}  // namespace

// ---- pair table --------------------------------------------------------------------------

void BpeTokenizer::PairTable::init(size_t expected) {
  size_t capacity = 16;
  while (capacity < expected * 2) capacity *= 2;
  slots_.assign(capacity, Slot{kEmpty, 0, 0});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
}

void BpeTokenizer::PairTable::insert(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  for (uint64_t i = (key * 0x9e3779b97f4a7c15ull) >> shift_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) return;
    if (s.key == kEmpty) {
      s = {key, rank, merged};
      return;
    }
  }
}

const BpeTokenizer::PairTable::Slot* BpeTokenizer::PairTable::find(int32_t left, int32_t right) const {
  const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  for (uint64_t i = (key * 0x9e3779b97f4a7c15ull) >> shift_;; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.key == key) return &s;
    if (s.key == kEmpty) return nullptr;
  }
}

// ---- per-call state ----------------------------------------------------------------------

namespace {

// Word -> token ids for one encode call: open addressing over string_views into the text (no
// allocation per word), grown by doubling up to kMaxCacheEntries.
class WordCache {
 public:
  // The ids cached for `word`, or nullptr.
  const std::pair<uint32_t, uint32_t>* find(std::string_view word, uint64_t hash) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.data == nullptr) return nullptr;
      if (s.hash == hash && std::string_view(s.data, s.size) == word) return &s.ids;
    }
  }
  bool full() const { return count_ >= kMaxCacheEntries; }
  void insert(std::string_view word, uint64_t hash, std::pair<uint32_t, uint32_t> ids) {
    if (full()) return;
    if ((count_ + 1) * 2 > slots_.size()) grow();
    place({word.data(), uint32_t(word.size()), hash, ids});
    ++count_;
  }
  std::vector<int32_t> ids;  // the cached ids, back to back

 private:
  struct Slot {
    const char* data = nullptr;
    uint32_t size = 0;
    uint64_t hash = 0;
    std::pair<uint32_t, uint32_t> ids;
  };
  void place(const Slot& slot) {
    size_t i = slot.hash & mask_;
    while (slots_[i].data != nullptr) i = (i + 1) & mask_;
    slots_[i] = slot;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.data != nullptr) place(s);
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, count_ = 0;
};

// A quick hash for short words (8 bytes at a time, multiply-xorshift mixing).
uint64_t word_hash(std::string_view w) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ w.size();
  size_t i = 0;
  for (; i + 8 <= w.size(); i += 8) {
    uint64_t v;
    std::memcpy(&v, w.data() + i, 8);
    h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  if (i < w.size()) {
    uint64_t v = 0;
    std::memcpy(&v, w.data() + i, w.size() - i);
    h = (h ^ v) * 0x94d049bb133111ebull;
  }
  return h ^ (h >> 29);
}

}  // namespace

// Per-call working memory: encode() is const and may run on several threads at once.
struct BpeTokenizer::Scratch {
  std::vector<std::string_view> pieces;
  std::string normalized;
  std::vector<int32_t> sym, next, prev, rank, merged;
  std::vector<uint32_t> start;  // byte offset of each initial symbol in the word
  struct Candidate {
    int32_t rank, left, right, left_sym, right_sym, merged;
  };
  std::vector<Candidate> heap;
  std::string word_text;
  WordCache cache;
};

// ---- construction ------------------------------------------------------------------------

BpeTokenizer::BpeTokenizer(Vocabulary vocab, BpeOptions options, PreTokenizer pretok)
    : Tokenizer(std::move(vocab)), options_(std::move(options)), pretok_(std::move(pretok)) {}

int32_t BpeTokenizer::symbol_for(std::string_view text) const {
  const int32_t id = vocab_.find(text);
  if (id >= 0) return id;
  auto it = extra_ids_.find(text);
  return it == extra_ids_.end() ? -1 : it->second;
}

int32_t BpeTokenizer::add_symbol(const std::string& text) {
  const int32_t id = symbol_for(text);
  if (id >= 0) return id;
  const int32_t extra = vocab_.size() + int32_t(extra_symbols_.size());
  extra_symbols_.push_back(text);
  extra_ids_.emplace(text, extra);
  return extra;
}

Result<std::unique_ptr<Tokenizer>> BpeTokenizer::create(Vocabulary vocab, BpeOptions options) {
  auto pretok = PreTokenizer::compile(options.patterns, options.mapped_from);
  if (!pretok) return pretok.status();
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer(std::move(vocab), std::move(options), std::move(*pretok)));
  const auto& merges = t->vocab_.merges;
  if (merges.size() > size_t(INT32_MAX / 2)) {
    return Status::error(std::to_string(merges.size()) + " merges are more than a vocabulary can have");
  }
  t->pairs_.init(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    if (left.empty() || right.empty()) continue;  // can never apply; llama.cpp keeps such files loadable
    const int32_t l = t->add_symbol(left), r = t->add_symbol(right);
    t->pairs_.insert(l, r, int32_t(rank), t->add_symbol(left + right));
  }
  const auto& table = gpt2_byte_to_unicode();
  for (int b = 0; b < 256; ++b) {
    t->byte_symbol_[size_t(b)] = t->symbol_for(table[size_t(b)]);
    t->byte_token_[size_t(b)] = t->vocab_.find(table[size_t(b)]);
    t->fallback_token_[size_t(b)] = -1;
  }
  for (int32_t id = 0; id < t->vocab_.size() && t->options_.byte_fallback; ++id) {
    const int b = hex_byte_token(t->vocab_.tokens[size_t(id)]);
    if (b >= 0 && t->fallback_token_[size_t(b)] < 0) t->fallback_token_[size_t(b)] = id;
  }
  for (int c = 0; c < 128; ++c) {
    const char ch = char(c);
    t->ascii_symbol_[size_t(c)] = t->symbol_for(std::string_view(&ch, 1));
  }
  t->replacement_ = t->replacement_tokens();
  return std::unique_ptr<Tokenizer>(std::move(t));
}

std::string BpeTokenizer::describe_family() const {
  const std::string merges = std::to_string(vocab_.merges.size()) + " merges";
  if (!options_.byte_level) return "SentencePiece-style BPE with byte fallback, " + merges;
  return "byte-level BPE, pre-tokenizer " + options_.pre_name + ", " + merges;
}

// ---- encoding ----------------------------------------------------------------------------

void BpeTokenizer::encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const {
  Scratch s;
  std::string_view input = text;
  if (!options_.byte_level) {
    // SentencePiece-style normalisation: spaces become "▁" and, like SpmTokenizer, a "▁" goes in
    // front of the text and of every fragment after a special token.
    s.normalized.reserve(text.size() + 8);
    if (vocab_.add_space_prefix && after_special) s.normalized += kMetaspace;
    for (char c : text) {
      if (c == ' ') s.normalized += kMetaspace; else s.normalized += c;
    }
    input = s.normalized;
  }
  s.pieces.reserve(input.size() / 4 + 4);
  pretok_.split(input, s.pieces);
  for (std::string_view word : s.pieces) encode_word(word, s, out);
}

void BpeTokenizer::encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const bool byte_level = options_.byte_level;
  if (byte_level && word.size() == 1) {
    const int32_t id = byte_symbol_[static_cast<unsigned char>(word[0])];
    if (id >= 0 && id < vocab_.size()) out.push_back(id); else emit_unknown(word, out);
    return;
  }
  // Two-byte words merge with one lookup, cheaper than the cache.
  const bool cacheable = word.size() > 2 && word.size() <= kMaxCachedWord;
  const uint64_t hash = cacheable ? word_hash(word) : 0;
  if (cacheable) {
    if (const auto* hit = s.cache.find(word, hash)) {
      out.insert(out.end(), s.cache.ids.begin() + hit->first, s.cache.ids.begin() + hit->second);
      return;
    }
  }
  const size_t first_out = out.size();

  bool whole = false;
  if (options_.ignore_merges) {
    const std::string_view as_text = [&]() -> std::string_view {
      if (!byte_level) return word;
      s.word_text.clear();
      for (unsigned char c : word) s.word_text += gpt2_byte_to_unicode()[c];
      return s.word_text;
    }();
    const int32_t id = vocab_.find(as_text);
    if (id >= 0) {
      out.push_back(id);
      whole = true;
    }
  }

  if (!whole) {
    s.sym.clear();
    s.start.clear();
    if (byte_level) {
      for (size_t i = 0; i < word.size(); ++i) {
        s.sym.push_back(byte_symbol_[static_cast<unsigned char>(word[i])]);
        s.start.push_back(uint32_t(i));
      }
    } else {
      for (size_t i = 0; i < word.size();) {
        const auto c = static_cast<unsigned char>(word[i]);
        const size_t len = c < 0x80 ? 1 : std::max<size_t>(1, valid_utf8_prefix(word.substr(i)));
        s.sym.push_back(c < 0x80 ? ascii_symbol_[c] : symbol_for(word.substr(i, len)));
        s.start.push_back(uint32_t(i));
        i += len;
      }
    }
    const int n = int(s.sym.size());
    s.next.resize(size_t(n));
    s.prev.resize(size_t(n));
    for (int i = 0; i < n; ++i) {
      s.next[size_t(i)] = i + 1 < n ? i + 1 : -1;
      s.prev[size_t(i)] = i - 1;
    }
    if (n > 1) {
      if (n <= options_.linear_merge_limit) merge_linear(s); else merge_heap(s);
    }
    for (int i = 0; i != -1; i = s.next[size_t(i)]) {
      const int32_t id = s.sym[size_t(i)];
      const size_t begin = s.start[size_t(i)];
      const size_t end = s.next[size_t(i)] < 0 ? word.size() : s.start[size_t(s.next[size_t(i)])];
      if (id >= 0 && id < vocab_.size()) out.push_back(id); else emit_unknown(word.substr(begin, end - begin), out);
    }
  }

  if (cacheable && !s.cache.full()) {
    const auto begin = uint32_t(s.cache.ids.size());
    s.cache.ids.insert(s.cache.ids.end(), out.begin() + std::ptrdiff_t(first_out), out.end());
    s.cache.insert(word, hash, {begin, uint32_t(s.cache.ids.size())});
  }
}

// A symbol that is not a token. Byte-level: the token of each byte's character, and for a byte
// whose character the vocabulary lacks, replacement_. Characters: the <0xXX> byte tokens, or the
// unknown token when they are missing.
void BpeTokenizer::emit_unknown(std::string_view bytes, std::vector<int32_t>& out) const {
  if (options_.byte_level) {
    for (unsigned char c : bytes) {
      if (byte_token_[c] >= 0) out.push_back(byte_token_[c]);
      else out.insert(out.end(), replacement_.begin(), replacement_.end());
    }
    return;
  }
  const bool all_bytes = std::all_of(bytes.begin(), bytes.end(),
                                     [&](char c) { return fallback_token_[static_cast<unsigned char>(c)] >= 0; });
  if (all_bytes) {
    for (unsigned char c : bytes) out.push_back(fallback_token_[c]);
  } else if (vocab_.unk >= 0) {
    out.push_back(vocab_.unk);
  }
}

// What a byte-level vocabulary encodes a byte it has no character for as. Vocabularies trained on
// UTF-8 text can lack the bytes UTF-8 never uses (0xc0, 0xc1, 0xf5..0xff: starcoder's, SmolLM2's,
// falcon's, mpt's); dropping such a byte (as llama.cpp does) would hide it from the model, so it
// becomes U+FFFD, the character a UTF-8 decoder shows for it. Not the unknown token: in these
// vocabularies it is <|endoftext|>, a control token that text must never produce. A vocabulary
// without U+FFFD's bytes either falls back to a true unknown token, else to nothing.
std::vector<int32_t> BpeTokenizer::replacement_tokens() const {
  std::vector<int32_t> ids;
  if (!options_.byte_level) return ids;
  const bool encodable = std::all_of(kReplacementCharacter.begin(), kReplacementCharacter.end(),
                                     [&](char c) { return byte_token_[static_cast<unsigned char>(c)] >= 0; });
  if (encodable) {
    Scratch s;
    encode_word(kReplacementCharacter, s, ids);
  } else if (vocab_.unk >= 0 && vocab_.types[size_t(vocab_.unk)] == TokenType::kUnknown) {
    ids.push_back(vocab_.unk);
  }
  return ids;
}

// Short words: keep the rank of each adjacent pair and scan for the lowest (strict `<`, so the
// leftmost wins ties), which beats a heap for the handful of symbols a typical word has.
void BpeTokenizer::merge_linear(Scratch& s) const {
  const int n = int(s.sym.size());
  s.rank.resize(size_t(n));
  s.merged.resize(size_t(n));
  auto update = [&](int i) {
    const int j = s.next[size_t(i)];
    const PairTable::Slot* slot = j < 0 || s.sym[size_t(i)] < 0 || s.sym[size_t(j)] < 0
                                      ? nullptr
                                      : pairs_.find(s.sym[size_t(i)], s.sym[size_t(j)]);
    s.rank[size_t(i)] = slot ? slot->rank : kNoRank;
    s.merged[size_t(i)] = slot ? slot->merged : -1;
  };
  for (int i = 0; i < n; ++i) update(i);
  for (;;) {
    int32_t best = kNoRank;
    int bi = -1;
    for (int i = 0; i != -1; i = s.next[size_t(i)]) {
      if (s.rank[size_t(i)] < best) {
        best = s.rank[size_t(i)];
        bi = i;
      }
    }
    if (bi < 0) return;
    const int j = s.next[size_t(bi)];
    s.sym[size_t(bi)] = s.merged[size_t(bi)];
    s.sym[size_t(j)] = kDead;
    s.next[size_t(bi)] = s.next[size_t(j)];
    if (s.next[size_t(j)] >= 0) s.prev[size_t(s.next[size_t(j)])] = bi;
    update(bi);
    if (s.prev[size_t(bi)] >= 0) update(s.prev[size_t(bi)]);
  }
}

// Long words: a min-heap of (rank, left position); entries whose symbols changed are skipped.
void BpeTokenizer::merge_heap(Scratch& s) const {
  using Candidate = Scratch::Candidate;
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  s.heap.clear();
  auto push = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const int32_t ls = s.sym[size_t(left)], rs = s.sym[size_t(right)];
    if (ls < 0 || rs < 0) return;
    const PairTable::Slot* slot = pairs_.find(ls, rs);
    if (slot == nullptr) return;
    s.heap.push_back({slot->rank, left, right, ls, rs, slot->merged});
    std::push_heap(s.heap.begin(), s.heap.end(), later);
  };
  for (int i = 0; i + 1 < int(s.sym.size()); ++i) push(i, i + 1);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    const Candidate c = s.heap.back();
    s.heap.pop_back();
    if (s.sym[size_t(c.left)] != c.left_sym || s.sym[size_t(c.right)] != c.right_sym || s.next[size_t(c.left)] != c.right) {
      continue;  // stale: one side has merged since
    }
    s.sym[size_t(c.left)] = c.merged;
    s.sym[size_t(c.right)] = kDead;
    s.next[size_t(c.left)] = s.next[size_t(c.right)];
    if (s.next[size_t(c.right)] >= 0) s.prev[size_t(s.next[size_t(c.right)])] = c.left;
    push(s.prev[size_t(c.left)], c.left);
    push(c.left, s.next[size_t(c.left)]);
  }
}

// ---- decoding ----------------------------------------------------------------------------

std::string BpeTokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_.size()) return {};
  const std::string& text = vocab_.tokens[size_t(id)];
  switch (vocab_.types[size_t(id)]) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      return render_special ? text : std::string();
    case TokenType::kUserDefined:
      return text;
    case TokenType::kUnused:
    case TokenType::kUndefined:
      return {};  // as llama.cpp renders them
    case TokenType::kByte: {
      const int b = hex_byte_token(text);
      if (b >= 0) return std::string(1, char(b));
      break;
    }
    default:
      break;
  }
  std::string piece;
  piece.reserve(text.size());
  if (!options_.byte_level) {
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, kMetaspace.size(), kMetaspace) == 0) {
        piece += ' ';
        i += kMetaspace.size();
      } else {
        piece += text[i++];
      }
    }
    return piece;
  }
  // Byte-level: each character stands for one byte. A character outside the table (a token
  // text that was not produced by the byte mapping) is passed through as it is.
  for (size_t i = 0; i < text.size();) {
    const size_t len = std::max<size_t>(1, valid_utf8_prefix(std::string_view(text).substr(i)));
    uint32_t cp = static_cast<unsigned char>(text[i]);
    if (len == 2) cp = ((cp & 0x1f) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3f);
    const int b = (len == 1 && cp < 0x80) || len == 2 ? gpt2_unicode_to_byte(cp) : -1;
    if (b >= 0) piece += char(b); else piece.append(text, i, len);
    i += len;
  }
  return piece;
}

}  // namespace bitsplit
