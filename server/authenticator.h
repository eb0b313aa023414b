// Authenticator: who a connection's peer is, and what that lets it do (docs/features/security.md).
//
// Two roles. A gateway proves the gateway secret and may ask about keys; a node proves the
// peer credential (the peer secret, or with mutual TLS a certificate of the peer CA) and may
// also send what nodes say to each other, speaking only for the member it proved. The wire
// steps of the handshake are protocol/handshake.h's; this class holds the secrets, decides
// the role each proof gives, and ends the sessions of a secret that rotation removed. It
// also signs and checks the tokens of split views, which are made with the gateway secret.
//
// Thread-safety: the secrets are immutable snapshots swapped whole (SetSecrets), read by any
// thread without a lock. A Session belongs to one connection and is used on its thread only.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/shared_value.h"
#include "limiter/status.h"
#include "protocol/auth.h"
#include "protocol/handshake.h"

namespace limiter {

namespace wire {
struct Request;
}

// What the node knows of one connection's peer: whether it has proved a credential yet,
// which role that gives it, and which member it speaks for.
struct Session {
  bool authenticated = false;    // may send ops (the gateway role, or no secret is needed)
  bool peer = false;             // proved the peer credential: node-to-node ops too
  bool tls_node = false;         // its TLS client certificate is a node's (NoteTlsNode)
  bool in_process = false;       // a trusted caller in this process (tests, simulations)
  std::string peer_name;         // the member a peer proved to speak for; "" for a gateway
  NodeHandshake handshake;       // the hello's steps, while it runs
  uint64_t secret_tag = 0;       // the secret it proved (auth::SecretTag); 0: none
  bool tag_is_peer = false;      // that secret is a peer secret (else a gateway secret)
  uint64_t secrets_version = 0;  // the node's secrets when the tag was last checked
};

class Authenticator {
 public:
  struct Options {
    std::string node_name;  // in the challenge
    uint32_t max_frame_bytes = 0;
    auth::Secrets secrets;       // the gateway secret(s); empty: gateways prove nothing
    auth::Secrets peer_secrets;  // the peer secret(s); empty: none
    bool peer_tls = false;       // node certificates are told from gateways' by the peer CA
    // How far apart the nodes' wall clocks may be: a split token is honoured this long past
    // its time.
    int64_t clock_skew_ms = 1000;
  };
  explicit Authenticator(Options options);

  // A new connection's session: authenticated already when no gateway secret is needed, and
  // a peer too when the node authenticates nobody at all.
  Session NewSession() const;
  // The connection's TLS client certificate was checked against the peer CA.
  static void NoteTlsNode(Session& session, bool node_certificate) {
    session.tls_node = node_certificate;
  }
  // False once the secret a session proved has been removed (rotation): its connection must
  // be closed. One load and compare while the secrets are unchanged.
  bool SessionValid(Session& session) const;
  // The largest frame a connection may send next: small until it has authenticated.
  uint32_t FrameLimit(const Session& session) const;

  // Whether the frame's hello asks for a handshake this session has not had.
  bool WantsHandshake(const Session& session, const wire::Request& request) const;
  // One hello of the handshake. kProceed: the frame's ops may be handled, `node_proof` is
  // the node's answer (when a secret was proved); kAnswered: `out` holds the challenge; an
  // error: the refusal, after which the connection is closed.
  enum class Step { kProceed, kAnswered };
  Result<Step> Authenticate(Session& session, const wire::Request& request,
                            std::vector<uint8_t>& out, std::optional<auth::Mac>& node_proof) const;
  // Whether the session may send `what`, a node-to-node op, speaking for `member` (null: it
  // names none); the error says why not.
  Status MayActAsPeer(const Session* session, std::string_view what,
                      const std::string* member) const;

  // Replace the gateway (or peer) secrets: rotation. Only a node started with such a secret
  // has any to replace; an empty set is ignored. A set sharing a value with the other kind's
  // is refused (a gateway could act as a node) and the secrets stay as they were. Sessions
  // that proved a removed secret end at their next frame (SessionValid).
  Status SetSecrets(auth::Secrets secrets);
  Status SetPeerSecrets(auth::Secrets secrets);
  // The secret this node proves with (the first); empty: none.
  std::string current_secret() const;
  std::string current_peer_secret() const;
  // Whether `token` is the admin token of one of the peer secrets (false without any).
  bool AdminTokenValid(std::string_view token) const;
  bool requires_secret() const { return requires_secret_; }
  bool has_peer_secret() const { return has_peer_secret_; }
  // No credential of any kind: every session may do everything (loopback, or --insecure).
  bool trusts_everyone() const { return trust_all_; }
  bool peer_tls() const { return options_.peer_tls; }

  // Split views. A token for a view of key `key` of policy `policy` split k ways in `epoch`,
  // valid for `valid_ms` from now; nullopt without a gateway secret (peers are trusted).
  std::optional<auth::SplitToken> SignSplit(std::string_view policy, std::string_view key,
                                            uint16_t k, uint32_t epoch, int64_t valid_ms) const;
  // Checks a token from an op on a sub-bucket this node does not own the key of: ok, or
  // why it is refused, and whether a member made it and it only lapsed (the gateway's view
  // is out of date) rather than being forged.
  struct TokenCheck {
    Status status;
    bool lapsed = false;
  };
  TokenCheck CheckSplitToken(std::span<const uint8_t> token, std::string_view policy,
                             std::string_view key, uint16_t k, uint32_t epoch) const;
  // A split token is honoured this long past its time (0 without a secret).
  int64_t token_grace_ms() const { return requires_secret_ ? options_.clock_skew_ms : 0; }

 private:
  const Options options_;
  const bool requires_secret_;
  const bool has_peer_secret_;
  const bool trust_all_;
  SharedValue<const auth::Secrets> secrets_;
  SharedValue<const auth::Secrets> peer_secrets_;
  // Bumped whenever either set changes: a session rechecks its secret when it differs.
  std::atomic<uint64_t> secrets_version_{1};
};

}  // namespace limiter
