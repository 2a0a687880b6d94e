// The OpenAI-compatible server (server.h) on cpp-httplib.
#include "bitsplit/server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>

#include "bitsplit/chat_prompt.h"
#include "bitsplit/logprobs.h"
#include "bitsplit/openai_request.h"
#include "bitsplit/stop_strings.h"
#include "bitsplit/tokenizer.h"

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

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const RequestError& e) { send_json(res, e.status, e.to_json()); }

std::string sse(const json& chunk) { return "data: " + dump(chunk) + "\n\n"; }

// What one generation produced.
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

// Hands a piece of generated text to the client (streaming), with the log-probabilities of the
// tokens generated since the last piece; false when the client went away.
using EmitFn = std::function<bool(const std::string& piece, std::span<const TokenLogprob> logprobs)>;

}  // namespace

struct Server::Impl {
  explicit Impl(ServerOptions o) : options(std::move(o)), free_slots(std::max(1, options.parallel)) {}

  ServerOptions options;
  httplib::Server http;
  Metrics metrics;
  int bound_port = 0;

  // The model, once attached.
  std::mutex attach_mu;
  LoadedModel* model = nullptr;
  VariantRegistry* variants = nullptr;
  std::optional<ChatTemplate> chat_template;
  std::string model_id;
  std::atomic<bool> ready{false};

  // The admitted requests decode at once, each on its own thread; their forward passes run
  // combined (one pass over the residual for all of their rows).
  PassBatcher batcher;
  // Admission: `free_slots` requests decode; `waiting` queue.
  std::mutex slot_mu;
  std::condition_variable slot_cv;
  int free_slots;
  int waiting = 0;
  std::atomic<uint64_t> next_id{1};
  std::atomic<int64_t> kv_reserved{0};  // KV slots of the running requests (prompt + max_tokens)

  // Finished requests' KV caches (ServerOptions::prompt_cache). A request takes the one whose
  // tokens share the longest prefix with its prompt under the same variant, if any does, and
  // gives its own back when it ends (the least recently used goes when the pool is full): the
  // pool and the running requests hold at most prompt_cache + parallel caches.
  struct Pooled {
    bool base = true;                      // made by the base model (no variant)
    std::weak_ptr<const Variant> variant;  // else by this one (expired: it is gone)
    Session::Kept kept;
    uint64_t used = 0;
  };
  std::mutex pool_mu;
  std::vector<Pooled> pool;
  uint64_t pool_clock = 0;

  int pool_capacity() const { return options.prompt_cache < 0 ? std::max(1, options.parallel) : options.prompt_cache; }

  Session::Kept take_cache(const std::shared_ptr<const Variant>& variant, std::span<const int32_t> prompt) {
    std::vector<Pooled> gone;  // freed after the lock (a cache can be hundreds of MB)
    std::lock_guard<std::mutex> lock(pool_mu);
    // Caches of variants that no longer exist can never be taken.
    for (size_t i = pool.size(); i-- > 0;) {
      if (!pool[i].base && pool[i].variant.expired()) {
        gone.push_back(std::move(pool[i]));
        pool.erase(pool.begin() + int64_t(i));
      }
    }
    size_t pick = 0;
    int64_t best = 0;
    for (size_t i = 0; i < pool.size(); ++i) {
      const Pooled& p = pool[i];
      const bool same = variant ? !p.base && p.variant.lock() == variant : p.base;
      const int64_t shared = same ? reusable_prefix(p.kept.tokens, prompt) : 0;
      if (shared > best) best = shared, pick = i;
    }
    if (best == 0) return {};
    Session::Kept k = std::move(pool[pick].kept);
    pool.erase(pool.begin() + int64_t(pick));
    return k;
  }

  void return_cache(const std::shared_ptr<const Variant>& variant, Session::Kept kept) {
    if (!kept.cache || kept.tokens.empty()) return;  // (a failed generation keeps no tokens)
    std::optional<Pooled> gone;  // freed after the lock
    std::lock_guard<std::mutex> lock(pool_mu);
    const size_t capacity = size_t(pool_capacity());
    if (capacity == 0) return;
    if (pool.size() >= capacity) {  // the least recently used goes
      auto oldest = std::min_element(pool.begin(), pool.end(), [](const Pooled& a, const Pooled& b) { return a.used < b.used; });
      gone.emplace(std::move(*oldest));
      pool.erase(oldest);
    }
    pool.push_back({variant == nullptr, variant, std::move(kept), ++pool_clock});
  }

