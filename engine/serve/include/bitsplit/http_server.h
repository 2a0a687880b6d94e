// The HTTP/1.1 server under `bitsplit serve`, built for clients that may be hostile: every byte a
// client controls is bounded before anything is spent on it.
//
// One I/O thread multiplexes every connection (Boost.Asio): a connection that sends slowly, or
// not at all, costs a socket and a timer, never a thread, and is closed when its deadline passes
// (the whole head within `header_timeout`, the whole body within `body_timeout`, a stalled reader
// of a response within `write_timeout`). Requests are parsed by Boost.Beast with the head and the
// body bounded however the body is framed (Content-Length or chunked); conflicting framing
// (two different Content-Lengths, Content-Length with Transfer-Encoding) is refused. A request is
// routed, and checked (`head_check`, e.g. authentication) on its head alone, so a refused
// request's body is never read. Complete requests run on a pool of worker threads decoupled from
// the connections; cheap routes (Dispatch::kInline) answer on the I/O thread, so they stay
// answered however busy the workers are.
//
// Requests on one connection are answered in order (pipelining works; they run one at a time).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit::serve::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // as sent, with its query
  std::string path;    // the target without its query
  Headers headers;     // names lower-cased, in the order sent
  std::string body;    // de-chunked
  // The first value of a header (`name` lower-case), "" when absent.
  std::string header(std::string_view name) const;
};

// Where a streamed response's body goes, chunk by chunk. write() blocks while the client is more
// than a bounded amount behind, and returns false once it went away, stopped reading for
// `write_timeout`, or the server is stopping: the producer should stop then.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  virtual bool write(std::string_view data) = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Headers headers;  // extra headers (Retry-After, Cache-Control, ...)
  // Set: the body is streamed (chunked) by this function, on the worker thread, after the head;
  // `body` is ignored.
  std::function<void(ChunkSink&)> stream;
};

using Handler = std::function<void(const Request&, Response&)>;

enum class Dispatch {
  kWorker,  // on a worker thread; may block (generation)
  kInline,  // on the I/O thread; must be quick and never block (health, metrics)
};

struct Limits {
  size_t max_body_bytes = size_t(8) << 20;
  size_t max_header_bytes = size_t(16) << 10;  // request line and headers together
  size_t max_headers = 100;
  int max_connections = 512;                   // open at once; more are answered 503 and closed
  std::chrono::milliseconds header_timeout{10000};  // the whole head, from the connection's start
                                                    // or the previous response (keep-alive idle)
  std::chrono::milliseconds body_timeout{60000};    // the whole body
  std::chrono::milliseconds write_timeout{30000};   // a client that stops reading
  size_t stream_buffer_bytes = size_t(256) << 10;   // a streamed body's bytes not yet sent
  int workers = 8;       // threads running kWorker handlers
  int worker_queue = 0;  // complete requests waiting for a worker; beyond: 503
};

// What the server saw (for /metrics and the soak test's figures).
struct Counters {
  uint64_t connections = 0;          // accepted
  uint64_t connections_refused = 0;  // over max_connections
  uint64_t requests = 0;             // complete requests routed
  uint64_t bad_requests = 0;         // refused by the HTTP layer (malformed, over a limit, ...)
  uint64_t timeouts = 0;             // connections closed at a deadline
  uint64_t busy = 0;                 // 503: every worker busy
  int64_t open_connections = 0;
};

class HttpServer {
 public:
  // `error_body(status, message)`: the body of an error the HTTP layer answers itself (JSON).
  HttpServer(Limits limits, std::function<std::string(int status, const std::string& message)> error_body);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Before bind(). A route is an exact path and a method; a known path with another method is
  // answered 405. `json_body`: a POST whose Content-Type is not application/json is answered 415
  // (a web page cannot send one without a CORS preflight).
  void route(std::string method, std::string path, Handler handler, Dispatch dispatch = Dispatch::kWorker,
             bool json_body = false);
  // Called with each routed request's head (no body yet) on the I/O thread; returning false
  // answers `res` (its status set) and closes the connection without reading the body.
  void set_head_check(std::function<bool(const Request& head, Response& res)> check);

  // Binds; an error names the address. After this, port() is the bound port (port 0: any).
  Status bind(const std::string& host, int port);
  int port() const;
  // Serves on the calling thread until stop() (from any thread).
  Status serve();
  // Closes every connection now (a response being written is cut short).
  void stop();
  // Stops accepting connections, closes those waiting for a request, and lets each response in
  // progress finish before closing its connection; serve() returns when none is left, or after
  // `grace`, when the rest are closed as stop() closes them.
  void stop_gracefully(std::chrono::milliseconds grace);
  Counters counters() const;

  struct Impl;  // the implementation's (http_server.cpp)

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace bitsplit::serve::http
