// The chat-template parser: tokens to statements and expressions (jinja2's grammar and
// operator precedence), rejecting unsupported statements, filters and tests with their position.
#pragma once

#include <memory>
#include <string_view>

#include "ast.h"
#include "bitsplit/status.h"

namespace bitsplit::chat {

// Parses a template source (normalising it first).
Result<std::shared_ptr<const Program>> parse_program(std::string_view source);

}  // namespace bitsplit::chat
