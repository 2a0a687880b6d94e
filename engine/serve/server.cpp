// The OpenAI-compatible server (server.h) on the HTTP layer of http_server.h. A generation
// request is authorised on its head, parsed (its model resolved, its prompt's size bounded),
// admitted to a slot (admission.h), tokenized and checked, run on a session that starts from a
// kept cache of its tenant (prompt_cache_pool.h), and answered whole or streamed in its
// endpoint's format (responses.h).
#include "bitsplit/server.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>
#include <thread>

#include "admission.h"
#include "bitsplit/chat_prompt.h"
#include "bitsplit/logprobs.h"
#include "bitsplit/openai_request.h"
#include "bitsplit/stop_strings.h"
#include "bitsplit/tokenizer.h"
#include "prompt_cache_pool.h"
#include "responses.h"

namespace bitsplit {
extern const unsigned char kWebUiPage[];  // engine/serve/webui/index.html (CMake: bitsplit_embed_file)
extern const size_t kWebUiPageSize;
}  // namespace bitsplit

namespace bitsplit::serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Serialised with invalid UTF-8 (from a request's bytes or a token's piece) replaced by U+FFFD,
// never an exception.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(http::Response& res, int status, const json& body) {
  res.status = status;
  res.content_type = "application/json";
  res.body = dump(body);
}

void send_error(http::Response& res, const RequestError& e) { send_json(res, e.status, e.to_json()); }

// The OpenAI error type of an HTTP status the server answers.
const char* error_type(int status) {
  if (status == 401) return "authentication_error";
  if (status == 404) return "not_found_error";
  if (status == 503) return "unavailable_error";
  return status >= 500 ? "server_error" : "invalid_request_error";
}

// Bytes of text in a request's JSON value (its strings), a bound on what tokenizing it costs.
size_t text_bytes(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get_ref<const std::string&>().size();
  size_t n = 0;
  if (v.is_structured())
    for (const auto& item : v) n += text_bytes(item);  // depth bounded by the request parser
  return n;
}

std::string sse(const json& chunk) { return "data: " + dump(chunk) + "\n\n"; }

// Hands a piece of generated text to the client (streaming), with the log-probabilities of the
// tokens generated since the last piece; false when the client went away.
using EmitFn = std::function<bool(const std::string& piece, std::span<const TokenLogprob> logprobs)>;

// A request ready to run: its body parsed, its model and prompt resolved, its limits checked.
struct PreparedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  int tenant = 0;                          // the API key's index (server.h, "Tenants")
  GenerationRequest request;               // the body (sampling.seed drawn when not given)
  std::shared_ptr<const Variant> variant;  // null: the base
  std::string served_name;                 // the model id the response names
  std::vector<int32_t> prompt;
  int64_t context = 0;                     // tokens: the server's context, at most the model's
  int32_t max_tokens = 0;
  SessionOptions session;                  // the server's, with the request's overrides
};

// A prepared request, or the error that refuses it.
struct Prepared {
  std::optional<PreparedRequest> request;
  RequestError error;
};

}  // namespace

