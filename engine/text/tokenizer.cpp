// Tokenizer base: vocabulary from GGUF metadata (SentencePiece or byte-level BPE), special-token
// splitting, BOS/EOS, decoding, and the UTF-8 stream decoder.
#include <algorithm>
#include <cstring>

#include "bitsplit/tokenizer.h"
#include "tokenizer_bpe.h"
#include "tokenizer_pretok.h"
#include "tokenizer_spm.h"

namespace bitsplit {
namespace {

// llama.cpp's defaults differ by family: SentencePiece vocabularies have fixed ids for
// <unk>/<s>/</s> and add BOS; byte-level BPE ones name their special tokens and add no BOS unless
// the key (or, for Llama 3, the pre-tokenizer) says so.
Result<Vocabulary> read_vocabulary(const gguf::Metadata& m, PreTokenizerSpec* spec) {
  Vocabulary v;
  BITSPLIT_ASSIGN_OR_RETURN(v.model, m.get_string("tokenizer.ggml.model"));
  if (v.model == "llama") {
    v.family = TokenizerFamily::kSentencePiece;
  } else if (v.model == "gpt2") {
    v.family = TokenizerFamily::kBytePairEncoding;
  } else if (v.model == "bert") {
    return Status::error("tokenizer.ggml.model = 'bert' (WordPiece) is not supported (supported: llama, gpt2)");
  } else {
    return Status::error("tokenizer.ggml.model = '" + v.model + "' is not supported (supported: llama, gpt2)");
  }
  const bool bpe = v.family == TokenizerFamily::kBytePairEncoding;
  if (bpe) {
    BITSPLIT_ASSIGN_OR_RETURN(v.pre, m.get_string_or("tokenizer.ggml.pre", "default"));
    auto found = pretokenizer_spec(v.pre);
    if (!found) return found.status().with_context("tokenizer.ggml.pre");
    *spec = std::move(*found);
  }
  BITSPLIT_ASSIGN_OR_RETURN(v.tokens, m.get_string_array("tokenizer.ggml.tokens"));
  const size_t n = v.tokens.size();
  if (n == 0) return Status::error("tokenizer.ggml.tokens is empty");
  if (n > size_t(INT32_MAX)) return Status::error("tokenizer.ggml.tokens has too many entries");
  if (m.contains("tokenizer.ggml.scores")) {
    BITSPLIT_ASSIGN_OR_RETURN(v.scores, m.get_float_array("tokenizer.ggml.scores"));
    if (v.scores.size() != n) {
      return Status::error("tokenizer.ggml.scores has " + std::to_string(v.scores.size()) + " entries for " +
                           std::to_string(n) + " tokens");
    }
  } else {
    v.scores.assign(n, 0.0f);
  }
  v.types.assign(n, TokenType::kNormal);
  if (m.contains("tokenizer.ggml.token_type")) {
    BITSPLIT_ASSIGN_OR_RETURN(auto types, m.get_int_array("tokenizer.ggml.token_type"));
    if (types.size() != n) {
      return Status::error("tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " +
                           std::to_string(n) + " tokens");
    }
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > 6) {
        return Status::error("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(types[i]) +
                             " is not a known token type");
      }
      v.types[i] = TokenType(types[i]);
    }
  }
  v.token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) v.token_to_id.emplace(v.tokens[i], int32_t(i));  // first wins on duplicates

  if (bpe) {
    if (!m.contains("tokenizer.ggml.merges")) {
      return Status::error("tokenizer.ggml.merges is missing (a byte-level BPE vocabulary needs its merge list)");
    }
    BITSPLIT_ASSIGN_OR_RETURN(auto merges, m.get_string_array("tokenizer.ggml.merges"));
    v.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      // "left right"; the split is at the first space after the first byte, as in llama.cpp.
      const size_t space = merges[i].find(' ', 1);
      if (space == std::string::npos) {
        return Status::error("tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + merges[i] +
                             "' is not two tokens separated by a space");
      }
      v.merges.emplace_back(merges[i].substr(0, space), merges[i].substr(space + 1));
    }
  }

  auto id_key = [&](const char* key, int32_t fallback, int32_t* out) -> Status {
    if (fallback >= int64_t(n)) fallback = -1;  // a default outside a tiny vocabulary means none
    BITSPLIT_ASSIGN_OR_RETURN(int64_t id, m.get_int_or(key, fallback));
    if (id == int64_t{UINT32_MAX}) id = -1;  // converters write "no such token" as uint32 -1
    if (id != -1 && (id < 0 || id >= int64_t(n))) {
      return Status::error(std::string(key) + " = " + std::to_string(id) + " is outside the vocabulary of " +
                           std::to_string(n) + " tokens");
    }
    *out = int32_t(id);
    return Status::ok();
  };
  BITSPLIT_RETURN_IF_ERROR(id_key("tokenizer.ggml.bos_token_id", bpe ? -1 : 1, &v.bos));
  BITSPLIT_RETURN_IF_ERROR(id_key("tokenizer.ggml.eos_token_id", bpe ? -1 : 2, &v.eos));
  BITSPLIT_RETURN_IF_ERROR(id_key("tokenizer.ggml.unknown_token_id", bpe ? -1 : 0, &v.unk));
  BITSPLIT_RETURN_IF_ERROR(id_key("tokenizer.ggml.padding_token_id", -1, &v.pad));
  BITSPLIT_ASSIGN_OR_RETURN(v.add_bos, m.get_bool_or("tokenizer.ggml.add_bos_token", bpe ? spec->add_bos : true));
  BITSPLIT_ASSIGN_OR_RETURN(v.add_eos, m.get_bool_or("tokenizer.ggml.add_eos_token", false));
  BITSPLIT_ASSIGN_OR_RETURN(v.add_space_prefix, m.get_bool_or("tokenizer.ggml.add_space_prefix", !bpe));
  if (v.add_bos && v.bos < 0) {
    return Status::error("tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set");
  }
  if (v.add_eos && v.eos < 0) {
    return Status::error("tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is not set");
  }
  return v;
}

