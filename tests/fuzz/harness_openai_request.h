// Fuzz harness for what `bitsplit serve` reads from the network (engine/serve/): the first byte picks
//  - 0, 1: parse_generation_request on the rest as the body of /v1/completions or
//    /v1/chat/completions. Asserts: an error is a 4xx with a message whose JSON error object
//    serialises (invalid UTF-8 replaced); a parsed request keeps the documented ranges
//    (max_tokens 1..kMaxTokensLimit, temperature 0..2, top_p in (0, 1], at most 4 stop strings,
//    each 1..256 bytes; chat: messages non-empty with string content).
//  - 2: StopMatcher over stop strings and text chunks from the rest (NUL separates the stops
//    from the text, \x01 separates stops and chunks), fed chunk by chunk until it stops.
//    Asserts: it stops after the first chunk that completes a stop string, and what it
//    released is the text up to the earliest stop string then; without one, the whole text.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

#include "bitsplit/openai_request.h"
#include "bitsplit/stop_strings.h"
#include "harness_common.h"

namespace bitsplit::fuzz {

inline void fuzz_request(std::string_view body, serve::Endpoint endpoint) {
  auto p = serve::parse_generation_request(body, endpoint);
  if (!p.request) {
    BITSPLIT_FUZZ_ASSERT(p.error.status >= 400 && p.error.status < 500, "a request error outside 4xx");
    BITSPLIT_FUZZ_ASSERT(!p.error.message.empty(), "a request error without a message");
    const std::string text = p.error.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    BITSPLIT_FUZZ_ASSERT(!text.empty(), "the error object does not serialise");
    return;
  }
  const serve::GenerationRequest& r = *p.request;
  if (r.max_tokens) {
    BITSPLIT_FUZZ_ASSERT(*r.max_tokens >= 1 && *r.max_tokens <= serve::kMaxTokensLimit, "max_tokens out of range");
  }
  BITSPLIT_FUZZ_ASSERT(r.sampling.temperature >= 0.0f && r.sampling.temperature <= 2.0f, "temperature out of range");
  BITSPLIT_FUZZ_ASSERT(r.sampling.top_p > 0.0f && r.sampling.top_p <= 1.0f, "top_p out of range");
  BITSPLIT_FUZZ_ASSERT(r.stop.size() <= serve::kMaxStopStrings, "too many stop strings");
  for (const auto& s : r.stop) {
    BITSPLIT_FUZZ_ASSERT(!s.empty() && s.size() <= serve::kMaxStopLength, "a stop string out of range");
  }
  if (endpoint == serve::Endpoint::kChat) {
    BITSPLIT_FUZZ_ASSERT(r.messages.is_array() && !r.messages.empty(), "chat without messages");
    for (const auto& m : r.messages) BITSPLIT_FUZZ_ASSERT(m["content"].is_string(), "message content not a string");
  }
}

inline std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out(1);
  for (char c : text) {
    if (c == sep) out.emplace_back();
    else out.back() += c;
  }
  return out;
}

inline void fuzz_stop_matcher(std::string_view input) {
  const size_t nul = input.find('\0');
  std::vector<std::string> stops;
  if (nul != std::string_view::npos) {
    for (auto& s : split(input.substr(0, nul), '\x01')) {
      if (!s.empty() && stops.size() < serve::kMaxStopStrings) stops.push_back(s);
    }
  }
  const std::vector<std::string> chunks = split(nul == std::string_view::npos ? input : input.substr(nul + 1), '\x01');
  serve::StopMatcher m(stops);
  // As generation does: text arrives chunk by chunk and stops at the first chunk after which
  // some stop string is complete; `consumed` is the text up to there.
  std::string consumed, before_last, out;
  for (const auto& c : chunks) {
    before_last = consumed;
    consumed += c;
    out += m.push(c);
    if (m.stopped()) break;
  }
  if (!m.stopped()) out += m.flush();
  auto first_stop = [&](const std::string& text) {
    size_t first = std::string::npos;
    for (const auto& s : stops) first = std::min(first, text.find(s));
    return first;
  };
  BITSPLIT_FUZZ_ASSERT(consumed.compare(0, out.size(), out) == 0, "released text is not a prefix of the text");
  if (m.stopped()) {
    BITSPLIT_FUZZ_ASSERT(first_stop(before_last) == std::string::npos, "a stop string was complete a chunk earlier");
    BITSPLIT_FUZZ_ASSERT(out.size() == first_stop(consumed), "did not cut at the earliest stop string");
  } else {
    BITSPLIT_FUZZ_ASSERT(first_stop(consumed) == std::string::npos && out == consumed,
                         "the text without a stop string did not come out whole");
  }
}

inline int run_openai_request(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: fuzz_request(rest, serve::Endpoint::kCompletions); break;
    case 1: fuzz_request(rest, serve::Endpoint::kChat); break;
    default: fuzz_stop_matcher(rest); break;
  }
  return 0;
}

}  // namespace bitsplit::fuzz