struct Server::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)),
        http(http_limits(options), [this](int status, const std::string& message) {
          metrics.request_rejected(status);
          return dump(RequestError{status, message, "", error_type(status)}.to_json());
        }),
        admission(options.parallel, options.queue, metrics),
        pool(options.prompt_cache < 0 ? std::max(1, options.parallel) : options.prompt_cache) {}

  // The HTTP layer's limits, its workers enough for every slot and queue place (a request waits
  // for its slot on its worker) and a few for refusals.
  static http::Limits http_limits(const ServerOptions& o) {
    http::Limits l = o.http;
    l.workers = std::max(1, o.parallel) + std::max(0, o.queue) + 4;
    l.worker_queue = 0;
    return l;
  }

  ServerOptions options;
  Metrics metrics;
  http::HttpServer http;

  // The model, once attached.
  LoadedModel* model = nullptr;
  size_t max_piece_bytes = 1;  // the longest token's text: a prompt of B bytes is >= B / this tokens
  VariantRegistry* variants = nullptr;
  std::optional<ChatTemplate> chat_template;
  std::string model_id;
  std::atomic<bool> ready{false};
  std::atomic<bool> draining{false};
  std::atomic<int> entering{0};  // generation requests between their start and holding a slot (or refused)

  // The admitted requests decode at once, each on its own thread; their forward passes run
  // combined (one pass over the residual for all of their rows).
  PassBatcher batcher;
  Admission admission;    // `parallel` requests decode, `queue` more wait
  PromptCachePool pool;   // finished requests' KV caches (ServerOptions::prompt_cache)
  std::atomic<uint64_t> next_id{1};

  // What the online controller learned, per variant ("" for the base): each request continues
  // it, so requests after the first do not start over with warm-up checks.
  std::mutex controller_mu;
  std::map<std::string, std::shared_ptr<ControllerMemory>> controller_memories;
  std::shared_ptr<ControllerMemory> controller_memory(const Variant* variant) {
    std::lock_guard<std::mutex> lock(controller_mu);
    auto& m = controller_memories[variant ? variant->name() : std::string()];
    if (!m) m = std::make_shared<ControllerMemory>();
    return m;
  }

  void refuse(http::Response& res, const RequestError& e) {
    metrics.request_rejected(e.status);
    send_error(res, e);
  }

  // The tenant (index of the API key) a request's Authorization header names; 0 without keys;
  // -1: no valid key.
  int tenant(const http::Request& req) const {
    if (options.api_keys.empty()) return 0;
    const std::string got = req.header("authorization");
    int found = -1;
    for (size_t k = 0; k < options.api_keys.size(); ++k) {
      const std::string want = "Bearer " + options.api_keys[k];
      // Compared in time independent of where they differ.
      unsigned diff = unsigned(got.size() != want.size());
      for (size_t i = 0; i < want.size(); ++i) diff |= unsigned(uint8_t(want[i]) ^ uint8_t(i < got.size() ? got[i] : 0));
      if (diff == 0) found = int(k);
    }
    return found;
  }

  void setup_routes();
  void handle_generate(const http::Request& req, http::Response& res, Endpoint endpoint);

  // Preparing a request, step by step; each step's error refuses it. The cheap steps come before
  // the request is admitted to a slot, tokenizing after.
  Prepared prepare_request(std::string_view body, Endpoint endpoint);
  std::optional<RequestError> bound_prompt(const PreparedRequest& p) const;
  // A request's context: the server's --ctx, at most the model's.
  int64_t context() const {
    const int64_t model_ctx = model->model.config().n_ctx_train;
    return options.ctx > 0 ? std::min(options.ctx, model_ctx) : model_ctx;
  }
  std::optional<RequestError> finish_preparing(PreparedRequest& p);
  std::optional<RequestError> resolve_model(PreparedRequest& p);
  std::optional<RequestError> tokenize_prompt(PreparedRequest& p);
  std::optional<RequestError> check_context(PreparedRequest& p);
  std::optional<RequestError> decoding_options(PreparedRequest& p);

  Outcome run(const PreparedRequest& p, Clock::time_point received, const EmitFn& emit);
  void finished(const PreparedRequest& p, const Outcome& o, Clock::time_point received, Admission::Slot& slot);
  void respond_whole(const PreparedRequest& p, const Responses& responses, Admission::Slot& slot,
                     Clock::time_point received, http::Response& res);
  void stream(const PreparedRequest& p, Responses responses, Admission::Slot& slot, Clock::time_point received,
              http::ChunkSink& sink);
};

Prepared Server::Impl::prepare_request(std::string_view body, Endpoint endpoint) {
  ParsedRequest parsed = parse_generation_request(body, endpoint);
  if (!parsed.request) return {std::nullopt, std::move(parsed.error)};
  PreparedRequest p;
  p.endpoint = endpoint;
  p.request = std::move(*parsed.request);
  if (auto e = resolve_model(p)) return {std::nullopt, std::move(*e)};
  if (auto e = bound_prompt(p)) return {std::nullopt, std::move(*e)};
  return {std::move(p), {}};
}

// Once admitted: the prompt tokenized, the context and decoding options checked.
std::optional<RequestError> Server::Impl::finish_preparing(PreparedRequest& p) {
  if (auto e = tokenize_prompt(p)) return e;
  if (auto e = check_context(p)) return e;
  return decoding_options(p);
}

// A prompt whose text cannot fit the context whatever its tokens (more bytes than the context
// times the longest token's) is refused before anything is spent tokenizing it.
std::optional<RequestError> Server::Impl::bound_prompt(const PreparedRequest& p) const {
  const GenerationRequest& r = p.request;
  const size_t bytes = p.endpoint == Endpoint::kChat ? text_bytes(r.messages) : r.prompt.size();
  const int64_t n_ctx = context();
  if (double(bytes) / double(max_piece_bytes) < double(n_ctx)) return std::nullopt;
  return RequestError{400, "the prompt's text is " + std::to_string(bytes) + " bytes, at least " +
                               std::to_string(bytes / max_piece_bytes) + " tokens; the context is " +
                               std::to_string(n_ctx) + " tokens",
                      p.endpoint == Endpoint::kChat ? "messages" : "prompt"};
}

