// The client's half of the cluster secret's handshake (the proofs are in protocol/auth.h):
//   1. a hello with a fresh nonce and no ops;
//   2. the node answers with a challenge;
//   3. a hello with the proof over both (it may carry ops);
//   4. the node's hello answers with its own proof, which the client checks, so that it
//      never takes a ring or an allowance from a process outside its cluster.
// The transports (blocking NodeConnection, asio TcpTransport) drive it; it owns no socket.
//
// Not thread-safe: one per connection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "limiter/status.h"
#include "protocol/auth.h"

namespace limiter {

namespace wire {
struct Hello;
struct Reply;
}  // namespace wire
class RequestBuilder;

class ClientHandshake {
 public:
  // A gateway's: `secret` non-empty; `address` names the node in errors.
  ClientHandshake(std::string secret, std::string address);
  // A node's, speaking to another for member `peer_name`: proves `peer_secret` when it has
  // one (the answer is checked against it), else `secret` (with mutual TLS, where the node
  // certificate is the peer credential). One of the two non-empty.
  static ClientHandshake ForPeer(std::string secret, std::string peer_secret, std::string peer_name,
                                 std::string address);

  // Step 1 into `b` (cleared first).
  void BuildNonceHello(RequestBuilder& b, std::string_view client) const;
  // Step 3 into `b` (cleared first), from the reply to step 1; else why not.
  Status BuildProofHello(const wire::Reply& challenge, RequestBuilder& b, std::string_view client);
  // Step 4: ok when the reply's hello proves the node holds the secret.
  Status CheckNode(const wire::Reply& reply) const;

 private:
  std::string secret_;
  std::string peer_secret_;  // a node's, speaking for peer_name_
  std::string peer_name_;
  std::string address_;
  auth::Nonce nonce_;
  auth::Nonce challenge_{};
};

class NodeHandshake {
 public:
  // A hello's credential fields, in the shape the protocol allows.
  struct Hello {
    bool names_member = false;             // it carries peer_name: the sender says it is a node
    std::string member;                    // peer_name
    auth::Bytes nonce, proof, peer_proof;  // into the frame
    bool has_proof() const { return !proof.empty() || !peer_proof.empty(); }
  };
  // The hello's fields, or what is malformed in them.
  static Result<Hello> Read(const wire::Hello& hello);

  // Steps 2 and 3 for a hello that must prove a secret. Without a proof: the challenge is
  // appended to `out` (a whole reply frame), and the result is true. With one: it
  // is checked to answer this connection's challenge (its nonce, once), and the result is
  // false: the caller then checks the proof itself against its secrets. An error: the hello
  // breaks the protocol (the connection is to be closed).
  Result<bool> Step(const Hello& hello, bool has_ops, std::string_view node_name,
                    uint32_t max_frame_bytes, std::vector<uint8_t>& out);

  // The challenge answered and the client's nonce, for the proofs; the member named in the
  // hello that asked for the challenge.
  const auth::Nonce& challenge() const { return challenge_; }
  const auth::Nonce& nonce() const { return nonce_; }
  const std::string& claimed() const { return claimed_; }

 private:
  bool challenged_ = false;  // a challenge was sent; the next hello must answer it
  auth::Nonce challenge_{};
  auth::Nonce nonce_{};
  std::string claimed_;
};

}  // namespace limiter