struct Fragment {
  bool is_token;
  int32_t token;
  std::string_view text;
};

// Whether [begin, end) lies inside one of `ranges` (EncodeOptions::special_ranges).
bool inside_ranges(const std::vector<std::pair<size_t, size_t>>& ranges, size_t begin, size_t end) {
  auto after = std::upper_bound(ranges.begin(), ranges.end(), begin,
                                [](size_t at, const std::pair<size_t, size_t>& r) { return at < r.first; });
  return after != ranges.begin() && std::prev(after)->second >= end;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_metadata(const gguf::Metadata& metadata) {
  PreTokenizerSpec spec;
  auto vocab = read_vocabulary(metadata, &spec);
  if (!vocab) return vocab.status().with_context("tokenizer");
  if (vocab->family == TokenizerFamily::kSentencePiece) {
    return std::unique_ptr<Tokenizer>(std::make_unique<SpmTokenizer>(std::move(*vocab)));
  }
  BpeOptions options;
  options.patterns = std::move(spec.patterns);
  options.pre_name = vocab->pre;
  options.ignore_merges = spec.ignore_merges;
  auto t = BpeTokenizer::create(std::move(*vocab), std::move(options));
  if (!t) return t.status().with_context("tokenizer");
  return t;
}

Tokenizer::Tokenizer(Vocabulary vocab) : vocab_(std::move(vocab)) {
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const TokenType t = vocab_.types[size_t(id)];
    if ((t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined) &&
        !vocab_.tokens[size_t(id)].empty()) {
      special_tokens_.push_back(id);
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](int32_t a, int32_t b) {
    return vocab_.tokens[size_t(a)].size() > vocab_.tokens[size_t(b)].size();
  });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, EncodeOptions options) const {
  // Split the text around special tokens, longest first. Control and unknown tokens are only
  // recognised with parse_special (and inside special_ranges when given); user-defined tokens
  // always are (as in llama.cpp).
  // Empty text has no fragment at all (so SentencePiece adds no leading space to it).
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({false, -1, text});
  // Vocabularies can have thousands of user-defined tokens (deepseek: 2400), each searched for
  // in the whole text; tables of the byte pairs and the (hashed) 4- and 8-byte strings the text
  // contains rule most of them out in O(1).
  std::vector<uint64_t> pairs_present, quads_present, octets_present;
  auto prefix_hash = [](const char* p, size_t n) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    return uint32_t((v * 0x9e3779b97f4a7c15ull) >> 44);  // 20 bits
  };
  auto set_bit = [](std::vector<uint64_t>& bits, uint32_t i) { bits[i / 64] |= uint64_t{1} << (i % 64); };
  auto get_bit = [](const std::vector<uint64_t>& bits, uint32_t i) { return (bits[i / 64] >> (i % 64) & 1) != 0; };
  auto may_occur = [&](const std::string& special) {
    if (text.size() < 4096) return true;  // searching a short text is cheaper than the tables
    if (pairs_present.empty()) {
      pairs_present.assign((65536 + 256) / 64, 0);
      quads_present.assign((1 << 20) / 64, 0);
      octets_present.assign((1 << 20) / 64, 0);
      for (size_t i = 0; i < text.size(); ++i) {
        const unsigned lead = static_cast<unsigned char>(text[i]);
        set_bit(pairs_present, 65536 + lead);
        if (i + 1 < text.size()) set_bit(pairs_present, lead << 8 | static_cast<unsigned char>(text[i + 1]));
        if (i + 4 <= text.size()) set_bit(quads_present, prefix_hash(text.data() + i, 4));
        if (i + 8 <= text.size()) set_bit(octets_present, prefix_hash(text.data() + i, 8));
      }
    }
    const unsigned lead = static_cast<unsigned char>(special[0]);
    if (special.size() == 1) return get_bit(pairs_present, 65536 + lead);
    if (!get_bit(pairs_present, lead << 8 | static_cast<unsigned char>(special[1]))) return false;
    if (special.size() >= 8) return get_bit(octets_present, prefix_hash(special.data(), 8));
    return special.size() < 4 || get_bit(quads_present, prefix_hash(special.data(), 4));
  };
  for (int32_t id : special_tokens_) {
    const TokenType type = vocab_.types[size_t(id)];
    if (!options.parse_special && type != TokenType::kUserDefined) continue;
    const std::string& special = vocab_.tokens[size_t(id)];
    if (fragments.empty() || special.size() > text.size() || !may_occur(special)) continue;
    std::vector<Fragment> next;
    next.reserve(fragments.size());
    for (const Fragment& f : fragments) {
      if (f.is_token) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      for (size_t at, from = 0; (at = rest.find(special, from)) != std::string_view::npos;) {
        const size_t begin = size_t(rest.data() - text.data()) + at;
        if (type != TokenType::kUserDefined && options.special_ranges &&
            !inside_ranges(*options.special_ranges, begin, begin + special.size())) {
          from = at + 1;  // plain text here
          continue;
        }
        if (at > 0) next.push_back({false, -1, rest.substr(0, at)});
        next.push_back({true, id, {}});
        rest.remove_prefix(at + special.size());
        from = 0;
      }
      if (!rest.empty()) next.push_back({false, -1, rest});
    }
    fragments = std::move(next);
  }

  std::vector<int32_t> out;
  if (options.add_special && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  bool after_special = true;
  for (const Fragment& f : fragments) {
    if (f.is_token) {
      out.push_back(f.token);
      after_special = true;
    } else {
      encode_fragment(f.text, after_special, out);
      after_special = false;
    }
  }
  if (options.add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string text;
  bool first_text = true;
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (first_text && !piece.empty()) {
      if (vocab_.add_space_prefix && piece[0] == ' ') piece.erase(0, 1);
      first_text = false;
    }
    text += piece;
  }
  return text;
}

std::string Tokenizer::describe() const {
  auto name = [&](int32_t id) { return id < 0 ? std::string("none") : std::to_string(id) + " '" + vocab_.tokens[size_t(id)] + "'"; };
  return vocab_.model + " (" + describe_family() + "), " + std::to_string(vocab_.size()) + " tokens, bos " + name(vocab_.bos) +
         ", eos " + name(vocab_.eos) + ", unk " + name(vocab_.unk) + (vocab_.add_bos ? ", adds BOS" : "") +
         (vocab_.add_eos ? ", adds EOS" : "");
}

std::string Utf8StreamDecoder::push(std::string_view bytes) {
  pending_.append(bytes);
  // Find where the last (possibly incomplete) character starts.
  size_t keep = 0;
  const size_t n = pending_.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(pending_[n - back]);
    if ((c & 0xc0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (c >= 0xf8) need = 1;  // not a lead byte: pass through
    if (need > back) keep = back;
    break;
  }
  std::string out = pending_.substr(0, n - keep);
  pending_.erase(0, n - keep);
  return out;
}

std::string Utf8StreamDecoder::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace bitsplit
