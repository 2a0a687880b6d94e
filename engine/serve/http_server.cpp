// The HTTP/1.1 server (http_server.h) on Boost.Asio and Boost.Beast's parser. The I/O thread owns
// every connection's state; a worker thread touches a connection only through its request (which
// the I/O thread leaves alone until the response is written) and by posting its response, or
// its streamed chunks, back to the I/O thread.
#include "bitsplit/http_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

namespace bitsplit::serve::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

char lower_ascii(char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; }

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), lower_ascii);
  return out;
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return lower_ascii(x) == lower_ascii(y);
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// "application/json" with or without parameters ("; charset=utf-8").
bool is_json_media_type(std::string_view content_type) {
  return iequal(trim(content_type.substr(0, content_type.find(';'))), "application/json");
}

// The path of a request target: origin form ("/v1/models?x") or absolute form ("http://h/v1/models").
std::string target_path(std::string_view target) {
  if (size_t scheme = target.find("://"); scheme != std::string_view::npos && target.front() != '/') {
    const size_t slash = target.find('/', scheme + 3);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  return std::string(target.substr(0, target.find_first_of("?#")));
}

std::string response_head(const Response& res, std::optional<size_t> content_length, bool keep_alive) {
  const beast::string_view reason = bhttp::obsolete_reason(bhttp::int_to_status(unsigned(res.status)));
  std::string head = "HTTP/1.1 " + std::to_string(res.status) + " " + std::string(reason) + "\r\n";
  head += "Content-Type: " + res.content_type + "\r\n";
  for (const auto& [name, value] : res.headers) head += name + ": " + value + "\r\n";
  head += content_length ? "Content-Length: " + std::to_string(*content_length) + "\r\n" : "Transfer-Encoding: chunked\r\n";
  if (!keep_alive) head += "Connection: close\r\n";
  return head + "\r\n";
}

// A fixed set of threads running tasks; a task beyond the idle threads and `queue` waiting ones
// is refused (the caller answers 503), never queued without bound.
class WorkerPool {
 public:
  WorkerPool(int threads, int queue) : queue_(size_t(std::max(0, queue))) {
    for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { loop(); });
    idle_ = threads_.size();
  }
  ~WorkerPool() { shutdown(); }

  bool try_submit(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || tasks_.size() >= idle_ + queue_) return false;
    tasks_.push_back(std::move(task));
    cv_.notify_one();
    return true;
  }

  // Tasks not started are dropped; running ones finish.
  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      tasks_.clear();
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (stopping_) return;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      --idle_;
      lock.unlock();
      task();
      task = nullptr;  // what it holds goes before the thread counts as idle
      lock.lock();
      ++idle_;
    }
  }

  const size_t queue_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

// Back-pressure between a worker producing a streamed body and the I/O thread sending it.
struct StreamState {
  std::mutex mu;
  std::condition_variable cv;
  size_t pending = 0;  // bytes handed to the I/O thread, not yet written
  bool failed = false;

  void sent(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu);
    pending -= std::min(pending, bytes);
    cv.notify_all();
  }
  void fail() {
    std::lock_guard<std::mutex> lock(mu);
    failed = true;
    cv.notify_all();
  }
};

class Connection;

}  // namespace

std::string Request::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (n == name) return v;
  return {};
}

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  struct Route {
    std::string method, path;
    Handler handler;
    Dispatch dispatch;
    bool json_body;
  };

  Impl(Limits l, std::function<std::string(int, const std::string&)> eb) : limits(l), error_body(std::move(eb)) {}

  const Limits limits;
  const std::function<std::string(int, const std::string&)> error_body;
  std::vector<Route> routes;
  std::function<bool(const Request&, Response&)> head_check;

  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  net::steady_timer accept_retry{ioc};
  int port = 0;
  std::unique_ptr<WorkerPool> workers;
  std::atomic<bool> stopping{false};
  bool closing = false;  // stop_gracefully(): no new requests; I/O thread only
  net::steady_timer closing_deadline{ioc};
  std::unordered_map<Connection*, std::weak_ptr<Connection>> open;  // I/O thread only

  std::atomic<uint64_t> connections{0}, connections_refused{0}, requests{0}, bad_requests{0}, timeouts{0}, busy{0};
  std::atomic<int64_t> open_connections{0};

  void accept();
  void close_all();
  void close_gracefully(std::chrono::milliseconds grace);
};