// The base, or the registered variant the request names.
std::optional<RequestError> Server::Impl::resolve_model(PreparedRequest& p) {
  const std::string& name = p.request.model;
  p.served_name = model_id;
  if (name.empty() || name == model_id) return std::nullopt;
  if (!variants->contains(name)) {
    return RequestError{404, "the model '" + name + "' does not exist (GET /v1/models lists the base and its variants)",
                        "model", "not_found_error"};
  }
  auto v = variants->get(name);
  if (!v) return RequestError{500, v.status().message(), "model", "server_error"};
  p.variant = *v;
  p.served_name = name;
  return std::nullopt;
}

// The prompt's tokens: the chat template's conversation, a completion's token ids (checked
// against the vocabulary) or its text.
std::optional<RequestError> Server::Impl::tokenize_prompt(PreparedRequest& p) {
  GenerationRequest& r = p.request;
  if (p.endpoint == Endpoint::kChat) {
    if (!chat_template) {
      return RequestError{400, "this model has no chat template (tokenizer.chat_template); use /v1/completions, or "
                               "start the server with --chat-template FILE", "messages"};
    }
    auto encoded = encode_chat(*chat_template, *model->tokenizer, r.messages,
                               {.special_tokens_in_content = options.special_tokens_in_chat});
    if (!encoded) return RequestError{400, "the chat template refused the messages: " + encoded.status().message(), "messages"};
    p.prompt = std::move(*encoded);
  } else if (r.prompt_tokens) {
    const int64_t n_vocab = model->model.config().n_vocab;
    for (int32_t t : *r.prompt_tokens) {
      if (t >= n_vocab) {
        return RequestError{400, "'prompt' token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                                     std::to_string(n_vocab - 1) + ")", "prompt"};
      }
    }
    p.prompt = std::move(*r.prompt_tokens);
  } else {
    p.prompt = model->tokenizer->encode(r.prompt, {});
  }
  return std::nullopt;
}

// The prompt and max_tokens within the request's context (the server's --ctx, at most the
// model's); max_tokens defaults to OpenAI's 16 for completions, the rest of the context for chat.
std::optional<RequestError> Server::Impl::check_context(PreparedRequest& p) {
  const int64_t model_ctx = model->model.config().n_ctx_train;
  const int64_t n_ctx = context();
  const std::string whose = n_ctx < model_ctx ? "the server's context (--ctx)" : "the model's context";
  const std::string prompt_param = p.endpoint == Endpoint::kChat ? "messages" : "prompt";
  const std::vector<int32_t>& prompt = p.prompt;
  if (prompt.empty()) return RequestError{400, "the prompt is empty", prompt_param};
  if (int64_t(prompt.size()) >= n_ctx) {
    return RequestError{400, "the prompt is " + std::to_string(prompt.size()) + " tokens; " + whose + " is " +
                                 std::to_string(n_ctx) + " tokens", prompt_param};
  }
  const int64_t room = n_ctx - int64_t(prompt.size());
  const int32_t max_tokens = p.request.max_tokens.value_or(
      p.endpoint == Endpoint::kCompletions ? 16 : int32_t(std::min<int64_t>(room, kMaxTokensLimit)));
  if (max_tokens > room) {
    return RequestError{400, "prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens " +
                                 std::to_string(max_tokens) + " exceed " + whose + " of " + std::to_string(n_ctx) +
                                 " tokens", "max_tokens"};
  }
  p.context = n_ctx;
  p.max_tokens = max_tokens;
  return std::nullopt;
}

// How the request decodes: the server's session options with the request's speculative
// overrides, and its sampling (a fresh seed unless it gave one), both checked.
std::optional<RequestError> Server::Impl::decoding_options(PreparedRequest& p) {
  GenerationRequest& r = p.request;
  GenerationArgs args = options.generation;
  if (r.speculative) args.speculative = *r.speculative;
  if (r.budget) {
    auto b = spec::parse_budget(*r.budget);
    if (!b) return RequestError{400, b.status().message(), "bitsplit.budget"};
    args.budget = *b;
  }
  auto config = generation_config(args);
  if (!config) return RequestError{400, config.status().message(), "bitsplit"};
  SessionOptions so = config->session;
  if (!r.seed_given) r.sampling.seed = std::random_device{}();
  if (Status st = r.sampling.validate(); !st) return RequestError{400, st.message(), ""};
  Session check(model->model, p.variant, so);
  if (Status st = check.validate(); !st) return RequestError{400, st.message(), "bitsplit"};
  p.session = std::move(so);
  return std::nullopt;
}

