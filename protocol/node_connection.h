// NodeConnection: one blocking TCP connection to a limiterd node, speaking frames. Requests
// may be pipelined: Send several, then Receive the replies in the same order. Used by
// limiterctl, the load harness and the tests. Not thread-safe, except that one thread may
// SendRaw while another Receives (they share only the socket).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "limiter/status.h"
#include "protocol/node_access.h"

namespace limiter {

namespace wire {
struct Reply;
}

// A connected TCP socket (the descriptor, owned by the caller) to "host:port": blocking,
// with TCP_NODELAY, and `timeout_ms` bounding the connect and each later read and write.
Result<int> ConnectTcp(const std::string& address, int timeout_ms);

class NodeConnection {
 public:
  // "host:port"; timeout_ms bounds the connect and every later read and write. With TLS in
  // `access`, the TLS handshake runs first; with a secret, then the cluster secret's
  // (handshake.h). An error says which failed and why.
  static Result<std::unique_ptr<NodeConnection>> Connect(const std::string& address,
                                                         int timeout_ms = 5000,
                                                         const NodeAccess& access = {});
  // The socket, for a caller that goes on with its own I/O after the handshake (plain TCP
  // only); this connection is unusable afterwards.
  int TakeDescriptor();
  bool tls() const;
  // Reads what is there, at most `space` bytes, waiting up to the timeout for something;
  // 0 at end of file. For callers that parse frames themselves (the load generator).
  Result<size_t> ReadSome(std::span<uint8_t> space);
  ~NodeConnection();

  // Sends one frame holding `body` (a Request, or any bytes in tests).
  Status Send(std::span<const uint8_t> body);
  // Sends raw bytes, framing included; for tests of bad input.
  Status SendRaw(std::span<const uint8_t> bytes);
  // Reads one reply frame, verified. Valid until the next Receive.
  Result<const wire::Reply*> Receive();
  // True once the node has closed the connection (a read returned end of file).
  bool closed() const;

 private:
  struct Impl;
  explicit NodeConnection(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace limiter
