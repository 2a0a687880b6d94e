// The C API's text functions: tokenizing, detokenizing, and chat prompts rendered and tokenized by
// the engine's chat-template interpreter (bitsplit.h: Tokens, Chat prompts).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "bitsplit/chat_prompt.h"
#include "bitsplit/chat_template.h"
#include "capi_internal.h"

using namespace bitsplit;
using namespace bitsplit::capi;

extern "C" {

bitsplit_status bitsplit_tokenize(const bitsplit_model* m, const char* text, size_t length, int32_t add_special,
                                  int32_t parse_special, bitsplit_token* tokens, size_t capacity, size_t* n_tokens) {
  return guarded([&] {
    if (!m || (!text && length > 0) || !n_tokens || (!tokens && capacity > 0)) {
      return invalid("bitsplit_tokenize: model, text and n_tokens must not be NULL");
    }
    const std::vector<int32_t> ids = m->loaded.tokenizer->encode(
        std::string_view(text ? text : "", length), {.add_special = add_special != 0, .parse_special = parse_special != 0});
    *n_tokens = ids.size();
    if (ids.size() > capacity) {
      return fail(BITSPLIT_ERR_BUFFER_TOO_SMALL, "the text has " + std::to_string(ids.size()) + " tokens, the buffer room for " +
                                                     std::to_string(capacity));
    }
    std::copy(ids.begin(), ids.end(), tokens);
    return BITSPLIT_OK;
  });
}

bitsplit_status bitsplit_detokenize(const bitsplit_model* m, const bitsplit_token* tokens, size_t n, char* buf,
                                    size_t capacity, size_t* length) {
  return guarded([&] {
    if (!m || (!tokens && n > 0) || !length || (!buf && capacity > 0)) {
      return invalid("bitsplit_detokenize: model, tokens and length must not be NULL");
    }
    const int64_t vocab = m->loaded.model.config().n_vocab;
    std::string text;
    for (size_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || tokens[i] >= vocab) {
        return invalid("token " + std::to_string(tokens[i]) + " is outside the vocabulary (0.." + std::to_string(vocab - 1) + ")");
      }
      text += m->loaded.tokenizer->token_to_piece(tokens[i]);
    }
    *length = text.size();
    if (text.size() > capacity) {
      return fail(BITSPLIT_ERR_BUFFER_TOO_SMALL, "the text needs " + std::to_string(text.size()) + " bytes");
    }
    std::memcpy(buf, text.data(), text.size());
    return BITSPLIT_OK;
  });
}

void bitsplit_chat_params_init(bitsplit_chat_params* p) {
  if (!p) return;
  *p = bitsplit_chat_params{};
  p->size = sizeof(*p);
  p->add_generation_prompt = 1;
}


}  // extern "C"

namespace {

// What both chat entry points share: the parameters, the template and the messages, checked.
struct ChatInput {
  bitsplit_chat_params params;
  std::optional<ChatTemplate> chat_template;
  nlohmann::ordered_json messages;
};

bitsplit_status read_chat_input(const bitsplit_model* m, const char* messages_json, size_t length,
                                const bitsplit_chat_params* given, const char* fn, ChatInput& in) {
  if (!m || (!messages_json && length > 0)) return invalid(std::string(fn) + ": model and messages_json must not be NULL");
  bitsplit_chat_params defaults;
  bitsplit_chat_params_init(&defaults);
  const Result<bitsplit_chat_params> read = read_params(given, defaults);
  if (!read) return invalid(read.status().message());
  in.params = *read;
  std::string source;
  if (in.params.chat_template) {
    source = in.params.chat_template;
  } else if (const char* own = bitsplit_model_chat_template(m)) {
    source = own;
  } else {
    return fail(BITSPLIT_ERR_NOT_FOUND, "the model has no chat template (tokenizer.chat_template): give one in "
                                        "bitsplit_chat_params.chat_template");
  }
  auto parsed = ChatTemplate::parse(source);
  if (!parsed) return invalid("the chat template cannot be used: " + parsed.status().message());
  in.chat_template.emplace(std::move(*parsed));
  in.messages = nlohmann::ordered_json::parse(std::string_view(messages_json ? messages_json : "", length), nullptr,
                                              /*allow_exceptions=*/false);
  if (in.messages.is_discarded()) return invalid("messages_json is not valid JSON");
  if (!in.messages.is_array()) return invalid("messages_json must be a JSON array of messages");
  for (size_t i = 0; i < in.messages.size(); ++i) {
    if (!in.messages[i].is_object()) return invalid("message " + std::to_string(i) + " is not a JSON object");
  }
  return BITSPLIT_OK;
}

}  // namespace

extern "C" {

bitsplit_status bitsplit_chat_render(const bitsplit_model* m, const char* messages_json, size_t length,
                                     const bitsplit_chat_params* params, char* buf, size_t capacity, size_t* length_out) {
  return guarded([&] {
    if (!length_out || (!buf && capacity > 0)) return invalid("bitsplit_chat_render: length_out must not be NULL");
    ChatInput in;
    if (bitsplit_status st = read_chat_input(m, messages_json, length, params, "bitsplit_chat_render", in); st) return st;
    // The BOS and EOS texts as encode_chat (the server's) hands them to the template.
    const Tokenizer& tokenizer = *m->loaded.tokenizer;
    const auto& vocab = tokenizer.vocab();
    const std::string bos = vocab.bos >= 0 ? tokenizer.token_to_piece(vocab.bos) : "";
    const std::string eos = vocab.eos >= 0 ? tokenizer.token_to_piece(vocab.eos) : "";
    auto text = in.chat_template->render_chat(in.messages, in.params.add_generation_prompt != 0, bos, eos);
    if (!text) return invalid("the chat template refused the conversation: " + text.status().message());
    return copy_out(std::vector<char>(text->begin(), text->end()), buf, capacity, length_out, "the rendered conversation");
  });
}

bitsplit_status bitsplit_chat_tokenize(const bitsplit_model* m, const char* messages_json, size_t length,
                                       const bitsplit_chat_params* params, bitsplit_token* tokens, size_t capacity,
                                       size_t* n_tokens) {
  return guarded([&] {
    if (!n_tokens || (!tokens && capacity > 0)) return invalid("bitsplit_chat_tokenize: n_tokens must not be NULL");
    ChatInput in;
    if (bitsplit_status st = read_chat_input(m, messages_json, length, params, "bitsplit_chat_tokenize", in); st) return st;
    auto ids = serve::encode_chat(*in.chat_template, *m->loaded.tokenizer, in.messages,
                                  {.add_generation_prompt = in.params.add_generation_prompt != 0,
                                   .special_tokens_in_content = in.params.special_tokens_in_content != 0});
    if (!ids) return invalid("the chat template refused the conversation: " + ids.status().message());
    return copy_out(*ids, tokens, capacity, n_tokens, "the conversation's tokens");
  });
}

}  // extern "C"