  struct SlotLease {
    Impl* impl;
    ~SlotLease() { impl->release_slot(); }
  };

  // A slot, waiting in the queue if need be; null when the queue is full.
  std::shared_ptr<SlotLease> acquire_slot() {
    std::unique_lock<std::mutex> lock(slot_mu);
    if (free_slots == 0 && waiting >= options.queue) return nullptr;
    ++waiting;
    metrics.request_waiting(+1);
    slot_cv.wait(lock, [&] { return free_slots > 0; });
    --waiting;
    --free_slots;
    metrics.request_waiting(-1);
    metrics.request_running(+1);
    return std::shared_ptr<SlotLease>(new SlotLease{this});
  }
  void release_slot() {
    {
      std::lock_guard<std::mutex> lock(slot_mu);
      ++free_slots;
    }
    metrics.request_running(-1);
    slot_cv.notify_one();
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (options.api_key.empty()) return true;
    const std::string want = "Bearer " + options.api_key;
    const std::string got = req.get_header_value("Authorization");
    // Compared in time independent of where they differ.
    bool same = got.size() == want.size();
    unsigned diff = 0;
    for (size_t i = 0; i < want.size(); ++i) diff |= unsigned(uint8_t(want[i]) ^ uint8_t(i < got.size() ? got[i] : 0));
    if (same && diff == 0) return true;
    RequestError e{401, "a valid API key is required (Authorization: Bearer KEY)", "", "authentication_error"};
    metrics.request_rejected(401);
    send_error(res, e);
    return false;
  }

  void setup_routes();
  void handle_generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  Outcome run(std::shared_ptr<const Variant> variant, const SessionOptions& so,
              const std::vector<int32_t>& prompt, int32_t max_tokens, const SamplingParams& sampling,
              const std::vector<std::string>& stop, std::optional<int32_t> logprobs, Clock::time_point received,
              const EmitFn& emit);
};

Outcome Server::Impl::run(std::shared_ptr<const Variant> variant, const SessionOptions& so,
                          const std::vector<int32_t>& prompt, int32_t max_tokens, const SamplingParams& sampling,
                          const std::vector<std::string>& stop, std::optional<int32_t> logprobs,
                          Clock::time_point received, const EmitFn& emit) {
  Outcome out;
  out.prompt_tokens = int64_t(prompt.size());
  const Tokenizer& tokenizer = *model->tokenizer;
  const int32_t eos = tokenizer.vocab().eos;
  Utf8StreamDecoder utf8;
  StopMatcher matcher(stop);
  Clock::time_point last = received;
  SessionOptions options = so;
  options.batcher = &batcher;
  if (logprobs) {
    options.on_logits = [&](int32_t token, std::span<const float> logits) {
      out.logprobs.push_back(token_logprob(logits, token, *logprobs));
    };
  }
  auto fresh_logprobs = [&] {
    const std::span<const TokenLogprob> fresh = std::span<const TokenLogprob>(out.logprobs).subspan(out.logprobs_emitted);
    out.logprobs_emitted = out.logprobs.size();
    return fresh;
  };
  const bool pooled = pool_capacity() > 0;
  options.reuse_prefix = pooled;
  Session session(model->model, variant, options);
  if (pooled) session.adopt_cache(take_cache(variant, prompt));
  Sampler sampler(sampling);
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
      if (logprobs && !out.logprobs.empty()) out.logprobs.pop_back();  // no text, not reported
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
  Result<SessionResult> r = session.generate(prompt, max_tokens, eos, sampler, on_token);
  if (pooled) return_cache(variant, session.release_cache());
  if (!r) {
    out.status = r.status();
    return out;
  }
  out.reused_tokens = r->generation.reused_tokens;
  if (pooled) metrics.add_prefix_cache(int64_t(prompt.size()), out.reused_tokens);
  if (!matcher.stopped()) {
    std::string tail = matcher.push(utf8.flush());
    tail += matcher.flush();
    if (!tail.empty()) {
      out.text += tail;
      if (emit && !out.cancelled) emit(tail, fresh_logprobs());
    }
  }
  out.speculative = std::move(r->speculative);
  return out;
}

