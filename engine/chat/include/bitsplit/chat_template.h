// Chat templates: a Jinja-subset interpreter that renders a model's `tokenizer.chat_template`
// the way Hugging Face transformers does (jinja2's ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, autoescape off, `raise_exception` and a json.dumps `tojson`).
// docs/CHAT_TEMPLATES.md lists what is supported and how it is tested against jinja2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "bitsplit/status.h"

namespace bitsplit {

namespace chat {
struct Program;  // the parsed template (engine/chat/ast.h)
}

// Bounds that keep a hostile template from running away; each breach is a Status error.
struct ChatTemplateLimits {
  size_t max_output_bytes = size_t{16} << 20;  // rendered text, and any one string value
  int max_call_depth = 64;                     // nested macro calls (and recursive renders)
  uint64_t max_loop_iterations = 1'000'000;    // `for` iterations and macro calls of one render together
  size_t max_list_items = size_t{1} << 20;     // items of one list the template builds (+, *)
  size_t max_template_bytes = size_t{1} << 20;  // the template source
};

class ChatTemplate {
 public:
  // Parses the template; syntax errors and unsupported statements, filters and tests name the
  // construct and its line:column ("unsupported filter 'foo' at 3:14").
  static Result<ChatTemplate> parse(std::string_view source, ChatTemplateLimits limits = {});

  // Renders with `context` (a JSON object) as the template's variables: `messages`,
  // `add_generation_prompt`, `bos_token`, `eos_token`, `tools` and anything else the template
  // reads. A `raise_exception(msg)` in the template returns "raise_exception: msg". Python
  // dicts keep their order (tool schemas print as given), so take an ordered_json where order
  // matters: a plain nlohmann::json has its object keys sorted before the template sees them.
  Result<std::string> render(const nlohmann::ordered_json& context) const;
  Result<std::string> render(const nlohmann::json& context) const;

  // The common case: messages (a JSON list of {role, content, ...}) and the special tokens.
  Result<std::string> render_chat(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                  std::string_view bos_token, std::string_view eos_token) const;

  const std::string& source() const;

 private:
  template <typename Json>
  Result<std::string> render_json(const Json& context) const;
  ChatTemplate(std::shared_ptr<const chat::Program> program, ChatTemplateLimits limits)
      : program_(std::move(program)), limits_(limits) {}
  std::shared_ptr<const chat::Program> program_;
  ChatTemplateLimits limits_;
};

}  // namespace bitsplit
