// UTF-8 decoding/encoding, Python's whitespace set and simple case mapping.
#include "unicode.h"

namespace bitsplit::chat {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra = 0;
    char32_t cp = 0;
    if (c < 0x80) {
      cp = c;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, cp = c & 0x07;
    } else {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    bool ok = i + extra < s.size();
    for (int k = 1; ok && k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += extra + 1;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c == 0xB5) return 0x39C;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    // Latin Extended-A pairs: even upper / odd lower, except the 0x139-0x148 and 0x179-0x17E runs.
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x138 || c == 0x149) return c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3AC && c <= 0x3AF) {
    static const char32_t map[] = {0x386, 0x388, 0x389, 0x38A};
    return map[c - 0x3AC];
  }
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD) return 0x38E;
  if (c == 0x3CE) return 0x38F;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x130) return 'i';
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E) return 0x3CD;
  if (c == 0x38F) return 0x3CE;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased_letter(char32_t c) { return to_upper(c) != c || to_lower(c) != c || c == 0xDF; }

bool is_alnum(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  // An approximation of Python's str.isalnum() beyond ASCII: letters and digits of every script
  // count, the punctuation, symbol, mark and emoji blocks do not.
  if (c < 0xC0) return c == 0xAA || c == 0xB2 || c == 0xB3 || c == 0xB5 || c == 0xB9 || c == 0xBA || (c >= 0xBC && c <= 0xBE);
  if (c == 0xD7 || c == 0xF7 || is_space(c)) return false;
  if (c >= 0x300 && c <= 0x36F) return false;                      // combining diacritics
  if (c >= 0x2000 && c <= 0x2BFF) return false;                    // punctuation, symbols, arrows, shapes
  if (c >= 0x2E00 && c <= 0x2E7F) return false;                    // supplemental punctuation
  if (c >= 0x3000 && c <= 0x303F) return false;                    // CJK punctuation
  if ((c >= 0xFE00 && c <= 0xFE6F) || (c >= 0xFF00 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20)) return false;
  if (c >= 0x1F000 && c <= 0x1FAFF) return false;                  // emoji and pictographs
  if (c == 0x5BE || c == 0x5C0 || c == 0x5C3 || c == 0x5C6 || (c >= 0x591 && c <= 0x5C7)) return false;  // Hebrew marks
  if (c == 0x60C || c == 0x61B || c == 0x61F || (c >= 0x64B && c <= 0x65F)) return false;  // Arabic marks
  if (c >= 0x37E && c <= 0x387 && c != 0x386) return c != 0x37E && c != 0x387 && c != 0x384 && c != 0x385;
  return true;
}

namespace {
void append_upper(std::string& out, char32_t c) {
  if (c == 0xDF) {  // ß upper-cases to "SS", as in Python
    out += "SS";
    return;
  }
  utf8_append(out, to_upper(c));
}
}  // namespace

std::string upper(std::string_view s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) append_upper(out, c);
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) utf8_append(out, to_lower(c));
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : utf8_decode(s)) {
    if (first) {
      append_upper(out, c);
      first = false;
    } else {
      utf8_append(out, to_lower(c));
    }
  }
  return out;
}

std::string title_method(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : utf8_decode(s)) {
    const bool cased = is_cased_letter(c);
    if (cased && !previous_cased) {
      append_upper(out, c);
    } else if (cased) {
      utf8_append(out, to_lower(c));
    } else {
      utf8_append(out, c);
    }
    previous_cased = cased;
  }
  return out;
}

std::string strip(std::string_view s, bool left, bool right, const std::u32string* chars) {
  const std::u32string cps = utf8_decode(s);
  auto strippable = [&](char32_t c) {
    return chars ? chars->find(c) != std::u32string::npos : is_space(c);
  };
  size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && strippable(cps[begin])) ++begin;
  if (right)
    while (end > begin && strippable(cps[end - 1])) --end;
  return utf8_encode(std::u32string_view(cps).substr(begin, end - begin));
}

}  // namespace bitsplit::chat
