// The admin port's tests (admin_port_test.cc, admin_port_hostile_test.cc): raw HTTP/1.1
// clients over loopback (a connection from a chosen source address, 127.0.0.2, ...; bytes sent
// as given; responses read back with bounded waits) and a fixture that runs an AdminPort in
// the test's process on 127.0.0.1:0 with a few routes.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "server/admin_port.h"
#include "test/support/wait.h"

namespace limiter::testing {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::string header(const std::string& name) const {
    const auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class RawHttpClient {
 public:
  // Connects to 127.0.0.1:`port` from `source` (any loopback address: the whole of 127/8 is
  // local), or, given an IPv6 source, to [::1]:`port`. !ok() when it could not.
  explicit RawHttpClient(uint16_t port, const std::string& source = "127.0.0.1") {
    const bool v6 = source.find(':') != std::string::npos;
    sockaddr_storage from{};
    sockaddr_storage to{};
    socklen_t size = sizeof(sockaddr_in);
    if (v6) {
      auto* f = reinterpret_cast<sockaddr_in6*>(&from);
      auto* t = reinterpret_cast<sockaddr_in6*>(&to);
      f->sin6_family = t->sin6_family = AF_INET6;
      ::inet_pton(AF_INET6, source.c_str(), &f->sin6_addr);
      ::inet_pton(AF_INET6, "::1", &t->sin6_addr);
      t->sin6_port = htons(port);
      size = sizeof(sockaddr_in6);
    } else {
      auto* f = reinterpret_cast<sockaddr_in*>(&from);
      auto* t = reinterpret_cast<sockaddr_in*>(&to);
      f->sin_family = t->sin_family = AF_INET;
      ::inet_pton(AF_INET, source.c_str(), &f->sin_addr);
      ::inet_pton(AF_INET, "127.0.0.1", &t->sin_addr);
      t->sin_port = htons(port);
    }
    fd_ = ::socket(from.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    // The local port is picked at connect, per destination: tens of thousands of connections
    // (and their TIME_WAITs) do not use up the ports of one source address.
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&from), size) != 0 ||
        ::connect(fd_, reinterpret_cast<sockaddr*>(&to), size) != 0) {
      Reset();
    }
  }
  RawHttpClient(RawHttpClient&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), in_(std::move(other.in_)), closed_(other.closed_) {}
  RawHttpClient& operator=(RawHttpClient&& other) noexcept {
    std::swap(fd_, other.fd_);
    std::swap(in_, other.in_);
    std::swap(closed_, other.closed_);
    return *this;
  }
  ~RawHttpClient() { Reset(); }

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // This end's address, "127.0.0.1:41234" or "[::1]:41234".
  std::string local() const {
    sockaddr_storage a{};
    socklen_t n = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n);
    char text[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      return "[" + std::string(text) + "]:" + std::to_string(ntohs(v6->sin6_port));
    }
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(v4->sin_port));
  }

  bool Send(std::string_view bytes) const {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  void ShutdownWrite() const { ::shutdown(fd_, SHUT_WR); }
  // Whether the port's end has acknowledged every byte sent: it is in the port's socket,
  // whether or not the port has read it.
  bool Delivered() const {
    int unacknowledged = 0;
    return ::ioctl(fd_, SIOCOUTQ, &unacknowledged) == 0 && unacknowledged == 0;
  }

  // The next response (a 100 Continue too), read within `within`; nullopt when the
  // connection ends first (closed() then says so) or time runs out. `head`: the answer to a
  // HEAD request, which has no body whatever its Content-Length says.
  std::optional<HttpResponse> Read(std::chrono::milliseconds within = std::chrono::seconds(20),
                                   bool head = false) {
    const auto until = std::chrono::steady_clock::now() + within;
    for (;;) {
      if (std::optional<HttpResponse> r = Take(head)) return r;
      if (closed_ || !Fill(until)) return std::nullopt;
    }
  }

  // Whether the port ends the connection (an end of file, or a reset) within `within`;
  // what arrives meanwhile is kept (unread()).
  bool WaitClosed(std::chrono::milliseconds within = std::chrono::seconds(20)) {
    const auto until = std::chrono::steady_clock::now() + within;
    while (!closed_ && Fill(until)) {
    }
    return closed_;
  }
  // Closed already, as far as a look without waiting tells.
  bool ClosedNow() {
    Fill(std::chrono::steady_clock::now());
    return closed_;
  }
  bool closed() const { return closed_; }
  const std::string& unread() const { return in_; }

 private:
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Reads what comes by `until`; false when nothing did (time ran out, or the end).
  bool Fill(std::chrono::steady_clock::time_point until) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count()))) != 1) return false;
    char buffer[16384];
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      closed_ = true;
      return false;
    }
    if (n > 0) in_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  // A whole response off the front of what was read, if there is one.
  std::optional<HttpResponse> Take(bool head) {
    const size_t end = in_.find("\r\n\r\n");
    if (end == std::string::npos) return std::nullopt;
    HttpResponse r;
    size_t line_end = in_.find("\r\n");
    const std::string status_line = in_.substr(0, line_end);
    if (status_line.size() < 12 || status_line.compare(0, 9, "HTTP/1.1 ") != 0) {
      r.status = -1;  // not HTTP: what came is in the body
      r.body = std::exchange(in_, "");
      return r;
    }
    r.status = std::stoi(status_line.substr(9, 3));
    for (size_t at = line_end + 2; at < end; at = line_end + 2) {
      line_end = in_.find("\r\n", at);
      const std::string line = in_.substr(at, line_end - at);
      const size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const size_t value = line.find_first_not_of(' ', colon + 1);
      r.headers[name] = value == std::string::npos ? "" : line.substr(value);
    }
    size_t length = 0;
    if (!head && r.status >= 200 && r.headers.count("content-length")) {
      length = std::stoull(r.headers["content-length"]);
    }
    if (in_.size() < end + 4 + length) return std::nullopt;
    r.body = in_.substr(end + 4, length);
    in_.erase(0, end + 4 + length);
    return r;
  }

  int fd_ = -1;
  std::string in_;
  bool closed_ = false;
};

