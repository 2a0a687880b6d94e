// Request parsing (openai_request.h).
#include "bitsplit/openai_request.h"

#include <cmath>
#include <cstdio>

#include "bitsplit/logprobs.h"
#include "bitsplit/spec.h"

namespace bitsplit::serve {
namespace {

// Parsed in order (a template prints tool schemas and arguments as given), once.
using json = nlohmann::ordered_json;

struct Fail {
  RequestError error;
};

[[noreturn]] void fail(std::string param, std::string message, int status = 400) {
  throw Fail{RequestError{status, std::move(message), std::move(param)}};
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "a value of another type";
  }
}

// A number field in [lo, hi], or nullopt when absent or null.
std::optional<double> number(const json& o, const char* key, double lo, double hi) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) fail(key, std::string("'") + key + "' must be a number, not " + type_name(*it));
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    char bounds[64];
    std::snprintf(bounds, sizeof(bounds), "between %g and %g", lo, hi);
    fail(key, std::string("'") + key + "' is " + it->dump() + "; it must be " + bounds);
  }
  return v;
}

std::optional<int64_t> integer(const json& o, const char* key, int64_t lo, int64_t hi) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    fail(key, std::string("'") + key + "' must be an integer, not " + type_name(*it));
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(hi)) {
    fail(key, std::string("'") + key + "' is " + it->dump() + "; it must be between " + std::to_string(lo) + " and " +
                  std::to_string(hi));
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    fail(key, std::string("'") + key + "' is " + it->dump() + "; it must be between " + std::to_string(lo) + " and " +
                  std::to_string(hi));
  }
  return v;
}

std::optional<bool> boolean(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) fail(key, std::string("'") + key + "' must be a boolean, not " + type_name(*it));
  return it->get<bool>();
}

// Message content: a string, null, or an array of {"type": "text", "text": ...} parts.
std::string content_text(const json& content, const std::string& param) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) fail(param, "'content' must be a string or an array of text parts, not " + std::string(type_name(content)));
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string()) {
      fail(param, "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// The body: a JSON object, nested at most kMaxJsonDepth deep (a deeper value is refused while it
// is parsed: copying, converting or freeing it would recurse as deep).
json parse_body(std::string_view body) {
  struct TooDeep {};
  const json::parser_callback_t depth_limit = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) throw TooDeep{};
    return true;
  };
  json o;
  try {
    o = json::parse(body, depth_limit);
  } catch (const json::parse_error& e) {
    fail("", std::string("the body is not valid JSON: ") + e.what());
  } catch (const TooDeep&) {
    fail("", "the body nests JSON values more than " + std::to_string(kMaxJsonDepth) + " levels deep");
  }
  if (!o.is_object()) fail("", std::string("the body must be a JSON object, not ") + type_name(o));
  return o;
}

// Token ids of a prompt: integers 0..INT32_MAX, at least one.
std::vector<int32_t> token_ids(const json& a) {
  std::vector<int32_t> ids;
  for (const json& t : a) {
    if (!t.is_number_integer() && !t.is_number_unsigned()) {
      fail("prompt", "'prompt' token arrays hold integers, not " + std::string(type_name(t)));
    }
    if (t.is_number_unsigned() ? t.get<uint64_t>() > uint64_t(INT32_MAX) : t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
      fail("prompt", "'prompt' token id " + t.dump() + " is not a token id");
    }
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  if (ids.empty()) fail("prompt", "'prompt' must not be an empty token array");
  return ids;
}

// Completions: text, token ids [1, 2, 3], or one of them in an array (the batch form with one
// prompt).
void parse_prompt(const json& o, GenerationRequest& r) {
  auto it = o.find("prompt");
  if (it == o.end() || it->is_null()) fail("prompt", "'prompt' is required");
  if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    r.prompt = (*it)[0].get<std::string>();
  } else if (it->is_string()) {
    r.prompt = it->get<std::string>();
  } else if (it->is_array() && it->size() == 1 && (*it)[0].is_array()) {
    r.prompt_tokens = token_ids((*it)[0]);
  } else if (it->is_array() && !it->empty() && ((*it)[0].is_number())) {
    r.prompt_tokens = token_ids(*it);
  } else {
    fail("prompt", "'prompt' must be a string or an array of token ids (or an array of one of them; batches of "
                   "several prompts are not supported)");
  }
}

// Chat: the messages, each with a known role and its content as text.
void parse_messages(const json& o, GenerationRequest& r) {
  auto it = o.find("messages");
  if (it == o.end() || !it->is_array()) fail("messages", "'messages' is required and must be an array");
  if (it->empty()) fail("messages", "'messages' must not be empty");
  r.messages = json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) fail(param, param + " must be an object, not " + type_name(m));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) fail(param + ".role", param + ".role is required and must be a string");
    const std::string rs = role->get<std::string>();
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool" && rs != "developer") {
      fail(param + ".role", param + ".role '" + rs + "' is not one of system, developer, user, assistant, tool");
    }
    json copy = m;
    copy["content"] = content_text(m.contains("content") ? m["content"] : json(nullptr), param + ".content");
    r.messages.push_back(std::move(copy));
  }
}

