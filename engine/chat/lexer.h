// The chat-template lexer: splits a template into text and the tokens of its {{ }} and {% %}
// tags, with jinja2's whitespace control as Hugging Face configures it (trim_blocks and
// lstrip_blocks on, `-` and `+` modifiers, a single trailing newline dropped).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit::chat {

enum class TokenType { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  TokenType type;
  std::string text;  // text, name, operator, or a string literal's decoded value
  uint32_t offset;   // byte offset in the normalised source
};

// "3:14": 1-based line and column (in code points) of a byte offset.
std::string position_text(std::string_view source, uint32_t offset);

// jinja2 reads \r\n and \r as \n and drops one trailing newline (keep_trailing_newline=False).
std::string normalize_source(std::string_view source);

// Tokenises a normalised source.
Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace bitsplit::chat
