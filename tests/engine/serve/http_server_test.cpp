// The HTTP layer under hostile clients (http_server.h), over real sockets on 127.0.0.1 with a
// raw client, so that every byte on the wire is the test's: header floods, chunked bodies over
// the limit, conflicting framing, slow and idle connections, pipelining, stalled readers.
#include "bitsplit/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace bitsplit::serve::http {
namespace {

using namespace std::chrono_literals;

// A connected socket with a receive timeout; closed with the object.
class Client {
 public:
  explicit Client(int port, int timeout_ms = 5000) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~Client() { ::close(fd_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }
  // Everything until the server closes, the timeout passes, or `until` appears `times` times.
  std::string receive(const std::string& until = "", int times = 1) {
    std::string got;
    char buf[65536];
    for (;;) {
      if (!until.empty() && count(got, until) >= times) return got;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = n == 0 || errno == ECONNRESET;
        return got;
      }
      got.append(buf, size_t(n));
    }
  }
  // True once the server closed the connection (a read returns end of file or a reset).
  bool closed_by_server() {
    receive();
    return closed_;
  }
  static int count(const std::string& s, const std::string& what) {
    int n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
    return n;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
};

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return 0;
  return std::stoi(response.substr(9, 3));
}

Limits test_limits() {
  Limits l;
  l.max_body_bytes = 1024;
  l.max_header_bytes = 8192;
  l.max_headers = 50;
  l.max_connections = 64;
  l.header_timeout = 1000ms;
  l.body_timeout = 2000ms;
  l.write_timeout = 1000ms;
  l.stream_buffer_bytes = 64 << 10;
  l.workers = 2;
  return l;
}

// A server on any port with a few routes, serving on its own thread.
class TestServer {
 public:
  explicit TestServer(Limits limits = test_limits())
      : server_(limits, [](int status, const std::string& message) {
          return "{\"status\":" + std::to_string(status) + ",\"message\":\"" + message + "\"}";
        }) {
    server_.route("GET", "/health", [](const Request&, Response& res) { res.body = "{\"ok\":true}"; }, Dispatch::kInline);
    server_.route("POST", "/echo", [](const Request& req, Response& res) {
      res.body = "{\"bytes\":" + std::to_string(req.body.size()) + "}";
    }, Dispatch::kWorker, /*json_body=*/true);
    server_.route("GET", "/stream", [this](const Request&, Response& res) {
      res.content_type = "text/event-stream";
      res.stream = [this](ChunkSink& sink) {
        const std::string chunk(16 << 10, 'x');
        for (int i = 0; i < 10000; ++i) {
          if (!sink.write(chunk)) {
            producer_stopped_ = true;
            return;
          }
          ++chunks_written_;
          if (short_stream_ && i == 2) return;
        }
      };
    });
    server_.set_head_check([](const Request& head, Response& res) {
      if (head.path != "/echo" || head.header("x-key") == "k") return true;
      res.status = 401;
      res.body = "{\"error\":\"key\"}";
      return false;
    });
    EXPECT_TRUE(server_.bind("127.0.0.1", 0));
    thread_ = std::thread([this] { (void)server_.serve(); });
  }
  ~TestServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return server_.port(); }
  HttpServer& server() { return server_; }

  std::atomic<bool> producer_stopped_{false}, short_stream_{false};
  std::atomic<int> chunks_written_{0};

 private:
  HttpServer server_;
  std::thread thread_;
};

std::string echo_head(const std::string& extra) {
  return "POST /echo HTTP/1.1\r\nHost: x\r\nX-Key: k\r\nContent-Type: application/json\r\n" + extra;
}

