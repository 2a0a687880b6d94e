// Pre-tokenizer regexes by tokenizer.ggml.pre name (the facts are llama.cpp's table in
// llama-vocab.cpp) and a PCRE2-based splitter with llama.cpp's unicode_regex_split semantics.
#include "tokenizer_pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <climits>

namespace bitsplit {
namespace {

// llama.cpp's \s is Unicode White_Space (its tables come from Python's `regex`). PCRE2's UCP \s
// also matches U+180E, which lost White_Space in Unicode 6.3, so \s and \S are spelled out.
constexpr std::string_view kWhiteSpace =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// CJK unified ideographs, the BMP block below them and Hangul (deepseek's "[一-龥ࠀ-一가-퟿]+").
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
// deepseek-llm's cased-letter class, written with code points.
constexpr const char* kDeepseekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr const char* kDeepseekPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr const char* kDeepseek3 =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Entry {
  std::vector<std::string_view> names;  // first is canonical
  std::vector<const char*> patterns;
  bool ignore_merges = false;
  bool add_bos = false;
};

const std::vector<Entry>& catalogue() {
  static const std::vector<Entry> kEntries = {
      {{"default"}, {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2Pattern, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"gpt-2", "mpt", "olmo", "phi-2", "jais", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de"}, {kGpt2Pattern}},
      {{"llama3", "llama-bpe", "llama-v3", "falcon3", "falcon-h1"}, {kLlama3}, true, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}},
      {{"qwen2", "stablelm2", "deepseek-r1-qwen", "megrez"}, {kQwen2}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {R"(\p{N})", kGpt2Pattern}},
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2Pattern, "[0-9][0-9][0-9]"}},
      {{"deepseek-llm"}, {R"([\r\n])", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"}},
      {{"deepseek-coder"}, {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}},
      {{"deepseek-v3"}, {R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)", kDeepseek3}},
  };
  return kEntries;
}

// Rewrites \s and \S (outside character classes; \s inside them too) as explicit classes.
std::string expand_whitespace(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else if (e == 'Q') {  // \Q...\E quotes everything up to \E
        const size_t end = p.find("\\E", i + 1);
        const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
        out.append(p.substr(i - 1, stop - (i - 1)));
        i = stop - 1;
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX [:name:]
      const size_t end = p.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += char(cp);
  } else {  // the byte table only needs code points below U+0800
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  }
}

bool is_self_mapped(int b) { return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff); }

struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(md); }
  MatchData() = default;
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
};

}  // namespace

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

const std::array<std::string, 256>& gpt2_byte_to_unicode() {
  static const std::array<std::string, 256> kTable = [] {
    std::array<std::string, 256> t;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) append_utf8(t[size_t(b)], is_self_mapped(b) ? uint32_t(b) : next++);
    return t;
  }();
  return kTable;
}

int gpt2_unicode_to_byte(uint32_t cp) {
  static const std::array<int16_t, 256 + 68> kInverse = [] {
    std::array<int16_t, 256 + 68> t;
    t.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) t[is_self_mapped(b) ? size_t(b) : size_t(next++)] = int16_t(b);
    return t;
  }();
  return cp < kInverse.size() ? kInverse[cp] : -1;
}

Result<PreTokenizerSpec> pretokenizer_spec(std::string_view pre) {
  if (pre.empty()) pre = "default";
  for (const Entry& e : catalogue()) {
    for (std::string_view name : e.names) {
      if (name != pre) continue;
      PreTokenizerSpec spec;
      spec.name = std::string(pre);
      for (const char* p : e.patterns) spec.patterns.emplace_back(p);
      spec.ignore_merges = e.ignore_merges;
      spec.add_bos = e.add_bos;
      return spec;
    }
  }
  return Status::error("pre-tokenizer '" + std::string(pre) + "' is not supported (supported: " +
                       supported_pretokenizers() + ")");
}

std::string supported_pretokenizers() {
  std::string out;
  for (const Entry& e : catalogue()) {
    for (std::string_view name : e.names) {
      if (!out.empty()) out += ", ";
      out += name;
    }
  }
  return out;
}

size_t valid_utf8_prefix(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned c = b(0);
  if (c < 0x80) return 1;
  if (c < 0xc2 || c > 0xf4) return 0;  // continuation, overlong 2-byte lead, or beyond U+10FFFF
  const size_t n = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
  if (s.size() < n) return 0;
  // The second byte's range is narrower for the leads that could encode overlongs, surrogates
  // or code points above U+10FFFF (Unicode Table 3-7).
  unsigned lo = 0x80, hi = 0xbf;
  if (c == 0xe0) lo = 0xa0;
  if (c == 0xed) hi = 0x9f;
  if (c == 0xf0) lo = 0x90;
  if (c == 0xf4) hi = 0x8f;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if ((b(i) & 0xc0) != 0x80) return 0;
  }
  return n;
}

struct PreTokenizer::Impl {
  struct Compiled {
    pcre2_code* code = nullptr;
    bool jit = false;
    bool mapped = false;  // matches against the byte-mapped text
  };
  std::vector<Compiled> regexes;

  ~Impl() {
    for (Compiled& c : regexes) pcre2_code_free(c.code);
  }

