// Fuzz harnesses for the tokenizers (SentencePiece, byte-level BPE, tokenizer.json):
// - run_tokenizer_encode: the input is a selector byte (which vocabulary, which options) and
//   text, encoded with a real vocabulary from ../shared/models/vocab (BITSPLIT_FUZZ_VOCAB_DIR or
//   $BITSPLIT_SHARED_DIR/models/vocab; without them, two small built-in vocabularies);
// - run_tokenizer_metadata: the input is a GGUF file whose tokenizer.ggml.* metadata builds a
//   tokenizer (Tokenizer::from_metadata), which then encodes a few texts;
// - run_tokenizer_json: the input is a tokenizer.json, optionally followed by a 0 byte and a
//   tokenizer_config.json, read by Tokenizer::from_hf_json from a temporary folder.
// Asserts for every encode: ids lie inside the vocabulary, the UTF-8 stream decoder passes every
// byte of the pieces through, decode is no longer than the joined pieces, and (real vocabularies
// only) valid UTF-8 comes back unchanged where the vocabulary covers every byte (for SentencePiece: unless the text holds
// U+2581 or a user-defined token, after which llama.cpp's SentencePiece adds a space).
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>

#include "../../engine/text/tokenizer_pretok.h"
#include "bitsplit/gguf.h"
#include "bitsplit/tokenizer.h"
#include "../engine/text/tokenizer_testing.h"
#include "harness_common.h"

namespace bitsplit::fuzz {

inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = uint8_t(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) {
      const uint8_t d = uint8_t(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return false;
    i += n;
  }
  return true;
}

// True when every byte has a token (byte-level characters for BPE, <0xXX> for SentencePiece). A
// SentencePiece vocabulary needs "▁" itself too: without it a space falls back to the bytes of
// U+2581, which decode as those bytes, not as a space (as in llama.cpp).
inline bool covers_every_byte(const Tokenizer& t) {
  const Vocabulary& v = t.vocab();
  if (v.family == TokenizerFamily::kSentencePiece && v.find("\xe2\x96\x81") < 0) return false;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const bool found = v.family == TokenizerFamily::kBytePairEncoding ? v.find(gpt2_byte_to_unicode()[size_t(b)]) >= 0
                                                                       : v.find(name) >= 0;
    if (!found) return false;
  }
  return true;
}

inline void check_encode(const Tokenizer& t, std::string_view text, EncodeOptions options, bool round_trips) {
  const auto ids = t.encode(text, options);
  Utf8StreamDecoder stream;
  std::string streamed, joined;
  for (int32_t id : ids) {
    BITSPLIT_FUZZ_ASSERT(id >= 0 && id < t.vocab().size(), "token id " + std::to_string(id) + " outside the vocabulary");
    const std::string piece = t.token_to_piece(id);
    streamed += stream.push(piece);
    joined += piece;
  }
  streamed += stream.flush();
  BITSPLIT_FUZZ_ASSERT(streamed == joined, "the stream decoder changed the bytes");
  const std::string decoded = t.decode(ids);
  BITSPLIT_FUZZ_ASSERT(decoded.size() <= joined.size(), "decode is longer than its pieces");
  // SentencePiece turns a U+2581 of the text into a space, and (as llama.cpp does) puts a space
  // in front of the text after a user-defined token, which is split out even without parse_special.
  const bool spm = t.vocab().family == TokenizerFamily::kSentencePiece;
  const bool after_user_token = spm && std::any_of(ids.begin(), ids.end(), [&](int32_t id) {
    return t.vocab().types[size_t(id)] == TokenType::kUserDefined;
  });
  if (round_trips && !options.parse_special && !options.add_special && valid_utf8(text) && !after_user_token &&
      (!spm || text.find("\xe2\x96\x81") == std::string_view::npos)) {
    BITSPLIT_FUZZ_ASSERT(decoded == text, "valid UTF-8 did not round-trip through " + t.describe() + ": '" +
                                              std::string(text) + "' came back as '" + decoded + "'");
  }
}

// Texts every fuzzed tokenizer encodes: plain words, spaces, digits, special-looking text,
// non-ASCII and an invalid byte. A fuzzed vocabulary may type or duplicate its byte tokens any
// way it likes, so round trips are not asserted for it.
inline void check_sample_texts(const Tokenizer& t) {
  static const char* const kTexts[] = {"", "hello world", "  two  spaces\n\tand tabs", "12345 6.7e8",
                                       "<s></s><|endoftext|><unk>", "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\xa6\x99",
                                       "\xff\xfe broken \xc3", "it's I'm we'll"};
  const bool round_trips = false;
  for (const char* text : kTexts) {
    for (int o = 0; o < 4; ++o) check_encode(t, text, {.add_special = (o & 1) != 0, .parse_special = (o & 2) != 0}, round_trips);
  }
  const int32_t n = std::min<int32_t>(t.vocab().size(), 4096);
  for (int32_t id = 0; id < n; ++id) {
    (void)t.token_to_piece(id, false);
    (void)t.token_to_piece(id, true);
  }
  (void)t.describe();
}

// --- encode with real vocabularies -----------------------------------------------------------

