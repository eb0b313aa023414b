#include "protocol/node_connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <asio/ssl/context.hpp>
#include <cerrno>
#include <cstring>
#include <vector>

#include "protocol/frame_codec.h"
#include "protocol/handshake.h"
#include "protocol/read_buffer.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"

namespace limiter {

struct NodeConnection::Impl {
  int fd = -1;
  SSL* ssl = nullptr;  // with TLS; owned
  bool eof = false;
  ReadBuffer in;
  size_t frame_end = 0;           // bytes of `in` that belong to the last frame returned
  std::vector<uint64_t> aligned;  // the last reply, copied to 8-byte alignment
  std::vector<uint8_t> out;       // the frame being sent
  ~Impl() {
    if (ssl != nullptr) {
      SSL_shutdown(ssl);
      SSL_free(ssl);
    }
    if (fd >= 0) ::close(fd);
  }
};

namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string TlsError(const std::string& what) {
  const unsigned long code = ERR_get_error();
  char text[256] = "no detail from OpenSSL";
  if (code != 0) ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return what + ": " + text;
}

struct HostAndPort {
  std::string host;
  std::string port;
};

Result<HostAndPort> SplitAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Error{"expected HOST:PORT, got '" + address + "'"};
  }
  HostAndPort a{address.substr(0, colon), address.substr(colon + 1)};
  if (a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
  return a;
}

}  // namespace

NodeConnection::NodeConnection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NodeConnection::~NodeConnection() = default;

Result<int> ConnectTcp(const std::string& address, int timeout_ms) {
  const Result<HostAndPort> split = SplitAddress(address);
  if (!split.ok()) return split.status();
  const auto& [host, port] = *split;
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
                                                                int timeout_ms,
                                                                const NodeAccess& access) {
  Result<int> fd = ConnectTcp(address, timeout_ms);
  if (!fd) return Error{fd.error()};
  auto impl = std::make_unique<Impl>();
  impl->fd = *fd;
  if (access.tls) {
    impl->ssl = SSL_new(access.tls->native_handle());
    if (impl->ssl == nullptr || SSL_set_fd(impl->ssl, impl->fd) != 1) {
      return Error{TlsError(address + ": TLS setup")};
    }
    if (SSL_connect(impl->ssl) != 1) {
      const long verify = SSL_get_verify_result(impl->ssl);
      if (verify != X509_V_OK) {
        ERR_clear_error();
        return Error{address +
                     ": TLS: the node's certificate: " + X509_verify_cert_error_string(verify)};
      }
      return Error{TlsError(address + ": TLS handshake")};
    }
  }
  std::unique_ptr<NodeConnection> c(new NodeConnection(std::move(impl)));
  RequestBuilder b;
  if (access.secret.empty() && access.peer_secret.empty()) {
    if (!access.peer() || !access.tls) return c;
    // A peer whose credential is its node certificate, at a node that asks for no secret:
    // it names itself in a hello, which the node answers at once.
    b.Hello("limiter", {}, {}, access.peer_name);
    if (Status s = c->Send(b.Finish()); !s.ok()) return Error{address + ": " + s.error()};
    Result<const wire::Reply*> answered = c->Receive();
    if (!answered) return Error{address + ": " + answered.error()};
    if ((*answered)->error()) {
      return Error{address + " refused the hello: " + (*answered)->error()->str()};
    }
    return c;
  }
  ClientHandshake handshake =
      access.peer()
          ? ClientHandshake::ForPeer(access.secret, access.peer_secret, access.peer_name, address)
          : ClientHandshake(access.secret, address);
  handshake.BuildNonceHello(b, "limiter");
  if (Status s = c->Send(b.Finish()); !s.ok()) return Error{address + ": " + s.error()};
  Result<const wire::Reply*> challenge = c->Receive();
  if (!challenge) return Error{address + ": " + challenge.error()};
  if (Status s = handshake.BuildProofHello(**challenge, b, "limiter"); !s.ok()) return s;
  if (Status s = c->Send(b.Finish()); !s.ok()) return Error{address + ": " + s.error()};
  Result<const wire::Reply*> proved = c->Receive();
  if (!proved) return Error{address + ": " + proved.error()};
  if (Status s = handshake.CheckNode(**proved); !s.ok()) return s;
  return c;
}

bool NodeConnection::tls() const { return impl_->ssl != nullptr; }

int NodeConnection::TakeDescriptor() {
  if (impl_->ssl != nullptr) return -1;
  const int fd = impl_->fd;
  impl_->fd = -1;
  return fd;
}

Status NodeConnection::SendRaw(std::span<const uint8_t> bytes) {
  size_t sent = 0;
  if (impl_->ssl != nullptr) {
    while (sent < bytes.size()) {
      const int n = SSL_write(impl_->ssl, bytes.data() + sent,
                              static_cast<int>(std::min<size_t>(bytes.size() - sent, 1 << 30)));
      if (n <= 0) return Error{TlsError("TLS send")};
      sent += static_cast<size_t>(n);
    }
    return Status::Ok();
  }
  while (sent < bytes.size()) {
    const ssize_t n = ::send(impl_->fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error{Errno("send")};
    }
    sent += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status NodeConnection::Send(std::span<const uint8_t> body) {
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
    Result<size_t> n = ReadSome(c.in.Space(64 * 1024));
    if (!n) return Error{n.error()};
    if (*n == 0) return Error{"the node closed the connection"};
    c.in.Commit(*n);
  }
}

Result<size_t> NodeConnection::ReadSome(std::span<uint8_t> space) {
  Impl& c = *impl_;
  while (true) {
    if (c.ssl != nullptr) {
      const int n = SSL_read(c.ssl, space.data(), static_cast<int>(space.size()));
      if (n > 0) return static_cast<size_t>(n);
      const int error = SSL_get_error(c.ssl, n);
      if (error == SSL_ERROR_ZERO_RETURN) {
        c.eof = true;
        return size_t{0};
      }
      if (error == SSL_ERROR_WANT_READ) return Error{"timed out waiting for a reply"};
      if (error == SSL_ERROR_SYSCALL && errno == 0) {  // closed without a TLS goodbye
        c.eof = true;
        return size_t{0};
      }
      return Error{TlsError("TLS receive")};
    }
    const ssize_t n = ::recv(c.fd, space.data(), space.size(), 0);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) {
      c.eof = true;
      return size_t{0};
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Error{"timed out waiting for a reply"};
    return Error{Errno("recv")};
  }
}

bool NodeConnection::closed() const { return impl_->eof; }

}  // namespace limiter
