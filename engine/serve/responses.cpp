// Response bodies of the completions and chat endpoints (responses.h).
#include "responses.h"

namespace bitsplit::serve {
namespace {

using nlohmann::json;

class CompletionsFormat final : public ResponseFormat {
 public:
  const char* id_prefix() const override { return "cmpl-"; }
  const char* object() const override { return "text_completion"; }
  const char* chunk_object() const override { return "text_completion"; }
  void put_text(json& choice, const std::string& text) const override { choice["text"] = text; }
  void put_piece(json& choice, const std::optional<std::string>& piece) const override {
    choice["text"] = piece.value_or("");
  }
  bool put_opening(json&) const override { return false; }
  json logprobs(std::span<const TokenLogprob> tokens, const PieceOf& piece_of, int64_t& offset) const override {
    return completion_logprobs(tokens, piece_of, offset);
  }
};

class ChatFormat final : public ResponseFormat {
 public:
  const char* id_prefix() const override { return "chatcmpl-"; }
  const char* object() const override { return "chat.completion"; }
  const char* chunk_object() const override { return "chat.completion.chunk"; }
  void put_text(json& choice, const std::string& text) const override {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  }
  void put_piece(json& choice, const std::optional<std::string>& piece) const override {
    choice["delta"] = piece ? json{{"content", *piece}} : json::object();
  }
  bool put_opening(json& choice) const override {
    choice["delta"] = {{"role", "assistant"}, {"content", ""}};
    return true;
  }
  json logprobs(std::span<const TokenLogprob> tokens, const PieceOf& piece_of, int64_t&) const override {
    return chat_logprobs(tokens, piece_of);
  }
};

json choice_head(const std::optional<std::string>& finish_reason) {
  return {{"index", 0}, {"finish_reason", finish_reason ? json(*finish_reason) : json(nullptr)}};
}

json usage(const Outcome& o) {
  return {{"prompt_tokens", o.prompt_tokens}, {"completion_tokens", o.completion_tokens},
          {"total_tokens", o.prompt_tokens + o.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", o.reused_tokens}}}};
}

// The `bitsplit` extension: whether the request decoded speculatively, and how well.
json extension(const Outcome& o) {
  json e = {{"speculative", o.speculative.has_value()}};
  if (o.speculative) {
    const auto& a = o.speculative->acceptance;
    e["checks"] = a.checks;
    e["drafted_tokens"] = a.drafted;
    e["accepted_tokens"] = a.accepted;
    e["tokens_per_check"] = a.tokens_per_check();
    e["lookup_drafted_tokens"] = a.lookup_drafted;
    e["lookup_accepted_tokens"] = a.lookup_accepted;
    // Per draft depth d (index d - 1): checks whose accepted path reached it, and checks that
    // drafted that deep; the time spent drafting and verifying; the setting it ended at.
    e["accepted_per_depth"] = a.accepted_at_depth;
    e["drafted_per_depth"] = a.drafted_at_depth;
    e["draft_seconds"] = a.draft_seconds;
    e["verify_seconds"] = a.verify_seconds;
    e["final_setting"] = o.speculative->final_setting;
  }
  return e;
}

}  // namespace

const ResponseFormat& ResponseFormat::of(Endpoint endpoint) {
  static const CompletionsFormat completions;
  static const ChatFormat chat;
  if (endpoint == Endpoint::kChat) return chat;
  return completions;
}

json Responses::envelope(const char* object, json choices) const {
  return {{"id", head_.id}, {"object", object}, {"created", head_.created}, {"model", head_.model},
          {"choices", std::move(choices)}};
}

json Responses::whole(const Outcome& o) const {
  json choice = choice_head(o.finish_reason);
  format_->put_text(choice, o.text);
  int64_t offset = 0;
  choice["logprobs"] = logprobs_ ? format_->logprobs(o.logprobs, piece_of_, offset) : json(nullptr);
  json body = envelope(format_->object(), json::array({choice}));
  body["usage"] = usage(o);
  body["bitsplit"] = extension(o);
  return body;
}

json Responses::chunk(json choice, std::span<const TokenLogprob> logprobs) {
  choice["logprobs"] = logprobs_ && !logprobs.empty() ? format_->logprobs(logprobs, piece_of_, text_offset_) : json(nullptr);
  return envelope(format_->chunk_object(), json::array({std::move(choice)}));
}

std::optional<json> Responses::opening_chunk() {
  json choice = choice_head(std::nullopt);
  if (!format_->put_opening(choice)) return std::nullopt;
  return chunk(std::move(choice), {});
}

json Responses::piece_chunk(const std::string& piece, std::span<const TokenLogprob> logprobs) {
  json choice = choice_head(std::nullopt);
  format_->put_piece(choice, piece);
  return chunk(std::move(choice), logprobs);
}

json Responses::last_chunk(const std::string& finish_reason, std::span<const TokenLogprob> logprobs) {
  json choice = choice_head(finish_reason);
  format_->put_piece(choice, std::nullopt);
  return chunk(std::move(choice), logprobs);
}

json Responses::usage_chunk(const Outcome& o) const {
  json body = envelope(format_->chunk_object(), json::array());
  body["usage"] = usage(o);
  body["bitsplit"] = extension(o);
  return body;
}

}  // namespace bitsplit::serve