namespace {

using Impl = HttpServer::Impl;

class StreamSink;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<Impl> server, tcp::socket socket) : server_(std::move(server)), stream_(std::move(socket)) {}

  void start() { read_head(); }
  // Waiting for a request's head, none of it read yet (stop_gracefully() closes these at once).
  bool idle() const { return waiting_for_head_ && buffer_.size() == 0; }
  // Over the connection limit: a 503, then closed.
  void refuse(const std::string& message) { fail(503, message); }
  void close();

  // Called by a worker (work()) and by StreamSink.
  void work();
  void post(std::function<void()> fn) { net::post(server_->ioc, std::move(fn)); }
  void enqueue(std::string data, bool last);  // I/O thread

 private:
  friend class StreamSink;
  void read_head();
  void on_head(beast::error_code ec);
  bool check_head();
  void read_body();
  void on_body(beast::error_code ec);
  void dispatch();
  void fail(int status, const std::string& message);
  void error_status(beast::error_code ec, bool in_body);
  void send(Response res, bool keep_alive);
  void write_next();
  void lingering_close();
  void linger();
  static constexpr std::chrono::seconds kLingerTime{5};
  static constexpr size_t kLingerBytes = size_t(64) << 20;

  std::shared_ptr<Impl> server_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  Request request_;
  const Impl::Route* route_ = nullptr;
  bool keep_alive_ = false;
  bool closed_ = false;
  bool waiting_for_head_ = false;

  // Writing (I/O thread): a queue of byte strings; after the last, the next request or close.
  std::deque<std::string> out_;
  bool writing_ = false, ending_ = false, keep_alive_after_ = false;
  std::shared_ptr<StreamState> stream_state_;
  std::array<char, 16384> discard_{};
  size_t discarded_ = 0;
  Clock::time_point linger_until_;
};

class StreamSink final : public ChunkSink {
 public:
  StreamSink(std::shared_ptr<Connection> conn, std::shared_ptr<StreamState> state)
      : conn_(std::move(conn)), state_(std::move(state)) {}

  bool write(std::string_view data) override {
    const Impl& server = *conn_->server_;
    std::unique_lock<std::mutex> lock(state_->mu);
    if (data.empty()) return !state_->failed;  // an empty chunk would end the body
    const auto deadline = Clock::now() + server.limits.write_timeout;
    while (!state_->failed && state_->pending > server.limits.stream_buffer_bytes) {
      if (server.stopping.load() || Clock::now() >= deadline) {
        state_->failed = true;
        break;
      }
      state_->cv.wait_for(lock, std::chrono::milliseconds(100));
    }
    if (state_->failed || server.stopping.load()) return false;
    char size[20];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string framed = size;
    framed.append(data).append("\r\n");
    state_->pending += framed.size();
    lock.unlock();
    conn_->post([conn = conn_, framed = std::move(framed)]() mutable { conn->enqueue(std::move(framed), false); });
    return true;
  }

 private:
  std::shared_ptr<Connection> conn_;
  std::shared_ptr<StreamState> state_;
};

void Connection::close() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
  if (stream_state_) stream_state_->fail();
  server_->open.erase(this);
  server_->open_connections.fetch_sub(1);
  if (server_->closing && server_->open.empty()) server_->closing_deadline.cancel();
}

