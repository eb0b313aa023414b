// Raw sockets for the hostile-connection tests: a socket closed on destruction, a connect from a
// chosen loopback source address (127.0.0.2, ...: another "host" for the per-source caps),
// whether the node closed it, and a process's resident memory.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "protocol/node_connection.h"

namespace limiter::testing {

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  bool Send(std::initializer_list<uint8_t> bytes) const {
    const std::vector<uint8_t> v(bytes);
    return ::send(fd_, v.data(), v.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(v.size());
  }

 private:
  int fd_;
};

inline Socket Connect(const std::string& address, int timeout_ms = 20'000) {
  Result<int> fd = ConnectTcp(address, timeout_ms);
  return Socket(fd.ok() ? *fd : -1);
}

// A blocking TCP connection to 127.0.0.1:`port` from `source` (an address of 127/8).
inline Socket ConnectFrom(const std::string& source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Socket();
  Socket s(fd);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof(from)) != 0 ||
      ::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != 0) {
    return Socket();
  }
  return s;
}

inline int PortOf(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

// Whether the node has ended the connection: end of file, or a reset when a byte of ours
// crossed its close. Waits up to `timeout_ms` for something to read; false if data came.
inline bool ClosedByNode(const Socket& s, int timeout_ms) {
  pollfd p{s.fd(), POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return false;
  char byte;
  const ssize_t n = ::recv(s.fd(), &byte, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

inline int64_t ResidentBytes(int pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
  }
  return -1;
}

}  // namespace limiter::testing
