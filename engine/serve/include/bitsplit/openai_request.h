// Requests of the OpenAI HTTP API (POST /v1/completions and /v1/chat/completions) parsed and
// checked into a GenerationRequest. Pure functions over the body text, so they are fuzzed and
// tested without a server; every error names the field (`param`) and what is wrong, and the
// server answers it with 400 and an OpenAI-style error object.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bitsplit/sampling.h"
#include "bitsplit/status.h"

namespace bitsplit::serve {

enum class Endpoint { kCompletions, kChat };

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;               // empty: the base model
  std::string prompt;              // completions
  std::optional<std::vector<int32_t>> prompt_tokens;  // completions given token ids (checked against the vocabulary later)
  // chat: the messages as given, keys in their order (a template prints tool schemas as given),
  // content normalised to text
  nlohmann::ordered_json messages;
  std::optional<int32_t> max_tokens;
  SamplingParams sampling;         // OpenAI defaults: temperature 1, top_p 1, no top-k / min-p
  bool seed_given = false;
  std::vector<std::string> stop;   // at most 4 strings
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  // The "bitsplit" extension object: speculative decoding per request.
  std::optional<bool> speculative;
  std::optional<std::string> budget;  // "auto" or 1..64
  // Log-probabilities wanted, with this many alternatives per token (0..kMaxTopLogprobs).
  std::optional<int32_t> logprobs;
};

// A request error: the HTTP status, the message and the offending field.
struct RequestError {
  int status = 400;
  std::string message;
  std::string param;  // empty: none
  std::string type = "invalid_request_error";
  nlohmann::json to_json() const;  // {"error": {"message", "type", "param", "code"}}
};

// Parses a request body; the error alternative carries the status and the field.
struct ParsedRequest {
  std::optional<GenerationRequest> request;
  RequestError error;
};
ParsedRequest parse_generation_request(std::string_view body, Endpoint endpoint);

// Limits the parser applies.
inline constexpr int32_t kMaxTokensLimit = 1 << 20;
// JSON nesting a request may use (chat messages with structured content need a handful).
inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxStopStrings = 4;
inline constexpr size_t kMaxStopLength = 256;

}  // namespace bitsplit::serve