void Connection::read_head() {
  if (closed_) return;
  parser_.emplace();
  parser_->header_limit(uint32_t(std::min<size_t>(server_->limits.max_header_bytes, UINT32_MAX)));
  parser_->body_limit(uint64_t(server_->limits.max_body_bytes));
  request_ = Request{};
  route_ = nullptr;
  waiting_for_head_ = true;
  stream_.expires_after(server_->limits.header_timeout);
  bhttp::async_read_header(stream_, buffer_, *parser_,
                           [self = shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
}

void Connection::on_head(beast::error_code ec) {
  waiting_for_head_ = false;
  if (closed_) return;
  if (ec) return error_status(ec, false);
  const auto& msg = parser_->get();
  request_.method = std::string(msg.method_string());
  request_.target = std::string(msg.target());
  request_.path = target_path(request_.target);
  for (const auto& field : msg) {
    const beast::string_view name = field.name_string(), value = field.value();
    request_.headers.emplace_back(lower(std::string_view(name.data(), name.size())), std::string(value.data(), value.size()));
  }
  keep_alive_ = msg.keep_alive();
  if (!check_head()) return;
  if (parser_->is_done()) return dispatch();
  if (iequal(request_.header("expect"), "100-continue")) enqueue("HTTP/1.1 100 Continue\r\n\r\n", false);
  read_body();
}

// The head's own checks: header count, framing, route, media type, then the server's (auth).
// False: answered.
bool Connection::check_head() {
  const Limits& limits = server_->limits;
  if (request_.headers.size() > limits.max_headers) {
    fail(431, "the request has " + std::to_string(request_.headers.size()) + " headers; at most " +
                  std::to_string(limits.max_headers) + " are accepted");
    return false;
  }
  const std::string te = request_.header("transfer-encoding");
  if (!te.empty() && !parser_->chunked()) {
    fail(501, "Transfer-Encoding '" + te + "' is not supported (only chunked)");
    return false;
  }
  const Impl::Route* match = nullptr;
  std::string allow;
  for (const auto& r : server_->routes) {
    if (r.path != request_.path) continue;
    allow += (allow.empty() ? "" : ", ") + r.method;
    if (r.method == request_.method) match = &r;
  }
  if (!match) {
    if (allow.empty()) {
      fail(404, "no route " + request_.method + " " + request_.path);
    } else {
      fail(405, "method " + request_.method + " is not allowed on " + request_.path + " (allowed: " + allow + ")");
    }
    return false;
  }
  route_ = match;
  if (match->json_body && !is_json_media_type(request_.header("content-type"))) {
    fail(415, "the request body must be JSON, sent with 'Content-Type: application/json' (got '" +
                  request_.header("content-type") + "')");
    return false;
  }
  Response res;
  if (server_->head_check && !server_->head_check(request_, res)) {
    send(std::move(res), keep_alive_ && parser_->is_done());
    return false;
  }
  return true;
}

void Connection::read_body() {
  stream_.expires_after(server_->limits.body_timeout);
  bhttp::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->on_body(ec);
  });
}

void Connection::on_body(beast::error_code ec) {
  if (closed_) return;
  if (ec) return error_status(ec, true);
  request_.body = std::move(parser_->get().body());
  dispatch();
}

// A parse or read error: an answer when one helps the client, else closed.
void Connection::error_status(beast::error_code ec, bool in_body) {
  if (ec == net::error::operation_aborted || ec == bhttp::error::end_of_stream || ec == net::error::eof ||
      ec == net::error::connection_reset) {
    return close();
  }
  if (ec == beast::error::timeout) {
    server_->timeouts.fetch_add(1);
    // Closed by the timer, so nothing can be written any more.
    return close();
  }
  if (ec == bhttp::error::header_limit) {
    return fail(431, "the request head is over the limit of " + std::to_string(server_->limits.max_header_bytes) + " bytes");
  }
  if (ec == bhttp::error::body_limit) {
    return fail(413, "the request body is over the limit of " + std::to_string(server_->limits.max_body_bytes) + " bytes");
  }
  fail(400, std::string("malformed HTTP request") + (in_body ? " body" : "") + ": " + ec.message());
}

void Connection::dispatch() {
  server_->requests.fetch_add(1);
  if (route_->dispatch == Dispatch::kInline) {
    Response res;
    try {
      route_->handler(request_, res);
    } catch (const std::exception& e) {
      res = Response{500, "application/json", server_->error_body(500, e.what()), {}, nullptr};
    }
    return send(std::move(res), keep_alive_);
  }
  stream_.expires_never();
  if (!server_->workers->try_submit([self = shared_from_this()] { self->work(); })) {
    server_->busy.fetch_add(1);
    Response res{503, "application/json",
                 server_->error_body(503, "the server is busy: every worker is handling a request; retry later"),
                 {{"Retry-After", "1"}}, nullptr};
    send(std::move(res), keep_alive_);
  }
}

