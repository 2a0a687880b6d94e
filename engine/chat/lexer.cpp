// Tokenising chat templates: tags, whitespace control, raw blocks and expression tokens.
#include "lexer.h"

#include <cstring>
#include <optional>

#include "unicode.h"

namespace bitsplit::chat {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

void rstrip_ws(std::string& s) {
  while (!s.empty() && is_ws(s.back())) s.pop_back();
}

size_t skip_ws(std::string_view s, size_t pos) {
  while (pos < s.size() && is_ws(s[pos])) ++pos;
  return pos;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape decoding of a string literal's body.
std::string decode_string_literal(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        bool ok = i + digits < body.size();
        for (size_t k = 1; ok && k <= digits; ++k) {
          const int h = hex_value(body[i + k]);
          if (h < 0) ok = false;
          cp = cp * 16 + h;
        }
        if (!ok || cp > 0x10FFFF) {  // Python raises here; keep the text as written
          out += '\\';
          out += e;
          break;
        }
        utf8_append(out, cp);
        i += digits;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            cp = cp * 8 + (body[++i] - '0');
          utf8_append(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      const size_t start = find_tag(pos);
      if (start == std::string_view::npos) {
        emit_text(std::string(src_.substr(pos)), static_cast<uint32_t>(pos));
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+')
                            ? src_[start + 2] : '\0';
      std::string text(src_.substr(pos, start - pos));
      if (sign == '-') {
        rstrip_ws(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: drop spaces between the line's start and a block or comment tag.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
          bool all_ws = true;
          for (size_t i = l_pos; i < text.size(); ++i) all_ws = all_ws && is_ws(text[i]) && text[i] != '\n';
          if (all_ws) text.resize(l_pos);
        }
      }
      emit_text(std::move(text), static_cast<uint32_t>(pos));
      const size_t body = start + 2 + (sign ? 1 : 0);
      size_t end = 0;
      if (kind == '#') {
        const size_t close = src_.find("#}", body);
        if (close == std::string_view::npos)
          return error("unterminated comment", start);
        const char end_sign = close > body && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
        end = finish_block_end(close + 2, end_sign);
      } else if (kind == '%' && is_raw_begin(body)) {
        auto r = lex_raw(start, body);
        if (!r.is_ok()) return r.status();
        end = *r;
      } else {
        auto r = lex_tag(kind == '{', start, body);
        if (!r.is_ok()) return r.status();
        end = *r;
      }
      line_starting = end > 0 && src_[end - 1] == '\n';
      pos = end;
    }
    tokens_.push_back({TokenType::kEof, "", static_cast<uint32_t>(src_.size())});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t pos) const {
    while (true) {
      const size_t p = src_.find('{', pos);
      if (p == std::string_view::npos || p + 1 >= src_.size()) return std::string_view::npos;
      const char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  void emit_text(std::string text, uint32_t offset) {
    if (!text.empty()) tokens_.push_back({TokenType::kText, std::move(text), offset});
  }

  Status error(const std::string& what, size_t offset) const {
    return Status::error(what + " at " + position_text(src_, static_cast<uint32_t>(offset)));
  }

  // After a block or comment end: '-' eats all whitespace, '+' nothing, otherwise trim_blocks
  // eats one newline.
  size_t finish_block_end(size_t after, char end_sign) const {
    if (end_sign == '-') return skip_ws(src_, after);
    if (end_sign != '+' && after < src_.size() && src_[after] == '\n') return after + 1;
    return after;
  }

  bool is_raw_begin(size_t body) const {
    size_t p = skip_ws(src_, body);
    if (src_.substr(p, 3) != "raw") return false;
    p += 3;
    if (p < src_.size() && is_name_char(src_[p])) return false;
    p = skip_ws(src_, p);
    if (p < src_.size() && src_[p] == '-') ++p;
    return src_.substr(p, 2) == "%}";
  }

  Result<size_t> lex_raw(size_t start, size_t body) {
    size_t p = skip_ws(src_, body) + 3;
    p = skip_ws(src_, p);
    size_t content = 0;
    if (src_[p] == '-') {
      content = skip_ws(src_, p + 3);
    } else {
      content = p + 2;
    }
    for (size_t q = src_.find("{%", content); q != std::string_view::npos; q = src_.find("{%", q + 2)) {
      size_t r = q + 2;
      const char sign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r] : 0;
      if (sign) ++r;
      r = skip_ws(src_, r);
      if (src_.substr(r, 6) != "endraw") continue;
      r = skip_ws(src_, r + 6);
      char end_sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) end_sign = src_[r++];
      if (src_.substr(r, 2) != "%}") continue;
      std::string text(src_.substr(content, q - content));
      if (sign == '-') rstrip_ws(text);
      emit_text(std::move(text), static_cast<uint32_t>(content));
      return finish_block_end(r + 2, end_sign);
    }
    return error("unterminated raw block ('{% raw %}' without '{% endraw %}')", start);
  }

  // The tokens of one {{ }} or {% %} tag; returns the offset after its end (and whitespace control).
  Result<size_t> lex_tag(bool variable, size_t start, size_t body) {
    tokens_.push_back({variable ? TokenType::kVarBegin : TokenType::kBlockBegin, "", static_cast<uint32_t>(start)});
    std::vector<char> brackets;  // the closers the open brackets wait for; a tag cannot end inside one
    size_t p = body;
    while (true) {
      p = skip_ws(src_, p);
      if (p >= src_.size())
        return error(variable ? "unterminated '{{' (no matching '}}')" : "unterminated '{%' (no matching '%}')", start);
      if (brackets.empty())
        if (auto after = lex_tag_end(variable, p)) return *after;
      const char c = src_[p];
      Result<size_t> next = p;
      if (is_name_start(c)) {
        next = lex_name(p);
      } else if (c == '\'' || c == '"') {
        next = lex_string(p);
      } else if (c == '0' && p + 2 < src_.size() && std::strchr("xXbBoO", src_[p + 1]) &&
                 hex_value(src_[p + 2]) >= 0) {
        next = lex_prefixed_int(p);
      } else if (is_digit(c)) {
        next = lex_number(p);
      } else {
        next = lex_operator(p, brackets);
      }
      if (!next.is_ok()) return next.status();
      p = *next;
    }
  }

  // The tag's end at p ('}}' or '%}', with a '-' or, for blocks, '+' before it): pushes its token
  // and returns the offset after it and the whitespace it eats; nothing when the tag goes on.
  std::optional<size_t> lex_tag_end(bool variable, size_t p) {
    const char closer = variable ? '}' : '%';
    const char c = src_[p];
    char end_sign = 0;
    size_t q = p;
    if ((c == '-' || (c == '+' && !variable)) && q + 2 < src_.size() && src_[q + 1] == closer && src_[q + 2] == '}') {
      end_sign = c;
      ++q;
    }
    if (src_[q] != closer || q + 1 >= src_.size() || src_[q + 1] != '}') return std::nullopt;
    tokens_.push_back({variable ? TokenType::kVarEnd : TokenType::kBlockEnd, "", static_cast<uint32_t>(p)});
    if (variable) return end_sign == '-' ? skip_ws(src_, q + 2) : q + 2;
    return finish_block_end(q + 2, end_sign);
  }

  size_t lex_name(size_t p) {
    size_t q = p;
    while (q < src_.size() && is_name_char(src_[q])) ++q;
    tokens_.push_back({TokenType::kName, std::string(src_.substr(p, q - p)), static_cast<uint32_t>(p)});
    return q;
  }

  Result<size_t> lex_string(size_t p) {
    const char quote = src_[p];
    size_t q = p + 1;
    while (q < src_.size() && src_[q] != quote) q += src_[q] == '\\' ? 2 : 1;
    if (q >= src_.size()) return error("unterminated string literal", p);
    tokens_.push_back({TokenType::kString, decode_string_literal(src_.substr(p + 1, q - p - 1)), static_cast<uint32_t>(p)});
    return q + 1;
  }

  // 0x1f, 0b101, 0o17: stored as the decimal value.
  Result<size_t> lex_prefixed_int(size_t p) {
    const int base = (src_[p + 1] | 0x20) == 'x' ? 16 : (src_[p + 1] | 0x20) == 'b' ? 2 : 8;
    size_t q = p + 2;
    uint64_t value = 0;
    while (q < src_.size() && (src_[q] == '_' || (hex_value(src_[q]) >= 0 && hex_value(src_[q]) < base))) {
      if (src_[q] != '_') {
        if (value > (UINT64_MAX >> 4)) return error("integer literal too large", p);
        value = value * base + hex_value(src_[q]);
      }
      ++q;
    }
    if (value > static_cast<uint64_t>(INT64_MAX)) return error("integer literal too large", p);
    tokens_.push_back({TokenType::kInt, std::to_string(value), static_cast<uint32_t>(p)});
    return q;
  }

  // Decimal digits (single '_' between digits allowed), a fraction and an exponent make a float.
  size_t lex_number(size_t p) {
    size_t q = p;
    auto digits = [&] {
      while (q < src_.size() && (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && is_digit(src_[q + 1]))))
        ++q;
    };
    digits();
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
      is_float = true;
      ++q;
      digits();
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t e = q + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && is_digit(src_[e])) {
        is_float = true;
        q = e;
        digits();
      }
    }
    std::string number;
    for (size_t i = p; i < q; ++i)
      if (src_[i] != '_') number += src_[i];
    tokens_.push_back({is_float ? TokenType::kFloat : TokenType::kInt, number, static_cast<uint32_t>(p)});
    return q;
  }

  // An operator or bracket; brackets must pair up within the tag.
  Result<size_t> lex_operator(size_t p, std::vector<char>& brackets) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    const char c = src_[p];
    std::string op;
    for (const char* two : kTwo)
      if (src_.substr(p, 2) == two) op = two;
    if (op.empty()) {
      if (!std::strchr("+-/*%~[](){}<>=.:|,;", c)) {
        std::string shown;
        utf8_append(shown, utf8_decode(src_.substr(p, 4)).at(0));
        return error("unexpected character '" + shown + "'", p);
      }
      op = std::string(1, c);
    }
    if (op == "(" || op == "[" || op == "{") {
      brackets.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
    } else if (op == ")" || op == "]" || op == "}") {
      if (brackets.empty() || brackets.back() != op[0]) return error("unexpected '" + op + "'", p);
      brackets.pop_back();
    }
    tokens_.push_back({TokenType::kOp, op, static_cast<uint32_t>(p)});
    return p + op.size();
  }

  std::string_view src_;
  std::vector<Token> tokens_;
};

}  // namespace

std::string position_text(std::string_view source, uint32_t offset) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

Result<std::vector<Token>> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace bitsplit::chat