  // First match of `re` in piece at or after `start`: rc as pcre2_match returns it.
  static int find(const Compiled& re, std::string_view piece, size_t start, uint32_t options, pcre2_match_data* md) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    int rc = re.jit && options == 0 ? pcre2_jit_match(re.code, subject, piece.size(), start, 0, md, nullptr)
                                    : pcre2_match(re.code, subject, piece.size(), start, options | PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && re.jit) {
      // The JIT's stack can run out on pathological pieces; the interpreter keeps its
      // backtracking state on the heap.
      rc = pcre2_match(re.code, subject, piece.size(), start, options | PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    }
    return rc;
  }

  // Splits one valid-UTF-8 piece into matches and gaps, as std::regex_iterator does in
  // llama.cpp (an empty match ends the gap before it and is retried anchored, non-empty).
  static void split_piece(const Compiled& re, std::string_view piece, std::vector<std::string_view>& out,
                          pcre2_match_data* md) {
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t gap = 0, pos = 0;
    uint32_t options = 0;
    while (pos <= piece.size()) {
      const int rc = find(re, piece, pos, options, md);
      if (rc < 0) {
        if (options != 0 && rc == PCRE2_ERROR_NOMATCH) {  // no non-empty match here: step one character
          options = 0;
          if (pos >= piece.size()) break;
          pos += std::max<size_t>(1, valid_utf8_prefix(piece.substr(pos)));
          continue;
        }
        break;  // no more matches (or an engine error: the rest stays one piece)
      }
      const size_t begin = ov[0], end = ov[1];
      if (begin > gap) out.push_back(piece.substr(gap, begin - gap));
      if (end > begin) {
        out.push_back(piece.substr(begin, end - begin));
        options = 0;
      } else {
        options = PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
      }
      gap = pos = end;
    }
    if (gap < piece.size()) out.push_back(piece.substr(gap));
  }

  // Splits the byte-mapped form of the piece and carries the bounds back to its bytes (every
  // mapped character is one byte, and matches end on character boundaries).
  static void split_mapped(const Compiled& re, std::string_view piece, std::vector<std::string_view>& out,
                           pcre2_match_data* md) {
    std::string mapped;
    std::vector<size_t> offset;  // offset[k]: where byte k's character starts in `mapped`
    mapped.reserve(piece.size() * 2);
    offset.reserve(piece.size() + 1);
    for (unsigned char c : piece) {
      offset.push_back(mapped.size());
      mapped += gpt2_byte_to_unicode()[c];
    }
    offset.push_back(mapped.size());
    std::vector<std::string_view> parts;
    split_piece(re, mapped, parts, md);
    size_t k = 0;
    for (std::string_view part : parts) {
      const size_t end = size_t(part.data() - mapped.data()) + part.size();
      const size_t first = k;
      while (k < piece.size() && offset[k] < end) ++k;
      if (k > first) out.push_back(piece.substr(first, k - first));
    }
  }
};

PreTokenizer::PreTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

size_t PreTokenizer::size() const { return impl_->regexes.size(); }

bool PreTokenizer::uses_jit() const {
  for (const auto& r : impl_->regexes) {
    if (!r.jit) return false;
  }
  return true;
}

Result<PreTokenizer> PreTokenizer::compile(const std::vector<std::string>& patterns, size_t mapped_from) {
  auto impl = std::make_unique<Impl>();
  for (const std::string& pattern : patterns) {
    const std::string expanded = expand_whitespace(pattern);
    int error = 0;
    PCRE2_SIZE offset = 0;
    // DOLLAR_ENDONLY: `$` means the end of the piece, as in ECMAScript (std::regex) and Rust.
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expanded.data()), expanded.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &offset, nullptr);
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      return Status::error("pre-tokenizer regex '" + pattern + "' does not compile: " +
                           reinterpret_cast<const char*>(message.data()) + " (at offset " + std::to_string(offset) +
                           " of the PCRE2 form)");
    }
    impl->regexes.push_back(
        {code, pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0, impl->regexes.size() >= mapped_from});
  }
  return PreTokenizer(std::move(impl));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  // Valid runs, with every invalid byte as a piece of its own.
  std::vector<std::string_view> current;
  current.reserve(8);
  size_t run = 0;
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = valid_utf8_prefix(text.substr(i));
    if (len > 0) {
      i += len;
      continue;
    }
    if (i > run) current.push_back(text.substr(run, i - run));
    current.push_back(text.substr(i, 1));
    run = ++i;
  }
  if (text.size() > run) current.push_back(text.substr(run));
  if (impl_->regexes.empty()) {
    pieces.insert(pieces.end(), current.begin(), current.end());
    return;
  }

  const MatchData data;
  std::vector<std::string_view> next;
  const size_t n = impl_->regexes.size();
  for (size_t r = 0; r < n; ++r) {
    std::vector<std::string_view>& out = r + 1 == n ? pieces : next;
    if (r + 1 < n) {
      next.clear();
      next.reserve(current.size() * 2 + text.size() / 16);
    }
    for (std::string_view piece : current) {
      if (piece.size() == 1 && static_cast<unsigned char>(piece[0]) >= 0x80) {
        out.push_back(piece);  // an invalid byte
        continue;
      }
      if (impl_->regexes[r].mapped) {
        Impl::split_mapped(impl_->regexes[r], piece, out, data.md);
      } else {
        Impl::split_piece(impl_->regexes[r], piece, out, data.md);
      }
    }
    if (r + 1 < n) current.swap(next);
  }
}

}  // namespace bitsplit