Outcome Server::Impl::run(const PreparedRequest& p, Clock::time_point received, const EmitFn& emit) {
  const GenerationRequest& r = p.request;
  Outcome out;
  out.prompt_tokens = int64_t(p.prompt.size());
  const Tokenizer& tokenizer = *model->tokenizer;
  const int32_t eos = tokenizer.vocab().eos;
  Utf8StreamDecoder utf8;
  StopMatcher matcher(r.stop);
  Clock::time_point last = received;
  SessionOptions so = p.session;
  so.batcher = &batcher;
  if (r.logprobs) {
    so.on_logits = [&](int32_t token, std::span<const float> logits) {
      out.logprobs.push_back(token_logprob(logits, token, *r.logprobs));
    };
  }
  auto fresh_logprobs = [&] {
    const std::span<const TokenLogprob> fresh = std::span<const TokenLogprob>(out.logprobs).subspan(out.logprobs_emitted);
    out.logprobs_emitted = out.logprobs.size();
    return fresh;
  };
  const bool pooled = pool.enabled();
  so.reuse_prefix = pooled;
  so.controller_memory = controller_memory(p.variant.get());
  Session session(model->model, p.variant, so);
  if (pooled) session.adopt_cache(pool.take(p.tenant, p.variant, p.prompt));
  Sampler sampler(r.sampling);
  auto on_token = [&](int32_t token) {
    const auto now = Clock::now();
    const double since = std::chrono::duration<double>(now - last).count();
    if (out.time_to_first_token < 0) {
      out.time_to_first_token = std::chrono::duration<double>(now - received).count();
    } else {
      out.inter_token.push_back(since);
    }
    last = now;
    ++out.completion_tokens;
    if (token == eos) {
      if (r.logprobs && !out.logprobs.empty()) out.logprobs.pop_back();  // no text, not reported
      out.finish_reason = "stop";
      return true;
    }
    std::string piece = matcher.push(utf8.push(tokenizer.token_to_piece(token)));
    if (!piece.empty()) {
      out.text += piece;
      if (emit && !emit(piece, fresh_logprobs())) {
        out.cancelled = true;
        return false;
      }
    }
    if (matcher.stopped()) {
      out.finish_reason = "stop";
      return false;
    }
    return true;
  };
  Result<SessionResult> result = session.generate(p.prompt, p.max_tokens, eos, sampler, on_token);
  if (pooled) pool.give_back(p.tenant, p.variant, session.release_cache());
  if (!result) {
    out.status = result.status();
    return out;
  }
  out.reused_tokens = result->generation.reused_tokens;
  if (pooled) metrics.add_prefix_cache(int64_t(p.prompt.size()), out.reused_tokens);
  if (!matcher.stopped()) {
    std::string tail = matcher.push(utf8.flush());
    tail += matcher.flush();
    if (!tail.empty()) {
      out.text += tail;
      if (emit && !out.cancelled) emit(tail, fresh_logprobs());
    }
  }
  out.speculative = std::move(result->speculative);
  return out;
}

// A generation's end: /metrics counts it, and its KV reservation is given up.
void Server::Impl::finished(const PreparedRequest& p, const Outcome& o, Clock::time_point received,
                            Admission::Slot& slot) {
  metrics.request_served(p.served_name);
  metrics.request_finished(o.cancelled ? "abort" : o.finish_reason, o.prompt_tokens, o.completion_tokens,
                           o.time_to_first_token, std::chrono::duration<double>(Clock::now() - received).count(),
                           o.inter_token);
  if (o.speculative) {
    const auto& a = o.speculative->acceptance;
    metrics.add_speculative({a.checks, a.drafted, a.accepted, a.accepted_at_depth});
  }
  slot.release_kv();
}

void Server::Impl::respond_whole(const PreparedRequest& p, const Responses& responses, Admission::Slot& slot,
                                 Clock::time_point received, http::Response& res) {
  const Outcome o = run(p, received, nullptr);
  finished(p, o, received, slot);
  if (!o.status) return refuse(res, {500, o.status.message(), "", "server_error"});
  send_json(res, 200, responses.whole(o));
}

