// The client's half of the cluster secret's handshake (the proofs are in common/auth.h):
//   1. a hello with a fresh nonce and no ops;
//   2. the node answers with a challenge;
//   3. a hello with the proof over both (it may carry ops);
//   4. the node's hello answers with its own proof, which the client checks, so that it
//      never takes a ring or an allowance from a process outside its cluster.
// The transports (blocking NodeConnection, asio TcpTransport) drive it; it owns no socket.
//
// Not thread-safe: one per connection.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/auth.h"
#include "common/result.h"

namespace limiter {

namespace wire {
struct Reply;
}
class RequestBuilder;

class ClientHandshake {
 public:
  // A gateway's: `secret` non-empty; `address` names the node in errors.
  ClientHandshake(std::string secret, std::string address);
  // A node's, speaking to another for member `peer_name`: proves `peer_secret` when it has
  // one (the answer is checked against it), else `secret` (with mutual TLS, where the node
  // certificate is the peer credential). One of the two non-empty.
  static ClientHandshake ForPeer(std::string secret, std::string peer_secret,
                                 std::string peer_name, std::string address);

  // Step 1 into `b` (cleared first).
  void BuildNonceHello(RequestBuilder& b, std::string_view client) const;
  // Step 3 into `b` (cleared first), from the reply to step 1; else why not.
  std::optional<std::string> BuildProofHello(const wire::Reply& challenge, RequestBuilder& b,
                                             std::string_view client);
  // Step 4: empty when the reply's hello proves the node holds the secret.
  std::optional<std::string> CheckNode(const wire::Reply& reply) const;

 private:
  std::string secret_;
  std::string peer_secret_;  // a node's, speaking for peer_name_
  std::string peer_name_;
  std::string address_;
  auth::Nonce nonce_;
  auth::Nonce challenge_{};
};

}  // namespace limiter