inline constexpr std::string_view kProbe = "GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n";

// Short deadlines where a test waits for them; elsewhere long enough that a client stalled by a
// busy machine between its connect and its send is not cut off.
inline AdminPortOptions TestOptions() {
  AdminPortOptions o;
  o.listen = "127.0.0.1:0";
  o.request_timeout = std::chrono::seconds(1);
  return o;
}

// The caps, with deadlines far away: only the caps close anything here.
inline AdminPortOptions CapOptions(int64_t max_connections, int64_t max_per_source) {
  AdminPortOptions o = TestOptions();
  o.max_connections = max_connections;
  o.max_per_source = max_per_source;
  o.request_timeout = std::chrono::seconds(120);
  o.idle_timeout = std::chrono::seconds(120);
  return o;
}

// A connection from `source` that has been answered once and is kept alive.
inline RawHttpClient Served(uint16_t port, const std::string& source) {
  RawHttpClient c(port, source);
  EXPECT_TRUE(c.Send(kProbe));
  const std::optional<HttpResponse> r = c.Read();
  EXPECT_TRUE(r && r->status == 200);
  return c;
}

// A connection from `source` that has sent half a request.
inline RawHttpClient Slow(uint16_t port, const std::string& source) {
  RawHttpClient c(port, source);
  EXPECT_TRUE(c.Send("GET /healthz HTTP/1.1\r\nX-Slow: a"));
  return c;
}

// One AdminPort per test, with these routes: GET /healthz ("ok\n"), POST /echo (the request as
// its handler saw it), GET /metrics (the port's own counters), and the test's own.
class AdminPortFixture : public ::testing::Test {
 protected:
  // A port on 127.0.0.1:0 with the test's routes, and `more` of the test's own.
  AdminPort& StartPort(AdminPortOptions options = TestOptions(),
                       const std::function<void(AdminPort&)>& more = {}) {
    port_ = std::make_unique<AdminPort>(std::move(options));
    port_->Get("/healthz", [](const AdminRequest&) {
      return AdminResponse{200, "text/plain", "ok\n", {}};
    });
    port_->Post("/echo", [](const AdminRequest& r) {
      return AdminResponse{200,
                           "text/plain",
                           "method=" + r.method + "\npath=" + r.path + "\nquery=" + r.query +
                               "\nauthorization=" + r.authorization + "\npeer=" + r.peer +
                               "\nbody=" + r.body,
                           {}};
    });
    port_->Get("/metrics", [this](const AdminRequest&) {
      return AdminResponse{200, "text/plain; version=0.0.4", port_->RenderMetrics(), {}};
    });
    if (more) more(*port_);
    const Status started = port_->Start();
    EXPECT_TRUE(started.ok()) << started.error();
    const std::string address = port_->address();
    port_number_ = static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
    return *port_;
  }

  RawHttpClient Connect(const std::string& source = "127.0.0.1") {
    RawHttpClient c(port_number_, source);
    EXPECT_TRUE(c.ok()) << "cannot connect from " << source;
    return c;
  }

  // One request on a new connection, its response (status -1: none).
  HttpResponse Exchange(std::string_view request, const std::string& source = "127.0.0.1") {
    RawHttpClient c = Connect(source);
    if (!c.Send(request)) return {-1, {}, "send failed"};
    return c.Read().value_or(HttpResponse{-1, {}, "no response"});
  }

  // Sends a request that must be refused with `status`; the connection must close after.
  void ExpectRefused(std::string_view request, int status, const std::string& why) {
    RawHttpClient c = Connect();
    c.Send(request);  // may fail part way: the port stops reading
    const std::optional<HttpResponse> r = c.Read();
    ASSERT_TRUE(r) << why << ": no response";
    EXPECT_EQ(r->status, status) << why << ": " << r->body;
    EXPECT_EQ(r->header("connection"), "close") << why;
    EXPECT_TRUE(c.WaitClosed()) << why << ": the connection stayed open";
  }

  uint16_t port_number_ = 0;
  std::unique_ptr<AdminPort> port_;
};

}  // namespace limiter::testing