// A streamed response, written as the generation goes: one event per piece of text; it stops
// when the client goes away or stops reading.
void Server::Impl::stream(const PreparedRequest& p, Responses responses, Admission::Slot& slot,
                          Clock::time_point received, http::ChunkSink& sink) {
  auto write = [&](const std::string& s) { return sink.write(s); };
  if (auto opening = responses.opening_chunk(); opening && !write(sse(*opening))) return slot.release_kv();
  const Outcome o = run(p, received, [&](const std::string& piece, std::span<const TokenLogprob> logprobs) {
    return write(sse(responses.piece_chunk(piece, logprobs)));
  });
  finished(p, o, received, slot);
  if (o.cancelled) return;  // the client went away
  if (!o.status) {
    write(sse(RequestError{500, o.status.message(), "", "server_error"}.to_json()));
  } else {
    // Tokens whose text never went out (held back by the stop matcher, or a stop string
    // itself) still get their log-probabilities, in the last chunk.
    write(sse(responses.last_chunk(o.finish_reason, std::span<const TokenLogprob>(o.logprobs).subspan(o.logprobs_emitted))));
    if (p.request.include_usage) write(sse(responses.usage_chunk(o)));
  }
  write("data: [DONE]\n\n");
}

// Authorised (on its head), the model ready, the request parsed and bounded, a slot admitted, the
// prompt tokenized and checked: it runs, answered whole or streamed.
void Server::Impl::handle_generate(const http::Request& req, http::Response& res, Endpoint endpoint) {
  const Clock::time_point received = Clock::now();
  // Counted until it holds a slot (or is refused), so drain() sees it either here or in the slots.
  entering.fetch_add(1);
  struct Leave {
    std::atomic<int>& n;
    ~Leave() { n.fetch_sub(1); }
  } leave{entering};
  if (!ready.load()) {
    res.headers.emplace_back("Retry-After", "5");
    return refuse(res, {503, "the model is still loading", "", "unavailable_error"});
  }
  if (draining.load()) {
    res.headers.emplace_back("Retry-After", "1");
    return refuse(res, {503, "the server is draining (shutting down): retry on another replica", "",
                        "unavailable_error"});
  }
  Prepared prepared = prepare_request(req.body, endpoint);
  if (!prepared.request) return refuse(res, prepared.error);
  prepared.request->tenant = std::max(0, tenant(req));
  std::shared_ptr<Admission::Slot> slot = admission.acquire();
  if (!slot) {
    res.headers.emplace_back("Retry-After", "1");
    return refuse(res, {503, "the server is busy: every slot is decoding and the queue is full; retry later", "",
                        "unavailable_error"});
  }
  if (auto e = finish_preparing(*prepared.request)) return refuse(res, *e);
  auto p = std::make_shared<const PreparedRequest>(std::move(*prepared.request));
  slot->reserve_kv(int64_t(p->prompt.size()) + p->max_tokens, p->context);
  const ResponseFormat& format = ResponseFormat::of(endpoint);
  const Responses responses(format, {format.id_prefix() + std::to_string(next_id++), unix_now(), p->served_name},
                            p->request.logprobs.has_value(),
                            [this](int32_t token) { return model->tokenizer->token_to_piece(token); });
  if (!p->request.stream) return respond_whole(*p, responses, *slot, received, res);
  res.content_type = "text/event-stream";
  res.headers.emplace_back("Cache-Control", "no-cache");
  res.stream = [this, p, responses, slot, received](http::ChunkSink& sink) {
    stream(*p, responses, *slot, received, sink);
  };
}

