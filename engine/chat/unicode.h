// UTF-8 helpers for the chat-template interpreter: Python strings are sequences of code points,
// so lengths, indexing, slicing, stripping and case mapping work on code points here too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bitsplit::chat {

// Decodes UTF-8; an invalid byte becomes U+FFFD so that hostile input never stops a render.
std::u32string utf8_decode(std::string_view s);
void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(std::u32string_view s);
size_t utf8_length(std::string_view s);

// Python's str.isspace() (the Unicode whitespace set).
bool is_space(char32_t c);
// Case mapping: ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (see docs/CHAT_TEMPLATES.md).
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_cased_letter(char32_t c);
bool is_alnum(char32_t c);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize()
std::string title_method(std::string_view s);  // str.title()

// str.strip()/lstrip()/rstrip() with no argument (whitespace) or a set of characters.
std::string strip(std::string_view s, bool left, bool right, const std::u32string* chars = nullptr);

}  // namespace bitsplit::chat
