// DelayProxy: a TCP proxy on 127.0.0.1 that holds every chunk for a fixed delay in each
// direction, standing in for the link between two regions (limiter-bench regions, the
// regions loopback test). Header-only; blocking sockets, two threads per connection.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace limiter::bench {

class DelayProxy {
 public:
  // Listens on a free port of 127.0.0.1 at once; connects to 127.0.0.1:upstream_port for each
  // connection it accepts (0: not known yet, see set_upstream: connections are refused).
  DelayProxy(int upstream_port, std::chrono::milliseconds delay)
      : upstream_port_(upstream_port), delay_(delay) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        ::listen(listen_fd_, 64) == 0) {
      socklen_t len = sizeof(a);
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
      port_ = ntohs(a.sin_port);
    }
    acceptor_ = std::thread([this] { Accept(); });
  }
  DelayProxy(const DelayProxy&) = delete;
  DelayProxy& operator=(const DelayProxy&) = delete;
  ~DelayProxy() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    acceptor_.join();
    MutexLock lock(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
  }

  // 0 when it could not listen.
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  void set_upstream(int port) { upstream_port_ = port; }

 private:
  void Accept() {
    while (!stop_) {
      const int client = ::accept(listen_fd_, nullptr, nullptr);
      if (client < 0) return;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<uint16_t>(upstream_port_.load()));
      if (upstream_port_ == 0 ||
          ::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      MutexLock lock(mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([this, client, server] { Pump(client, server); });
      pumps_.emplace_back([this, client, server] { Pump(server, client); });
    }
  }
  // Each chunk is written `delay_` after it was read (a chunk read while the last one waits
  // waits its own delay after that: the link is never faster than the delay).
  void Pump(int from, int to) {
    char buf[64 * 1024];
    while (!stop_) {
      const ssize_t n = ::read(from, buf, sizeof(buf));
      if (n <= 0) break;
      std::this_thread::sleep_for(delay_);
      for (ssize_t sent = 0; sent < n;) {
        const ssize_t w = ::write(to, buf + sent, static_cast<size_t>(n - sent));
        if (w <= 0) return;
        sent += w;
      }
    }
    ::shutdown(to, SHUT_WR);
  }

  std::atomic<int> upstream_port_;
  const std::chrono::milliseconds delay_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  Mutex mu_;
  std::vector<int> fds_ LIMITER_GUARDED_BY(mu_);
  std::vector<std::thread> pumps_ LIMITER_GUARDED_BY(mu_);
};

}  // namespace limiter::bench