// On a worker thread: the handler, then its response handed to the I/O thread.
void Connection::work() {
  Response res;
  try {
    route_->handler(request_, res);
  } catch (const std::exception& e) {
    res = Response{500, "application/json", server_->error_body(500, e.what()), {}, nullptr};
  }
  if (!res.stream) {
    post([self = shared_from_this(), res = std::move(res)]() mutable { self->send(std::move(res), self->keep_alive_); });
    return;
  }
  auto state = std::make_shared<StreamState>();
  std::string head = response_head(res, std::nullopt, keep_alive_);
  post([self = shared_from_this(), state, head = std::move(head)]() mutable {
    self->stream_state_ = state;
    if (self->closed_) state->fail();
    self->enqueue(std::move(head), false);
  });
  StreamSink sink(shared_from_this(), state);
  try {
    res.stream(sink);
  } catch (const std::exception&) {
    state->fail();  // the head is out: the body is cut short, and the connection with it
  }
  const bool failed = [&] {
    std::lock_guard<std::mutex> lock(state->mu);
    return state->failed;
  }();
  post([self = shared_from_this(), failed] {
    if (failed) return self->close();
    self->enqueue("0\r\n\r\n", true);
  });
}

void Connection::fail(int status, const std::string& message) {
  server_->bad_requests.fetch_add(1);
  Response res{status, "application/json", server_->error_body(status, message), {}, nullptr};
  // The rest of the request is unread (or unreadable): the connection ends after the answer.
  send(std::move(res), false);
}

void Connection::send(Response res, bool keep_alive) {
  if (closed_) return;
  keep_alive_after_ = keep_alive;
  enqueue(response_head(res, res.body.size(), keep_alive) + res.body, false);
  enqueue("", true);
}

// Queues bytes to write; `last`: the response ends after them (a streamed response's flag
// comes with its terminal chunk; a whole response's with an empty string).
void Connection::enqueue(std::string data, bool last) {
  if (closed_) return;
  if (!data.empty()) out_.push_back(std::move(data));
  if (last) {
    ending_ = true;
    if (stream_state_) keep_alive_after_ = keep_alive_;
  }
  if (!writing_) write_next();
}

void Connection::write_next() {
  if (out_.empty()) {
    writing_ = false;
    if (!ending_) return;
    ending_ = false;
    stream_state_.reset();
    if (keep_alive_after_ && !server_->stopping.load() && !server_->closing) return read_head();
    return lingering_close();
  }
  writing_ = true;
  stream_.expires_after(server_->limits.write_timeout);
  net::async_write(stream_, net::buffer(out_.front()), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (self->closed_) return;
    if (ec) {
      if (ec == beast::error::timeout) self->server_->timeouts.fetch_add(1);
      return self->close();
    }
    self->out_.pop_front();
    if (self->stream_state_) self->stream_state_->sent(n);
    self->write_next();
  });
}

// After the last answer: the sending side shut, and what the client still sends (the rest of a
// refused body) read and dropped for a while, so that a client that sends its whole body before
// reading gets the answer instead of a reset; bounded in bytes and time, and never kept.
void Connection::lingering_close() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  linger_until_ = Clock::now() + kLingerTime;
  linger();
}

void Connection::linger() {
  const auto left = linger_until_ - Clock::now();
  if (closed_ || left <= Clock::duration::zero() || discarded_ > kLingerBytes) return close();
  stream_.expires_after(std::min<Clock::duration>(left, std::chrono::seconds(2)));
  stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code e, size_t n) {
    self->discarded_ += n;
    if (e) return self->close();
    self->linger();
  });
}

}  // namespace