TEST(HttpServer, AnswersRoutesAndKeepsTheConnectionAlive) {
  TestServer s;
  Client c(s.port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.send(echo_head("Content-Length: 7\r\n\r\n{\"a\":1}")));
  std::string r = c.receive("{\"bytes\":7}");
  EXPECT_EQ(status_of(r), 200) << r;
  ASSERT_TRUE(c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  r = c.receive("{\"ok\":true}");
  EXPECT_EQ(status_of(r), 200) << r;
}

TEST(HttpServer, TooManyOrTooLargeHeadersAre431) {
  TestServer s;
  std::string flood = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 60; ++i) flood += "X-" + std::to_string(i) + ": y\r\n";
  Client many(s.port());
  many.send(flood + "\r\n");
  EXPECT_EQ(status_of(many.receive()), 431);

  Client large(s.port());
  large.send("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
  EXPECT_EQ(status_of(large.receive()), 431);
}

TEST(HttpServer, ABodyOverTheLimitIs413HoweverItIsFramed) {
  TestServer s;
  Client sized(s.port());
  sized.send(echo_head("Content-Length: 5000\r\n\r\n"));
  EXPECT_EQ(status_of(sized.receive()), 413) << "refused on the head, the body not sent";

  Client chunked(s.port());
  chunked.send(echo_head("Transfer-Encoding: chunked\r\n\r\n"));
  std::string chunk = "200\r\n" + std::string(512, 'a') + "\r\n";
  for (int i = 0; i < 4; ++i) chunked.send(chunk);  // 2048 bytes, over 1024
  const std::string r = chunked.receive();
  EXPECT_EQ(status_of(r), 413) << r;

  Client within(s.port());
  within.send(echo_head("Transfer-Encoding: chunked\r\n\r\n") + "3\r\n{}\n\r\n0\r\n\r\n");
  EXPECT_EQ(status_of(within.receive("{\"bytes\":3}")), 200);
}

TEST(HttpServer, ARefusedHeadIsAnsweredWithoutWaitingForTheBody) {
  TestServer s;
  Client c(s.port());
  // No key, a chunked body promised and never sent: the 401 comes on the head alone.
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_EQ(status_of(c.receive("}")), 401);
}

TEST(HttpServer, ConflictingOrBadFramingIsRefused) {
  TestServer s;
  const std::vector<std::pair<std::string, int>> cases = {
      {"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400},
      {"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", 400},
      {"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}", 400},
      {"Content-Length: -5\r\n\r\n{}", 400},
      {"Content-Length: 2x\r\n\r\n{}", 400},
      {"Transfer-Encoding: gzip\r\n\r\n{}", 501},
  };
  for (const auto& [framing, want] : cases) {
    Client c(s.port());
    c.send(echo_head(framing));
    const std::string r = c.receive();
    EXPECT_EQ(status_of(r), want) << framing << "\n" << r;
  }
}

TEST(HttpServer, RoutesMethodsAndMediaTypes) {
  TestServer s;
  {
    Client c(s.port());
    c.send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string r = c.receive("}");
    EXPECT_EQ(status_of(r), 405) << r;
    EXPECT_NE(r.find("POST"), std::string::npos) << "names the allowed method";
  }
  {
    Client c(s.port());
    c.send("GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(status_of(c.receive("}")), 404);
  }
  for (const std::string type : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""}) {
    Client c(s.port());
    c.send("POST /echo HTTP/1.1\r\nHost: x\r\nX-Key: k\r\n" + (type.empty() ? "" : "Content-Type: " + type + "\r\n") +
           "Content-Length: 2\r\n\r\n{}");
    EXPECT_EQ(status_of(c.receive("}")), 415) << type;
  }
  Client c(s.port());
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nX-Key: k\r\nContent-Type: Application/JSON; charset=utf-8\r\n"
         "Content-Length: 2\r\n\r\n{}");
  EXPECT_EQ(status_of(c.receive("{\"bytes\":2}")), 200);
}

TEST(HttpServer, AMalformedRequestIsAnsweredAtOnce) {
  Limits l = test_limits();
  l.header_timeout = 30s;  // an answer can only come from the parser, not the deadline
  TestServer s(l);
  for (const std::string bad : {"GARBAGE\r\n\r\n", "GET /health HTTP/9.9\r\n\r\n", "GET  HTTP/1.1\r\n\r\n",
                                "GET /health HTTP/1.1\r\nBad Header\r\n\r\n"}) {
    Client c(s.port(), 10000);
    c.send(bad);
    EXPECT_EQ(status_of(c.receive()), 400) << bad;
  }
}

TEST(HttpServer, PipelinedRequestsAreAllAnswered) {
  TestServer s;
  Client c(s.port());
  c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n" +
         echo_head("Content-Length: 2\r\nConnection: close\r\n\r\n{}"));
  const std::string r = c.receive();
  EXPECT_EQ(Client::count(r, "HTTP/1.1 200"), 3) << r;
  EXPECT_NE(r.find("{\"bytes\":2}"), std::string::npos);
}

TEST(HttpServer, ARangeHeaderDoesNotCutAReply) {
  TestServer s;
  Client c(s.port());
  c.send("GET /health HTTP/1.1\r\nHost: x\r\nRange: bytes=0-3\r\n\r\n");
  const std::string r = c.receive("}");
  EXPECT_EQ(status_of(r), 200);
  EXPECT_NE(r.find("{\"ok\":true}"), std::string::npos);
}

TEST(HttpServer, ExpectContinueGetsAnInterimAnswer) {
  TestServer s;
  Client c(s.port());
  c.send(echo_head("Content-Length: 2\r\nExpect: 100-continue\r\n\r\n"));
  const std::string interim = c.receive("\r\n\r\n");
  EXPECT_EQ(status_of(interim), 100) << interim;
  c.send("{}");
  EXPECT_NE(c.receive("{\"bytes\":2}").find("HTTP/1.1 200"), std::string::npos);
}