inline gguf::Metadata builtin_spm_metadata() {
  const char* pieces[] = {"\xe2\x96\x81", "h", "e", "l", "o", "w", "r", "d", "he", "ll", "llo", "hello",
                          "\xe2\x96\x81hello", "\xe2\x96\x81w", "or", "\xe2\x96\x81wor", "ld", "\xc3\xa9"};
  std::vector<std::pair<std::string, float>> scored;
  for (size_t i = 0; i < std::size(pieces); ++i) scored.emplace_back(pieces[i], -float(i + 1));
  return testing::spm_byte_fallback_metadata(scored);
}

inline gguf::Metadata builtin_bpe_metadata() {
  return testing::byte_level_bpe_metadata({"h e", "l l", "he ll", "hell o", "\xc4\xa0 hello", "1 2", "12 3"}, "gpt-2");
}

// The folder of llama.cpp's vocabulary GGUFs, or empty.
inline std::string vocab_dir() {
  if (const char* d = std::getenv("BITSPLIT_FUZZ_VOCAB_DIR"); d && *d) return d;
  std::string shared;
  if (const char* s = std::getenv("BITSPLIT_SHARED_DIR"); s && *s) shared = s;
#ifdef BITSPLIT_SHARED_DIR
  if (shared.empty()) shared = BITSPLIT_SHARED_DIR;
#endif
  if (shared.empty()) return {};
  const std::string dir = shared + "/models/vocab";
  return std::filesystem::is_directory(dir) ? dir : std::string();
}

struct EncodeTokenizer {
  std::string name;
  std::unique_ptr<Tokenizer> tokenizer;
  bool covers_every_byte = false;
};

// Loaded once per process: the built-in vocabularies, then every supported shared one.
inline const std::vector<EncodeTokenizer>& encode_tokenizers() {
  static const std::vector<EncodeTokenizer> all = [] {
    std::vector<EncodeTokenizer> out;
    auto add = [&](std::string name, const gguf::Metadata& m) {
      auto t = Tokenizer::from_metadata(m);
      if (!t) return;
      const bool covers = covers_every_byte(**t);
      out.push_back({std::move(name), std::move(*t), covers});
    };
    add("builtin-spm", builtin_spm_metadata());
    add("builtin-bpe", builtin_bpe_metadata());
    const std::string dir = vocab_dir();
    if (!dir.empty()) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(dir)) {
        if (e.path().extension() == ".gguf") files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& p : files) {
        auto f = gguf::File::open(p.string());
        if (f) add(p.filename().string(), f->metadata());  // unsupported models (bert) are skipped
      }
    }
    std::fprintf(stderr, "tokenizer fuzz: %zu vocabularies (%s)\n", out.size(),
                 dir.empty() ? "shared vocabularies not found; set BITSPLIT_FUZZ_VOCAB_DIR" : dir.c_str());
    return out;
  }();
  return all;
}

inline int run_tokenizer_encode(const uint8_t* data, size_t size) {
  const auto& tokenizers = encode_tokenizers();
  if (size == 0 || tokenizers.empty()) return 0;
  const uint8_t selector = data[0];
  const EncodeTokenizer& t = tokenizers[size_t(selector & 0x3f) % tokenizers.size()];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  check_encode(*t.tokenizer, text, {.add_special = (selector & 0x40) != 0, .parse_special = (selector & 0x80) != 0},
               t.covers_every_byte);
  return 0;
}

// --- tokenizers from fuzzed metadata and tokenizer.json ---------------------------------------

inline int run_tokenizer_metadata(const uint8_t* data, size_t size) {
  auto file = gguf::File::parse(gguf::storage_from_bytes(std::vector<uint8_t>(data, data + size)), "fuzz-vocab.gguf");
  if (!file) return 0;
  auto t = Tokenizer::from_metadata(file->metadata());
  if (!t) {
    BITSPLIT_FUZZ_ASSERT(!t.status().message().empty(), "an error without a message");
    return 0;
  }
  check_sample_texts(**t);
  return 0;
}

// A folder of its own per process, holding tokenizer.json and, when given, tokenizer_config.json;
// removed at exit.
inline const std::filesystem::path& json_dir() {
  struct Folder {
    std::filesystem::path path;
    Folder() {
      std::string tmpl = (std::filesystem::temp_directory_path() / "bitsplit-fuzz-json-XXXXXX").string();
      BITSPLIT_FUZZ_ASSERT(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
      path = tmpl;
    }
    ~Folder() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Folder folder;
  return folder.path;
}

inline int run_tokenizer_json(const uint8_t* data, size_t size) {
  static std::mutex mutex;  // one folder: one input at a time
  std::lock_guard lock(mutex);
  ByteReader in(data, size);
  const std::string json = in.take_string();
  const bool has_config = in.remaining() > 0 || (size > 0 && std::memchr(data, 0, size) != nullptr);
  const std::string config = in.rest();
  const auto& dir = json_dir();
  write_file(dir / "tokenizer.json", json);
  std::error_code ec;
  if (has_config) write_file(dir / "tokenizer_config.json", config);
  else std::filesystem::remove(dir / "tokenizer_config.json", ec);
  auto t = Tokenizer::from_hf_json((dir / "tokenizer.json").string());
  if (!t) {
    BITSPLIT_FUZZ_ASSERT(!t.status().message().empty(), "an error without a message");
    return 0;
  }
  check_sample_texts(**t);
  return 0;
}

}  // namespace bitsplit::fuzz