void Server::Impl::handle_generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  const Clock::time_point received = Clock::now();
  if (!authorized(req, res)) return;
  auto fail = [&](RequestError e) {
    metrics.request_rejected(e.status);
    send_error(res, e);
  };
  if (!ready.load()) {
    res.set_header("Retry-After", "5");
    return fail({503, "the model is still loading", "", "unavailable_error"});
  }
  ParsedRequest parsed = parse_generation_request(req.body, endpoint);
  if (!parsed.request) return fail(parsed.error);
  GenerationRequest r = std::move(*parsed.request);

  std::shared_ptr<const Variant> variant;
  std::string served_name = model_id;
  if (!r.model.empty() && r.model != model_id) {
    if (!variants->contains(r.model)) {
      return fail({404, "the model '" + r.model + "' does not exist (GET /v1/models lists the base and its variants)",
                   "model", "not_found_error"});
    }
    auto v = variants->get(r.model);
    if (!v) return fail({500, v.status().message(), "model", "server_error"});
    variant = *v;
    served_name = r.model;
  }

  std::vector<int32_t> prompt;
  if (endpoint == Endpoint::kCompletions && r.prompt_tokens) {
    const int64_t n_vocab = model->model.config().n_vocab;
    for (int32_t t : *r.prompt_tokens) {
      if (t >= n_vocab) {
        return fail({400, "'prompt' token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                              std::to_string(n_vocab - 1) + ")", "prompt"});
      }
    }
    prompt = std::move(*r.prompt_tokens);
  } else if (endpoint == Endpoint::kCompletions) {
    prompt = model->tokenizer->encode(r.prompt, {});
  } else {
    if (!chat_template) {
      return fail({400, "this model has no chat template (tokenizer.chat_template); use /v1/completions, or start the "
                        "server with --chat-template FILE", "messages"});
    }
    auto encoded = encode_chat(*chat_template, *model->tokenizer, r.messages);
    if (!encoded) return fail({400, "the chat template refused the messages: " + encoded.status().message(), "messages"});
    prompt = std::move(*encoded);
  }
  const int64_t model_ctx = model->model.config().n_ctx_train;
  const int64_t n_ctx = options.ctx > 0 ? std::min(options.ctx, model_ctx) : model_ctx;
  const std::string whose = n_ctx < model_ctx ? "the server's context (--ctx)" : "the model's context";
  const std::string prompt_param = endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (prompt.empty()) return fail({400, "the prompt is empty", prompt_param});
  if (int64_t(prompt.size()) >= n_ctx) {
    return fail({400, "the prompt is " + std::to_string(prompt.size()) + " tokens; " + whose + " is " +
                          std::to_string(n_ctx) + " tokens", prompt_param});
  }
  const int64_t room = n_ctx - int64_t(prompt.size());
  const int32_t max_tokens = r.max_tokens.value_or(endpoint == Endpoint::kCompletions ? 16 : int32_t(std::min<int64_t>(room, kMaxTokensLimit)));
  if (max_tokens > room) {
    return fail({400, "prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens " + std::to_string(max_tokens) +
                          " exceed " + whose + " of " + std::to_string(n_ctx) + " tokens", "max_tokens"});
  }
  SessionOptions so = options.session;
  if (r.speculative) so.speculative = *r.speculative;
  if (r.budget) {
    auto b = spec::parse_budget(*r.budget);
    if (!b) return fail({400, b.status().message(), "bitsplit.budget"});
    so.budget = *b;
  }
  if (!r.seed_given) r.sampling.seed = std::random_device{}();
  if (Status st = r.sampling.validate(); !st) return fail({400, st.message(), ""});
  Session check(model->model, variant, so);
  if (Status st = check.validate(); !st) return fail({400, st.message(), "bitsplit"});

  auto lease = acquire_slot();
  if (!lease) {
    res.set_header("Retry-After", "1");
    return fail({503, "the server is busy: every slot is decoding and the queue is full; retry later", "",
                 "unavailable_error"});
  }
  // KV usage: the slots the running requests reserved, of the parallel sequences' contexts.
  const int64_t reserved = int64_t(prompt.size()) + max_tokens;
  const double capacity = double(n_ctx) * double(std::max(1, options.parallel));
  metrics.set_kv_cache_usage(double(kv_reserved += reserved) / capacity);
  const std::string id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
  const int64_t created = unix_now();
  const bool chat = endpoint == Endpoint::kChat;
  auto finish = [this, received, reserved, capacity](const Outcome& o) {
    metrics.request_finished(o.cancelled ? "abort" : o.finish_reason, o.prompt_tokens, o.completion_tokens,
                             o.time_to_first_token,
                             std::chrono::duration<double>(Clock::now() - received).count(), o.inter_token);
    if (o.speculative) {
      const auto& a = o.speculative->acceptance;
      metrics.add_speculative({a.checks, a.drafted, a.accepted, a.accepted_at_depth});
    }
    metrics.set_kv_cache_usage(double(kv_reserved -= reserved) / capacity);
  };
  auto usage = [](const Outcome& o) {
    json u = {{"prompt_tokens", o.prompt_tokens}, {"completion_tokens", o.completion_tokens},
              {"total_tokens", o.prompt_tokens + o.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", o.reused_tokens}}}};
    return u;
  };
  auto extension = [](const Outcome& o) {
    json e = {{"speculative", o.speculative.has_value()}};
    if (o.speculative) {
      const auto& a = o.speculative->acceptance;
      e["checks"] = a.checks;
      e["drafted_tokens"] = a.drafted;
      e["accepted_tokens"] = a.accepted;
      e["tokens_per_check"] = a.tokens_per_check();
    }
    return e;
  };

  const PieceOf piece_of = [this](int32_t token) { return model->tokenizer->token_to_piece(token); };
  if (!r.stream) {
    Outcome o = run(variant, so, prompt, max_tokens, r.sampling, r.stop, r.logprobs, received, nullptr);
    finish(o);
    if (!o.status) return fail({500, o.status.message(), "", "server_error"});
    json choice = {{"index", 0}, {"finish_reason", o.finish_reason}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", o.text}};
      choice["logprobs"] = r.logprobs ? chat_logprobs(o.logprobs, piece_of) : json(nullptr);
    } else {
      choice["text"] = o.text;
      int64_t offset = 0;
      choice["logprobs"] = r.logprobs ? completion_logprobs(o.logprobs, piece_of, offset) : json(nullptr);
    }
    json body = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                 {"model", served_name}, {"choices", json::array({choice})}, {"usage", usage(o)},
                 {"bitsplit", extension(o)}};
    send_json(res, 200, body);
    return;
  }

  // Streamed: the generation runs in the content provider, writing one event per piece of text.
  const bool include_usage = r.include_usage;
  auto state = std::make_shared<GenerationRequest>(std::move(r));
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, lease, state, variant, so, prompt, max_tokens, received, id, created, served_name, chat, include_usage,
       finish, usage, extension, piece_of](size_t, httplib::DataSink& sink) {
        int64_t text_offset = 0;  // bytes of the tokens reported so far (completions' text_offset)
        auto chunk = [&](json delta_or_text, std::optional<std::string> finish_reason,
                         std::span<const TokenLogprob> logprobs = {}) {
          json choice = {{"index", 0}, {"finish_reason", finish_reason ? json(*finish_reason) : json(nullptr)}};
          json lp = nullptr;
          if (state->logprobs && !logprobs.empty()) {
            lp = chat ? chat_logprobs(logprobs, piece_of) : completion_logprobs(logprobs, piece_of, text_offset);
          }
          choice["logprobs"] = std::move(lp);
          if (chat) {
            choice["delta"] = std::move(delta_or_text);
          } else {
            choice["text"] = std::move(delta_or_text);
          }
          return json{{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                      {"model", served_name}, {"choices", json::array({choice})}};
        };
        auto write = [&](const std::string& s) { return sink.is_writable() && sink.write(s.data(), s.size()); };
        if (chat && !write(sse(chunk(json{{"role", "assistant"}, {"content", ""}}, std::nullopt)))) return false;
        Outcome o = run(variant, so, prompt, max_tokens, state->sampling, state->stop, state->logprobs, received,
                        [&](const std::string& piece, std::span<const TokenLogprob> logprobs) {
                          return write(sse(chunk(chat ? json{{"content", piece}} : json(piece), std::nullopt, logprobs)));
                        });
        finish(o);
        if (o.cancelled) return false;  // the client went away
        if (!o.status) {
          write(sse(RequestError{500, o.status.message(), "", "server_error"}.to_json()));
        } else {
          // Tokens whose text never went out (held back by the stop matcher, or a stop string
          // itself) still get their log-probabilities, in the last chunk.
          const auto rest = std::span<const TokenLogprob>(o.logprobs).subspan(o.logprobs_emitted);
          write(sse(chunk(chat ? json::object() : json(""), o.finish_reason, rest)));
          if (include_usage) {
            json last = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                         {"model", served_name}, {"choices", json::array()}, {"usage", usage(o)},
                         {"bitsplit", extension(o)}};
            write(sse(last));
          }
        }
        write("data: [DONE]\n\n");
        sink.done();
        return true;
      });
}