// Slowloris: connections sending a head a byte at a time, and idle ones, cost no thread: the
// server answers others meanwhile, and closes them at the head's deadline.
TEST(HttpServer, SlowAndIdleClientsStallNoOneAndAreClosedAtTheDeadline) {
  TestServer s;
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 40; ++i) {
    slow.push_back(std::make_unique<Client>(s.port(), 5000));
    if (i % 2 == 0) slow.back()->send("GET /health HTTP/1.1\r\nX-Slow");
  }
  for (int round = 0; round < 3; ++round) {
    Client c(s.port());
    c.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    EXPECT_EQ(status_of(c.receive()), 200) << "round " << round;
    for (size_t i = 0; i < slow.size(); i += 2) slow[i]->send("y");
  }
  // The deadline (1 s) passes: every slow or idle connection is closed by the server.
  int closed = 0;
  for (auto& c : slow) closed += c->closed_by_server();
  EXPECT_EQ(closed, 40);
  // (The timer closes the socket before its handler counts it.)
  for (int i = 0; i < 100 && s.server().counters().timeouts < 40; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(s.server().counters().timeouts, 40u);
}

TEST(HttpServer, ConnectionsOverTheLimitAre503) {
  Limits l = test_limits();
  l.max_connections = 4;
  l.header_timeout = 30s;
  TestServer s(l);
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<Client>(s.port()));
    held.back()->send("G");  // accepted and waiting for its head
  }
  // The acceptor sees them in order; the fifth is over the limit.
  std::this_thread::sleep_for(200ms);
  Client over(s.port());
  EXPECT_EQ(status_of(over.receive()), 503);
  held.clear();
  std::this_thread::sleep_for(200ms);
  Client again(s.port());
  again.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(again.receive("}")), 200) << "room again once they closed";
}

TEST(HttpServer, AStreamIsChunkedAndAStalledReaderStopsItsProducer) {
  TestServer s;
  s.short_stream_ = true;
  {
    Client c(s.port());
    c.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    const std::string r = c.receive("0\r\n\r\n");
    EXPECT_EQ(status_of(r), 200);
    EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos);
    EXPECT_EQ(Client::count(r, "4000\r\n"), 3) << "three 16 KiB chunks";
  }
  s.short_stream_ = false;
  Client stalled(s.port());
  stalled.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  // Never read: the socket buffers fill, then the server's buffer, then write() gives up.
  for (int i = 0; i < 100 && !s.producer_stopped_.load(); ++i) std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(s.producer_stopped_.load());
  EXPECT_LT(s.chunks_written_.load(), 10000) << "the producer stopped before its end";
}

// stop_gracefully(): an idle keep-alive connection is closed at once, new connections are refused,
// and a response in progress is finished (all of it reaches the client) before serve() returns.
TEST(HttpServer, AGracefulStopFinishesTheResponseInProgressAndClosesIdleConnections) {
  HttpServer server(test_limits(), [](int status, const std::string&) { return "{\"status\":" + std::to_string(status) + "}"; });
  std::atomic<bool> release{false};
  std::atomic<int> entered{0};
  server.route("GET", "/health", [](const Request&, Response& res) { res.body = "{}"; }, Dispatch::kInline);
  server.route("GET", "/slow", [&](const Request&, Response& res) {
    ++entered;
    while (!release.load()) std::this_thread::sleep_for(10ms);
    res.body = std::string(200000, 'y') + "}";
  });
  ASSERT_TRUE(server.bind("127.0.0.1", 0));
  std::atomic<bool> returned{false};
  std::thread t([&] {
    (void)server.serve();
    returned = true;
  });
  Client idle(server.port());
  idle.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(idle.receive("}")), 200);  // kept alive, now waiting for its next request
  Client busy(server.port());
  busy.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
  while (entered.load() == 0) std::this_thread::sleep_for(10ms);
  server.stop_gracefully(5000ms);
  EXPECT_TRUE(idle.closed_by_server()) << "the idle connection is closed";
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(returned.load()) << "serve() waits for the response in progress";
  Client late(server.port());
  EXPECT_FALSE(late.connected() && status_of(late.receive("}")) == 200) << "no new connection is served";
  release = true;
  const std::string r = busy.receive();
  EXPECT_EQ(status_of(r), 200);
  EXPECT_EQ(Client::count(r, std::string(1000, 'y')), 200) << "the whole body arrived";
  EXPECT_NE(r.find("}"), std::string::npos);
  t.join();
  EXPECT_TRUE(returned.load());
}

TEST(HttpServer, EveryWorkerBusyIs503NotAHang) {
  Limits l = test_limits();
  l.workers = 1;
  l.worker_queue = 0;
  HttpServer server(l, [](int status, const std::string&) { return "{\"status\":" + std::to_string(status) + "}"; });
  std::atomic<bool> release{false};
  std::atomic<int> entered{0};
  server.route("GET", "/block", [&](const Request&, Response& res) {
    ++entered;
    while (!release.load()) std::this_thread::sleep_for(10ms);
    res.body = "{}";
  });
  ASSERT_TRUE(server.bind("127.0.0.1", 0));
  std::thread t([&] { (void)server.serve(); });
  Client first(server.port());
  first.send("GET /block HTTP/1.1\r\nHost: x\r\n\r\n");
  while (entered.load() == 0) std::this_thread::sleep_for(10ms);
  Client second(server.port());
  second.send("GET /block HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(second.receive("}")), 503);
  release = true;
  EXPECT_EQ(status_of(first.receive("}")), 200);
  server.stop();
  t.join();
}

}  // namespace
}  // namespace bitsplit::serve::http