void HttpServer::Impl::accept() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (self->stopping.load() || !self->acceptor.is_open()) return;
    if (ec) {
      // Out of file descriptors and the like: try again shortly rather than spin.
      self->accept_retry.expires_after(std::chrono::milliseconds(50));
      self->accept_retry.async_wait([self](beast::error_code) {
        if (!self->stopping.load()) self->accept();
      });
      return;
    }
    self->connections.fetch_add(1);
    auto conn = std::make_shared<Connection>(self, std::move(socket));
    self->open.emplace(conn.get(), conn);
    const int64_t n = self->open_connections.fetch_add(1) + 1;
    if (n > self->limits.max_connections) {
      self->connections_refused.fetch_add(1);
      conn->refuse("the server has " + std::to_string(self->limits.max_connections) +
                   " connections open, its limit; retry later");
    } else {
      conn->start();
    }
    self->accept();
  });
}

void HttpServer::Impl::close_all() {
  beast::error_code ec;
  acceptor.close(ec);
  accept_retry.cancel();
  std::vector<std::shared_ptr<Connection>> conns;
  for (auto& [p, weak] : open)
    if (auto c = weak.lock()) conns.push_back(std::move(c));
  for (auto& c : conns) c->close();
}

void HttpServer::Impl::close_gracefully(std::chrono::milliseconds grace) {
  closing = true;
  beast::error_code ec;
  acceptor.close(ec);
  accept_retry.cancel();
  std::vector<std::shared_ptr<Connection>> idle;
  for (auto& [p, weak] : open)
    if (auto c = weak.lock(); c && c->idle()) idle.push_back(std::move(c));
  for (auto& c : idle) c->close();
  if (open.empty()) return;
  closing_deadline.expires_after(grace);
  closing_deadline.async_wait([this](beast::error_code e) {
    if (!e) close_all();
  });
}

HttpServer::HttpServer(Limits limits, std::function<std::string(int, const std::string&)> error_body)
    : impl_(std::make_shared<Impl>(limits, std::move(error_body))) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::route(std::string method, std::string path, Handler handler, Dispatch dispatch, bool json_body) {
  impl_->routes.push_back({std::move(method), std::move(path), std::move(handler), dispatch, json_body});
}

void HttpServer::set_head_check(std::function<bool(const Request&, Response&)> check) {
  impl_->head_check = std::move(check);
}

Status HttpServer::bind(const std::string& host, int port) {
  Impl& m = *impl_;
  const std::string where = host + ":" + (port == 0 ? std::string("any port") : std::to_string(port));
  beast::error_code ec;
  tcp::resolver resolver(m.ioc);
  auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) return Status::error("cannot listen on " + where + ": " + (ec ? ec.message() : "no address"));
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  m.acceptor.open(endpoint.protocol(), ec);
  if (!ec) m.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(endpoint, ec);
  if (!ec) m.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    m.acceptor.close(ignored);
    return Status::error("cannot listen on " + where + " (" + ec.message() + ")");
  }
  m.port = m.acceptor.local_endpoint().port();
  return Status::ok();
}

int HttpServer::port() const { return impl_->port; }

Status HttpServer::serve() {
  Impl& m = *impl_;
  if (!m.acceptor.is_open()) return Status::error("the server is not bound (bind() first)");
  m.workers = std::make_unique<WorkerPool>(m.limits.workers, m.limits.worker_queue);
  m.accept();
  m.ioc.run();
  m.workers->shutdown();
  // What the workers posted while they finished (answers to connections closed by now) runs
  // here, so that no handler is left in the context holding a connection, which holds the server.
  m.ioc.restart();
  m.ioc.run();
  return Status::ok();
}

void HttpServer::stop() {
  if (!impl_) return;
  impl_->stopping.store(true);
  // (A weak reference: a handler that never runs must not keep the server alive.)
  net::post(impl_->ioc, [weak = std::weak_ptr<Impl>(impl_)] {
    if (auto impl = weak.lock()) impl->close_all();
  });
}

void HttpServer::stop_gracefully(std::chrono::milliseconds grace) {
  if (!impl_) return;
  net::post(impl_->ioc, [weak = std::weak_ptr<Impl>(impl_), grace] {
    if (auto impl = weak.lock()) impl->close_gracefully(grace);
  });
}

Counters HttpServer::counters() const {
  const Impl& m = *impl_;
  return {m.connections.load(), m.connections_refused.load(), m.requests.load(), m.bad_requests.load(),
          m.timeouts.load(),    m.busy.load(),                m.open_connections.load()};
}

}  // namespace bitsplit::serve::http
