// ChatTemplate: the public face of the chat-template module (parse once, render per request).
#include "bitsplit/chat_template.h"

#include "ast.h"
#include "interpreter.h"
#include "parser.h"

namespace bitsplit {

Result<ChatTemplate> ChatTemplate::parse(std::string_view source, ChatTemplateLimits limits) {
  if (source.size() > limits.max_template_bytes)
    return Status::error("chat template is " + std::to_string(source.size()) + " bytes, over the limit of " +
                         std::to_string(limits.max_template_bytes));
  auto program = chat::parse_program(source);
  if (!program.is_ok()) return program.status().with_context("chat template");
  return ChatTemplate(std::move(program).value(), limits);
}

template <typename Json>
Result<std::string> ChatTemplate::render_json(const Json& context) const {
  if (!context.is_object()) return Status::error("chat template: the render context must be a JSON object");
  auto value = chat::Value::from_json(context);
  if (!value.is_ok()) return value.status().with_context("chat template");
  chat::Interpreter interpreter(program_, limits_);
  auto text = interpreter.render(std::move(value).value());
  if (!text.is_ok()) return text.status().with_context("chat template");
  return text;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render_json(context);
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context) const { return render_json(context); }

Result<std::string> ChatTemplate::render_chat(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                              std::string_view bos_token, std::string_view eos_token) const {
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = std::string(bos_token);
  context["eos_token"] = std::string(eos_token);
  return render(context);
}

const std::string& ChatTemplate::source() const { return program_->source; }

}  // namespace bitsplit
