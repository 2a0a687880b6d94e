// Log-probabilities of generated tokens for the OpenAI responses: each token's log p under the
// model's distribution at its position (log-softmax of the raw logits: temperature 1, no
// penalties or filters, as OpenAI and llama-server report them) and the most probable
// alternatives there, in the completions format (tokens / token_logprobs / top_logprobs /
// text_offset) and the chat format (content: token, logprob, bytes, top_logprobs).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace bitsplit::serve {

// The most alternatives a request may ask for (OpenAI's top_logprobs limit).
inline constexpr int32_t kMaxTopLogprobs = 20;

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most probable first (ties: the lower id)
};

// token's log-probability under softmax(logits), and the `top` most probable tokens'.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int32_t top);

// A token's text (the tokenizer's piece, possibly part of a UTF-8 character).
using PieceOf = std::function<std::string(int32_t)>;

// The completions format over `tokens`; text offsets count bytes of generated text from
// `offset`, which is left just past the last token (a stream's next chunk goes on from there).
nlohmann::json completion_logprobs(std::span<const TokenLogprob> tokens, const PieceOf& piece, int64_t& offset);
// The chat format ({"content": [...]}).
nlohmann::json chat_logprobs(std::span<const TokenLogprob> tokens, const PieceOf& piece);

}  // namespace bitsplit::serve
