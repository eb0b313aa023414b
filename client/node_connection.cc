#include "client/node_connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/frame_codec.h"
#include "common/read_buffer.h"
#include "common/wire.h"

namespace limiter {

struct NodeConnection::Impl {
  int fd = -1;
  bool eof = false;
  ReadBuffer in;
  size_t frame_end = 0;  // bytes of `in` that belong to the last frame returned
  std::vector<uint64_t> aligned;  // the last reply, copied to 8-byte alignment
  std::vector<uint8_t> out;       // the frame being sent
  ~Impl() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

bool SplitAddress(const std::string& address, std::string& host, std::string& port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  host = address.substr(0, colon);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  port = address.substr(colon + 1);
  return true;
}

}  // namespace

NodeConnection::NodeConnection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NodeConnection::~NodeConnection() = default;

Result<int> ConnectTcp(const std::string& address, int timeout_ms) {
  std::string host, port;
  if (!SplitAddress(address, host, port)) {
    return Error{"expected HOST:PORT, got '" + address + "'"};
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Error{address + ": " + ::gai_strerror(rc)};
  }
  std::string last_error = address + ": no address";
  int connected = -1;
  for (addrinfo* ai = found; ai != nullptr && connected < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = ::poll(&p, 1, timeout_ms) == 1 ? 0 : ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (err == 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      errno = err;
      rc = err == 0 ? 0 : -1;
    }
    if (rc < 0) {
      last_error = Errno("connect to " + address);
      ::close(fd);
      continue;
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    connected = fd;
  }
  ::freeaddrinfo(found);
  if (connected < 0) return Error{last_error};
  return connected;
}

Result<std::unique_ptr<NodeConnection>> NodeConnection::Connect(const std::string& address,
                                                                int timeout_ms) {
  Result<int> fd = ConnectTcp(address, timeout_ms);
  if (!fd) return Error{fd.error()};
  auto impl = std::make_unique<Impl>();
  impl->fd = *fd;
  return std::unique_ptr<NodeConnection>(new NodeConnection(std::move(impl)));
}

std::optional<std::string> NodeConnection::SendRaw(std::span<const uint8_t> bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(impl_->fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("send");
    }
    sent += static_cast<size_t>(n);
  }
  return std::nullopt;
}

std::optional<std::string> NodeConnection::Send(std::span<const uint8_t> body) {
  impl_->out.clear();
  AppendFrame(impl_->out, body);
  return SendRaw(impl_->out);
}

Result<const wire::Reply*> NodeConnection::Receive() {
  Impl& c = *impl_;
  c.in.Consume(c.frame_end);
  c.frame_end = 0;
  // Replies may be larger than requests; accept up to 64 MiB.
  constexpr uint32_t kMaxReply = 64u << 20;
  while (true) {
    const FrameResult frame = DecodeFrame(c.in.readable(), kMaxReply);
    if (frame.status == FrameStatus::kFrame) {
      c.frame_end = frame.consumed;
      const wire::Reply* reply = VerifiedReply(frame.body, c.aligned);
      if (!reply) return Error{"the node sent a reply that fails verification"};
      return reply;
    }
    if (frame.status != FrameStatus::kNeedMore) {
      return Error{"the node sent a bad frame: " + DescribeFrameError(frame, kMaxReply)};
    }
    const std::span<uint8_t> space = c.in.Space(64 * 1024);
    const ssize_t n = ::recv(c.fd, space.data(), space.size(), 0);
    if (n > 0) c.in.Commit(static_cast<size_t>(n));
    if (n == 0) {
      c.eof = true;
      return Error{"the node closed the connection"};
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Error{"timed out waiting for a reply"};
      return Error{Errno("recv")};
    }
  }
}

bool NodeConnection::closed() const { return impl_->eof; }

}  // namespace limiter