void Server::Impl::setup_routes() {
  // Every route but /health needs a key (when there are keys), checked before the body is read.
  http.set_head_check([this](const http::Request& head, http::Response& res) {
    if (head.path == "/admin/drain" && options.api_keys.empty()) {
      refuse(res, {403, "/admin/drain needs the server to run with --api-key (else send it SIGTERM)", "",
                   "permission_error"});
      return false;
    }
    if (head.path == "/health" || (head.path == "/" && options.webui) || tenant(head) >= 0) return true;
    refuse(res, {401, "a valid API key is required (Authorization: Bearer KEY)", "", "authentication_error"});
    return false;
  });
  if (options.webui) {
    // The page: everything inline, so the policy lets it load nothing from anywhere else.
    http.route("GET", "/", [](const http::Request&, http::Response& res) {
      res.content_type = "text/html; charset=utf-8";
      res.body.assign(reinterpret_cast<const char*>(kWebUiPage), kWebUiPageSize);
      res.headers = {{"Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; "
                                                 "script-src 'unsafe-inline'; img-src 'self' data:"},
                     {"X-Content-Type-Options", "nosniff"},
                     {"Referrer-Policy", "no-referrer"},
                     {"Cache-Control", "no-cache"}};
    }, http::Dispatch::kInline);
  }
  http.route("GET", "/health", [this](const http::Request&, http::Response& res) {
    if (draining.load()) return send_json(res, 503, {{"status", "draining"}});
    if (ready.load()) return send_json(res, 200, {{"status", "ok"}});
    res.headers.emplace_back("Retry-After", "5");
    send_json(res, 503, {{"status", "loading"}});
  }, http::Dispatch::kInline);
  http.route("POST", "/admin/drain", [this](const http::Request&, http::Response& res) {
    const bool first = !draining.exchange(true);
    if (first && options.on_drain_request) options.on_drain_request();
    send_json(res, 202, {{"status", "draining"}, {"running", admission.running()}, {"waiting", admission.waiting()}});
  }, http::Dispatch::kInline);
  http.route("GET", "/metrics", [this](const http::Request&, http::Response& res) {
    const PassBatcher::Stats passes = batcher.stats();
    metrics.set_forward_passes(passes.passes, passes.sequences, passes.rows, passes.shared);
    metrics.set_http(http.counters());
    metrics.set_draining(draining.load());
    if (ready.load()) {
      std::vector<std::string> names = variants->names(), resident;
      for (const auto& n : names)
        if (variants->resident(n)) resident.push_back(n);
      metrics.set_variants(std::move(resident), std::move(names));
    }
    res.content_type = "text/plain; version=0.0.4";
    res.body = metrics.render();
  }, http::Dispatch::kInline);
  http.route("GET", "/v1/models", [this](const http::Request&, http::Response& res) {
    json data = json::array();
    if (ready.load()) {
      data.push_back({{"id", model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "bitsplit"}});
      for (const auto& name : variants->names()) {
        data.push_back({{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "bitsplit"}, {"parent", model_id}});
      }
    }
    send_json(res, 200, {{"object", "list"}, {"data", data}});
  }, http::Dispatch::kInline);
  http.route("POST", "/v1/completions", [this](const http::Request& req, http::Response& res) {
    handle_generate(req, res, Endpoint::kCompletions);
  }, http::Dispatch::kWorker, /*json_body=*/true);
  http.route("POST", "/v1/chat/completions", [this](const http::Request& req, http::Response& res) {
    handle_generate(req, res, Endpoint::kChat);
  }, http::Dispatch::kWorker, /*json_body=*/true);
}

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) { impl_->setup_routes(); }
Server::~Server() { stop(); }

void Server::attach(LoadedModel& model, VariantRegistry& variants, std::optional<ChatTemplate> chat_template) {
  Impl& m = *impl_;
  m.model = &model;
  m.variants = &variants;
  m.chat_template = std::move(chat_template);
  if (m.options.model_name.empty()) {
    const std::string& path = model.source->path();
    m.model_id = path.substr(path.find_last_of('/') + 1);
  } else {
    m.model_id = m.options.model_name;
  }
  m.metrics.set_model_name(m.model_id);
  // The longest token's text bounds how few tokens a prompt's bytes can be (bound_prompt).
  const Tokenizer& tok = *model.tokenizer;
  for (int32_t t = 0; t < int32_t(tok.vocab().size()); ++t)
    m.max_piece_bytes = std::max(m.max_piece_bytes, tok.token_to_piece(t).size());
  m.ready.store(true);
}

Status Server::bind() { return impl_->http.bind(impl_->options.host, impl_->options.port); }

int Server::port() const { return impl_->http.port(); }

Status Server::serve() { return impl_->http.serve(); }

void Server::stop() {
  if (impl_) impl_->http.stop();
}

bool Server::drain(std::chrono::milliseconds timeout, const std::function<bool()>& give_up) {
  Impl& m = *impl_;
  m.draining.store(true);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (m.entering.load() == 0 && m.admission.running() == 0 && m.admission.waiting() == 0) return true;
    if (Clock::now() >= deadline || (give_up && give_up())) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The last responses' bytes are on their way once drain() returned; a client that reads them
// slower than this loses the rest.
void Server::stop_gracefully() {
  if (impl_) impl_->http.stop_gracefully(std::chrono::seconds(10));
}

bool Server::draining() const { return impl_->draining.load(); }

const Metrics& Server::metrics() const { return impl_->metrics; }

}  // namespace bitsplit::serve