void Server::Impl::setup_routes() {
  http.set_payload_max_length(options.max_body_bytes);
  const int threads = std::max(1, options.parallel) + std::max(0, options.queue) + 4;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (ready.load()) return send_json(res, 200, {{"status", "ok"}});
    res.set_header("Retry-After", "5");
    send_json(res, 503, {{"status", "loading"}});
  });
  http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    const PassBatcher::Stats passes = batcher.stats();
    metrics.set_forward_passes(passes.passes, passes.sequences, passes.rows, passes.shared);
    if (ready.load()) {
      std::vector<std::string> names = variants->names(), resident;
      for (const auto& n : names)
        if (variants->resident(n)) resident.push_back(n);
      metrics.set_variants(std::move(resident), std::move(names));
    }
    res.set_content(metrics.render(), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    json data = json::array();
    if (ready.load()) {
      data.push_back({{"id", model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "bitsplit"}});
      for (const auto& name : variants->names()) {
        data.push_back({{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "bitsplit"}, {"parent", model_id}});
      }
    }
    send_json(res, 200, {{"object", "list"}, {"data", data}});
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, Endpoint::kCompletions);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, Endpoint::kChat);
  });
  // Errors httplib answers itself (unknown route, body over the limit) get an OpenAI error body.
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = "HTTP " + std::to_string(res.status);
    std::string type = "invalid_request_error";
    if (res.status == 404) message = "no route " + req.method + " " + req.path;
    if (res.status == 413) message = "the request body is over the limit of " + std::to_string(options.max_body_bytes) + " bytes";
    if (res.status >= 500) type = "server_error";
    metrics.request_rejected(res.status);
    res.set_content(dump(RequestError{res.status, message, "", type}.to_json()), "application/json");
  });
  http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    metrics.request_rejected(500);
    send_error(res, {500, what, "", "server_error"});
  });
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
  m.ready.store(true);
}

Status Server::bind() {
  Impl& m = *impl_;
  if (m.options.port == 0) {
    m.bound_port = m.http.bind_to_any_port(m.options.host);
    if (m.bound_port <= 0) return Status::error("cannot listen on " + m.options.host + " (any port)");
  } else {
    if (!m.http.bind_to_port(m.options.host, m.options.port)) {
      return Status::error("cannot listen on " + m.options.host + ":" + std::to_string(m.options.port) +
                           " (in use, or not an address of this machine)");
    }
    m.bound_port = m.options.port;
  }
  return Status::ok();
}

int Server::port() const { return impl_->bound_port; }

Status Server::serve() {
  if (!impl_->http.listen_after_bind()) return Status::error("the server stopped with an error");
  return Status::ok();
}

void Server::stop() {
  if (impl_) impl_->http.stop();
}

const Metrics& Server::metrics() const { return impl_->metrics; }

}  // namespace bitsplit::serve
