// Fuzz harness for the chat-template interpreter (engine/chat/): the input is a template's source,
// parsed with small limits and, when it parses, rendered on a fixed conversation with tools.
// Asserts: an error is a Status with a message (never a crash, hang or runaway allocation), and
// a rendered text stays within the output limit.
#pragma once

#include <string_view>

#include "bitsplit/chat_template.h"
#include "harness_common.h"

namespace bitsplit::fuzz {

inline int run_chat_template(const uint8_t* data, size_t size) {
  ChatTemplateLimits limits;
  limits.max_output_bytes = size_t(1) << 20;
  limits.max_loop_iterations = 100000;
  limits.max_list_items = 100000;
  limits.max_template_bytes = size_t(1) << 16;
  auto parsed = ChatTemplate::parse(std::string_view(reinterpret_cast<const char*>(data), size), limits);
  if (!parsed) {
    BITSPLIT_FUZZ_ASSERT(!parsed.status().message().empty(), "a parse error without a message");
    return 0;
  }
  static const nlohmann::ordered_json conversation = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi \"there\" — ünïcode"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
    {"role": "tool", "content": "42"},
    {"role": "user", "content": "Thanks"}])");
  auto rendered = parsed->render_chat(conversation, true, "<s>", "</s>");
  if (rendered) {
    BITSPLIT_FUZZ_ASSERT(rendered->size() <= limits.max_output_bytes, "rendered text over the output limit");
  } else {
    BITSPLIT_FUZZ_ASSERT(!rendered.status().message().empty(), "a render error without a message");
  }
  return 0;
}

}  // namespace bitsplit::fuzz
