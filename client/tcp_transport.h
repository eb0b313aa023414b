// TcpTransport: the real Transport. One connection per node, opened on first use; ops sent
// in the same turn of the I/O loop share a frame, and frames are pipelined. Everything runs
// on the scheduler's io_context thread.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "client/transport.h"
#include "protocol/node_access.h"

namespace asio {
class io_context;
}

namespace limiter {

class TcpTransport final : public Transport {
 public:
  // With TLS in `access`, connections run over it; with a secret, every connection proves it
  // first (handshake.h).
  explicit TcpTransport(asio::io_context& io, NodeAccess access = {});
  // Drops what is left without calling back: close everything first (CloseAll, on the I/O
  // thread), and stop the I/O thread before destroying.
  ~TcpTransport() override;

  void Send(const std::string& address, OpSpec op, Callback done) override;
  void Disconnect(const std::string& address) override;
  // Closes every connection; their calls end with kConnection. On the I/O thread.
  void CloseAll();

 private:
  class Link;
  asio::io_context& io_;
  const NodeAccess access_;
  std::unordered_map<std::string, std::shared_ptr<Link>> links_;
};

}  // namespace limiter
