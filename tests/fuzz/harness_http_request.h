// Fuzz harness for the whole HTTP request as `bitsplit serve` reads it off the wire (head and
// body, any framing): the input is sent as-is over a socket to an in-process server of the HTTP
// layer (http_server.h) with the server's kinds of routes (an inline GET, a JSON POST on a worker
// behind a key checked on the head, a streamed reply), the sending side then shut.
// Asserts: the server answers every connection with well-formed HTTP/1.1 status lines (or
// closes it), never answers the keyed route 2xx without the key, and keeps serving (a
// health request on a fresh connection is answered 200 after every input).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "bitsplit/http_server.h"
#include "harness_common.h"

namespace bitsplit::fuzz {

// The server, started on first use and kept for the process (its thread runs until exit).
inline serve::http::HttpServer& fuzz_http_server() {
  static serve::http::HttpServer* server = [] {
    serve::http::Limits l;
    l.max_body_bytes = 2048;
    l.max_header_bytes = 2048;
    l.max_headers = 32;
    l.header_timeout = std::chrono::milliseconds(500);
    l.body_timeout = std::chrono::milliseconds(500);
    l.write_timeout = std::chrono::milliseconds(500);
    l.workers = 2;
    auto* s = new serve::http::HttpServer(l, [](int status, const std::string&) {
      return "{\"error\":" + std::to_string(status) + "}";
    });
    using serve::http::Dispatch;
    s->route("GET", "/health", [](const serve::http::Request&, serve::http::Response& res) { res.body = "{}"; },
             Dispatch::kInline);
    s->route("POST", "/v1/completions", [](const serve::http::Request& req, serve::http::Response& res) {
      res.body = "{\"bytes\":" + std::to_string(req.body.size()) + "}";
    }, Dispatch::kWorker, true);
    s->route("GET", "/stream", [](const serve::http::Request&, serve::http::Response& res) {
      res.stream = [](serve::http::ChunkSink& sink) {
        for (int i = 0; i < 3 && sink.write("data: x\n\n"); ++i) {}
      };
    });
    s->set_head_check([](const serve::http::Request& head, serve::http::Response& res) {
      if (head.path != "/v1/completions" || head.header("authorization") == "Bearer k") return true;
      res.status = 401;
      res.body = "{}";
      return false;
    });
    if (!s->bind("127.0.0.1", 0)) std::abort();
    std::thread([s] { (void)s->serve(); }).detach();
    return s;
  }();
  return *server;
}

// Sends `request` on a fresh connection, shuts the sending side and reads until the server
// closes (at most 5 s).
inline std::string http_exchange(int port, std::string_view request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    size_t off = 0;
    while (off < request.size()) {
      const ssize_t n = ::send(fd, request.data() + off, request.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += size_t(n);
    }
    ::shutdown(fd, SHUT_WR);
    char buf[8192];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, size_t(n));
  }
  ::close(fd);
  return got;
}

inline int run_http_request(const uint8_t* data, size_t size) {
  serve::http::HttpServer& server = fuzz_http_server();
  const std::string reply = http_exchange(server.port(), std::string_view(reinterpret_cast<const char*>(data), size));
  // Every status line the reply holds (one per answered request) is HTTP/1.1 and a known class.
  for (size_t at = reply.find("HTTP/1.1 "); at != std::string::npos; at = reply.find("HTTP/1.1 ", at + 9)) {
    const std::string code = reply.substr(at + 9, 3);
    BITSPLIT_FUZZ_ASSERT(code.size() == 3 && code[0] >= '1' && code[0] <= '5', "a status line without a status");
  }
  BITSPLIT_FUZZ_ASSERT(reply.empty() || reply.rfind("HTTP/1.1 ", 0) == 0, "a reply that does not start with a status line");
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (input.find("Bearer k") == std::string_view::npos && input.find("bearer k") == std::string_view::npos) {
    BITSPLIT_FUZZ_ASSERT(reply.find("{\"bytes\":") == std::string::npos, "the keyed route ran without the key");
  }
  const std::string health = http_exchange(server.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  BITSPLIT_FUZZ_ASSERT(health.rfind("HTTP/1.1 200", 0) == 0, "the server stopped answering after an input");
  return 0;
}

}  // namespace bitsplit::fuzz
