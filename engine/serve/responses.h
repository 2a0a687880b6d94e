// The JSON bodies the server answers a generation request with: a whole response, or the chunks
// of a streamed one (server-sent events), shaped by the request's endpoint.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bitsplit/logprobs.h"
#include "bitsplit/openai_request.h"
#include "bitsplit/speculative.h"
#include "bitsplit/status.h"

namespace bitsplit::serve {

// What one generation produced (the server's run of a request).
struct Outcome {
  std::string text;
  std::string finish_reason = "length";
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::optional<SpeculativeResult> speculative;
  Status status;
  int64_t reused_tokens = 0;  // prompt tokens taken from a pooled cache
  double time_to_first_token = -1;
  std::vector<double> inter_token;
  bool cancelled = false;
  std::vector<TokenLogprob> logprobs;  // when the request asked for them (EOS left out)
  size_t logprobs_emitted = 0;         // how many of them went out with text (streaming)
};

// What sets one endpoint's responses apart: /v1/completions answers "text_completion" objects
// with the text in choices[].text and log-probabilities in the completions format;
// /v1/chat/completions answers "chat.completion" objects ("chat.completion.chunk" streamed) with
// the text in choices[].message (streamed: .delta, after a first chunk naming the assistant's
// role) and log-probabilities in the chat format. Everything else (usage, the `bitsplit`
// extension, the envelope) is the same for both.
class ResponseFormat {
 public:
  static const ResponseFormat& of(Endpoint endpoint);
  virtual ~ResponseFormat() = default;

  virtual const char* id_prefix() const = 0;     // of the response's id
  virtual const char* object() const = 0;        // a whole response's "object"
  virtual const char* chunk_object() const = 0;  // a streamed chunk's
  // A whole response's text, into its choice.
  virtual void put_text(nlohmann::json& choice, const std::string& text) const = 0;
  // A streamed chunk's piece of text, into its choice; nullopt: the last chunk's (no text).
  virtual void put_piece(nlohmann::json& choice, const std::optional<std::string>& piece) const = 0;
  // The choice of a chunk sent before any text; false: the endpoint sends none.
  virtual bool put_opening(nlohmann::json& choice) const = 0;
  // Log-probabilities of `tokens`; text offsets (completions) go on from `offset`.
  virtual nlohmann::json logprobs(std::span<const TokenLogprob> tokens, const PieceOf& piece_of,
                                  int64_t& offset) const = 0;
};

// The fields every response of one request carries.
struct ResponseHead {
  std::string id;
  int64_t created = 0;  // Unix seconds
  std::string model;    // the id the request was served under (the base's or a variant's)
};

// The bodies of one request's response in its endpoint's format. A copy per stream: it keeps
// the text offset of the log-probabilities sent so far.
class Responses {
 public:
  // `logprobs`: whether the request asked for log-probabilities.
  Responses(const ResponseFormat& format, ResponseHead head, bool logprobs, PieceOf piece_of)
      : format_(&format), head_(std::move(head)), logprobs_(logprobs), piece_of_(std::move(piece_of)) {}

  // A whole (not streamed) response.
  nlohmann::json whole(const Outcome& o) const;
  // Streamed: the chunk before any text (nullopt: none), a chunk per piece of text with the
  // log-probabilities of its tokens, the last chunk (the finish reason and the log-probabilities
  // of tokens whose text never went out), and the usage chunk (stream_options.include_usage).
  std::optional<nlohmann::json> opening_chunk();
  nlohmann::json piece_chunk(const std::string& piece, std::span<const TokenLogprob> logprobs);
  nlohmann::json last_chunk(const std::string& finish_reason, std::span<const TokenLogprob> logprobs);
  nlohmann::json usage_chunk(const Outcome& o) const;

 private:
  nlohmann::json envelope(const char* object, nlohmann::json choices) const;
  nlohmann::json chunk(nlohmann::json choice, std::span<const TokenLogprob> logprobs);

  const ResponseFormat* format_;
  ResponseHead head_;
  bool logprobs_;
  PieceOf piece_of_;
  int64_t text_offset_ = 0;  // bytes of the tokens whose log-probabilities went out
};

}  // namespace bitsplit::serve