// max_tokens, n and the sampling parameters.
void parse_sampling(const json& o, GenerationRequest& r) {
  if (auto v = integer(o, "max_completion_tokens", 1, kMaxTokensLimit)) r.max_tokens = int32_t(*v);
  if (auto v = integer(o, "max_tokens", 1, kMaxTokensLimit)) r.max_tokens = int32_t(*v);
  if (auto n = integer(o, "n", 1, 1000); n && *n != 1) fail("n", "'n' must be 1 (one choice per request)");
  // OpenAI's defaults: temperature 1, nucleus off; the engine's own filters off.
  r.sampling.temperature = float(number(o, "temperature", 0.0, 2.0).value_or(1.0));
  r.sampling.top_p = float(number(o, "top_p", 0.0, 1.0).value_or(1.0));
  if (r.sampling.top_p <= 0.0f) fail("top_p", "'top_p' must be greater than 0");
  r.sampling.top_k = 0;
  r.sampling.min_p = 0.0f;
  r.sampling.repeat_penalty = 1.0f;
  if (auto v = integer(o, "seed", INT64_MIN, INT64_MAX)) {
    r.sampling.seed = uint64_t(*v);
    r.seed_given = true;
  }
}

void parse_stop(const json& o, GenerationRequest& r) {
  auto it = o.find("stop");
  if (it == o.end() || it->is_null()) return;
  std::vector<json> items = it->is_array() ? std::vector<json>(it->begin(), it->end()) : std::vector<json>{*it};
  if (items.size() > kMaxStopStrings) fail("stop", "'stop' takes at most 4 strings");
  for (const auto& s : items) {
    if (!s.is_string()) fail("stop", "'stop' must be a string or an array of strings");
    const std::string text = s.get<std::string>();
    if (text.empty()) fail("stop", "'stop' strings must not be empty");
    if (text.size() > kMaxStopLength) fail("stop", "'stop' strings are at most 256 bytes");
    r.stop.push_back(text);
  }
}

void parse_streaming(const json& o, GenerationRequest& r) {
  r.stream = boolean(o, "stream").value_or(false);
  if (auto it = o.find("stream_options"); it != o.end() && !it->is_null()) {
    if (!it->is_object()) fail("stream_options", "'stream_options' must be an object");
    r.include_usage = boolean(*it, "include_usage").value_or(false);
  }
}

// Completions take `logprobs` N (alternatives per token), chat takes `logprobs` true and
// `top_logprobs` N.
void parse_logprobs(const json& o, Endpoint endpoint, GenerationRequest& r) {
  if (endpoint == Endpoint::kCompletions) {
    if (auto v = integer(o, "logprobs", 0, kMaxTopLogprobs)) r.logprobs = int32_t(*v);
  } else {
    const bool wanted = boolean(o, "logprobs").value_or(false);
    const auto top = integer(o, "top_logprobs", 0, kMaxTopLogprobs);
    if (top && !wanted) fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (wanted) r.logprobs = int32_t(top.value_or(0));
  }
}

// The "bitsplit" extension: speculative decoding on or off, and the draft budget.
void parse_extension(const json& o, GenerationRequest& r) {
  auto it = o.find("bitsplit");
  if (it == o.end() || it->is_null()) return;
  if (!it->is_object()) fail("bitsplit", "'bitsplit' (the speculative-decoding extension) must be an object");
  r.speculative = boolean(*it, "speculative");
  if (auto b = it->find("budget"); b != it->end() && !b->is_null()) {
    const std::string text = b->is_string() ? b->get<std::string>() : b->is_number_integer() ? b->dump() : "";
    auto parsed = spec::parse_budget(text);
    if (!parsed) fail("bitsplit.budget", "'bitsplit.budget': " + parsed.status().message());
    r.budget = text;
  }
}

// The steps in the order their errors take precedence (a request with several gets the first).
GenerationRequest parse(std::string_view body, Endpoint endpoint) {
  const json o = parse_body(body);
  GenerationRequest r;
  r.endpoint = endpoint;
  if (auto it = o.find("model"); it != o.end() && !it->is_null()) {
    if (!it->is_string()) fail("model", std::string("'model' must be a string, not ") + type_name(*it));
    r.model = it->get<std::string>();
  }
  if (endpoint == Endpoint::kCompletions) {
    parse_prompt(o, r);
  } else {
    parse_messages(o, r);
  }
  parse_sampling(o, r);
  parse_stop(o, r);
  parse_streaming(o, r);
  parse_logprobs(o, endpoint, r);
  parse_extension(o, r);
  return r;
}

}  // namespace

nlohmann::json RequestError::to_json() const {
  return {{"error",
           {{"message", message}, {"type", type}, {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
            {"code", nullptr}}}};
}

ParsedRequest parse_generation_request(std::string_view body, Endpoint endpoint) {
  try {
    return {parse(body, endpoint), {}};
  } catch (const Fail& f) {
    return {std::nullopt, f.error};
  } catch (const nlohmann::json::exception& e) {
    return {std::nullopt, RequestError{400, std::string("malformed request: ") + e.what(), ""}};
  }
}

}  // namespace bitsplit::serve
