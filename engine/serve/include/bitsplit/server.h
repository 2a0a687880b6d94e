// `bitsplit serve`: an OpenAI-compatible HTTP server over one loaded model and its registered
// variants (the request's `model` field picks the base or a variant).
//
// Routes: GET / (the chat page, unless ServerOptions::webui is off; it holds no data and asks for
// the key itself), POST /v1/completions, POST /v1/chat/completions (both streamed as server-sent events
// with "stream": true; their bodies must be sent as Content-Type: application/json), GET
// /v1/models, GET /health (200 when ready; 503 while loading and while draining), GET /metrics
// (Prometheus), POST /admin/drain (only with API keys). With API keys every route but /health needs
// "Authorization: Bearer KEY", checked on the request's head before its body is read.
//
// Draining (drain(), or POST /admin/drain): the server stops admitting generation requests (503
// with Retry-After, so a router retries them on another replica), /health says 503 "draining" (a
// router's health check or a readiness probe takes the replica out of rotation), and the requests
// already admitted run to their end. The HTTP layer (http_server.h) bounds what a client controls: head and body size however
// framed, header count, connections, and how long a client may take to send or to read.
//
// Tenants: each API key is one; kept prompt caches are only reused within the tenant that made
// them, so `cached_tokens` (and the time a request takes) never tell one key's client what another
// key's client sent. Without keys every client is the one tenant.
//
// Chat content is text: special-token text inside a message (<|im_start|>, ...) is tokenized as
// plain text, unless special_tokens_in_chat (trusted clients only) says otherwise; the chat
// template's own markup still becomes control tokens.
//
// Scheduling: `parallel` requests hold a slot at once and up to `queue` more wait for one; a
// request beyond that gets 503 with Retry-After. The requests holding slots decode at once, each
// with its own KV cache and variant: their forward passes (prefill chunks, decode steps, draft
// levels on the host, verify trees) are combined by a PassBatcher into one pass over the planes
// for all their rows, so R is streamed once per step for all of them; each request's output is
// what it would be alone. A streamed request whose client goes away stops after its current
// token.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bitsplit/chat_template.h"
#include "bitsplit/generation_args.h"
#include "bitsplit/http_server.h"
#include "bitsplit/loaded_model.h"
#include "bitsplit/metrics.h"
#include "bitsplit/session.h"
#include "bitsplit/variant.h"

namespace bitsplit::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;              // 0: any free port (see Server::port())
  std::vector<std::string> api_keys;  // empty: no authentication; else each key is a tenant
  int parallel = 4;             // requests decoding at once
  int64_t ctx = 0;              // a request's context (prompt + max_tokens); 0: the model's
  int queue = 64;               // requests waiting for a slot
  // The HTTP layer's bounds (body size, head size, header count, connections, deadlines); its
  // worker threads are set from parallel and queue.
  http::Limits http;
  bool special_tokens_in_chat = false;  // special-token text in chat content becomes control tokens
  bool webui = true;                    // GET / answers the chat page (engine/serve/webui/index.html)
  std::string model_name;       // the base model's id in /v1/models (default: the file name)
  // Decoding defaults (speculative, budget, lookup, ...); a request may override `speculative`
  // and `budget`, and its session options then come from generation_config as a front end's do
  // (a fixed budget drafts no context lookup unless the defaults ask for it, as in `run`).
  GenerationArgs generation;
  // KV caches of finished requests kept for the next ones: a request takes the one whose
  // tokens share the longest prefix with its prompt (same variant) and runs only the rest
  // (usage.prompt_tokens_details.cached_tokens says how many it skipped). -1: one per
  // `parallel` slot; 0: off.
  int prompt_cache = -1;
  // Called (on the HTTP I/O thread; it must not block) when POST /admin/drain starts a drain: the
  // owner then waits for drain() and stops the server.
  std::function<void()> on_drain_request;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  // The model to serve, once loaded (until then /health says 503 "loading" and generation
  // requests get 503). `model` and `variants` must outlive the server. `chat_template`: empty
  // when the model has none (chat requests are then refused with an error saying so).
  void attach(LoadedModel& model, VariantRegistry& variants, std::optional<ChatTemplate> chat_template);
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds; an error names the address. After this, port() is the bound port.
  Status bind();
  int port() const;
  // Serves until stop() (from another thread or a signal handler thread).
  Status serve();
  void stop();
  // Drains: refuses new generation requests from now on and waits until none is in flight (true),
  // or until `timeout` passes or `give_up` (polled) says so (false). Then stop_gracefully() lets
  // the last responses' bytes reach their clients before serve() returns.
  bool drain(std::chrono::milliseconds timeout, const std::function<bool()>& give_up = {});
  void stop_gracefully();
  bool draining() const;
  const Metrics& metrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bitsplit::serve
