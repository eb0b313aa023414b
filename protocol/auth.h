// The cluster's credentials: where they come from, the proofs of them that a hello carries,
// the tokens that let a node check a split it did not make, and the admin port's token.
//
// Two roles, two secrets (README "Security model"): the gateway secret, which every gateway
// and tool holds and which allows the ops about keys; and the peer secret, which only nodes
// hold and which alone allows what nodes say to each other (member-list changes, hand-offs,
// region reports) and the admin port's actions. A peer's proof also binds the member name it
// speaks for, so a receiving node knows which member sent a change.
//
// Proof, not the secret, crosses the network: HMAC-SHA256 over a node challenge and a client
// nonce, both random per connection, so a recorded hello cannot be replayed on another
// connection, and proofs are compared in constant time. A node holds one or two secrets of
// each kind, the current and the next (rotation); a client proves with one.
//
// The key-id seed (key_id.h) is a third value, of its own: it never rotates, so that key ids,
// which hand-offs and durable records carry, stay the same across a rotation.
//
// No secret ever comes from a command-line argument (it would show in `ps`): a file named by
// a flag or an environment variable, or the variable itself (SecretKind).
//
// Thread-safety: pure functions; Secrets is a value.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "limiter/status.h"

namespace limiter::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kMinSecretBytes = 16;
inline constexpr size_t kMaxSecretBytes = 1024;
inline constexpr size_t kMaxSecrets = 2;  // current and next
// A split token: the time it lapses (unix ms, 8 bytes little-endian), then a MAC.
inline constexpr size_t kSplitTokenBytes = 8 + 16;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;
using SplitToken = std::array<uint8_t, kSplitTokenBytes>;
using Bytes = std::span<const uint8_t>;

// The secrets a process holds: the first proves (and signs split tokens); a node accepts a
// proof made with any of them. Empty: no secret.
struct Secrets {
  std::vector<std::string> values;
  bool empty() const { return values.empty(); }
  bool operator==(const Secrets&) const = default;
};

// One secret per line (blank lines ignored, surrounding whitespace trimmed), one or two of
// them, each 16 to 1024 bytes. `where` names the source in errors.
Result<Secrets> ParseSecrets(std::string_view text, const std::string& where);
Result<Secrets> LoadSecretFile(const std::string& path);

// Where a process takes its secret, first found first: `file` (a --secret-file flag or a
// config entry), $LIMITER_SECRET_FILE, $LIMITER_SECRET (and $LIMITER_SECRET_NEXT). No
// secret anywhere is an empty Secrets, not an error.
struct SecretSource {
  std::string file;  // empty: none; else re-read by ReloadSecrets
  Secrets secrets;
  std::string description;  // "file /run/secret", "$LIMITER_SECRET", "none"
};
Result<SecretSource> FindSecrets(const std::string& file);

// The three kinds of value a process may hold, each from its own flag/config entry and
// variables: the gateway secret ($LIMITER_SECRET_FILE, $LIMITER_SECRET, $LIMITER_SECRET_NEXT),
// the peer secret ($LIMITER_PEER_SECRET_FILE, $LIMITER_PEER_SECRET, $LIMITER_PEER_SECRET_NEXT)
// and the key-id seed ($LIMITER_KEY_SEED_FILE, $LIMITER_KEY_SEED; one value, never two).
enum class SecretKind { kGateway, kPeer, kKeySeed };
Result<SecretSource> FindSecrets(const std::string& file, SecretKind kind);
// The name of a kind in messages: "the gateway secret", "the peer secret", "the key-id seed".
std::string_view SecretKindName(SecretKind kind);
// Whether a value is in both (a peer secret must never be a gateway secret).
bool Overlap(const Secrets& a, const Secrets& b);

Nonce RandomNonce();
bool EqualConstantTime(Bytes a, Bytes b);

Mac ClientProof(std::string_view secret, Bytes challenge, Bytes nonce);
Mac NodeProof(std::string_view secret, Bytes challenge, Bytes nonce);
// The cluster's key-id seed (key_id.h) from its seed value (or, for a node configured without
// one, its first secret): derived, so that nobody outside the cluster can compute key ids; a
// fixed one for an empty value.
uint64_t KeyIdSeedOf(std::string_view secret);
// The index of the secret in `secrets` that made `proof`, or -1. Every secret is tried, so
// the time taken does not say which matched.
int MatchClientProof(const Secrets& secrets, Bytes challenge, Bytes nonce, Bytes proof);

// A node's proof of the peer secret, speaking for member `name` ("host:port"), and the
// answering node's proof of the same secret for that name. Distinct labels from the gateway
// proofs: a gateway's proof never passes as a peer's, nor the other way round.
Mac PeerProof(std::string_view peer_secret, Bytes challenge, Bytes nonce, std::string_view name);
Mac PeerNodeProof(std::string_view peer_secret, Bytes challenge, Bytes nonce,
                  std::string_view name);
// The index of the secret that made a peer proof for `name`, or -1 (every secret tried).
int MatchPeerProof(const Secrets& peer_secrets, Bytes challenge, Bytes nonce, std::string_view name,
                   Bytes proof);

// The admin port's bearer token for its actions (POST /drain): hex of an HMAC of the peer
// secret, so that it proves the peer secret without carrying it (a token read off the wire
// drives the admin port, not the data port). `limiterctl admin-token` prints it.
std::string AdminToken(std::string_view peer_secret);
// Whether `token` is the admin token of one of `peer_secrets` (constant time, all tried).
bool MatchAdminToken(const Secrets& peer_secrets, std::string_view token);
// A short digest naming a secret in a session (which secret it proved, for revocation);
// never the secret, and not reversible.
uint64_t SecretTag(std::string_view secret);

// A token for a split of (policy, key) into k sub-buckets, epoch `epoch`, valid until
// `expires_unix_ms`.
SplitToken MakeSplitToken(std::string_view secret, std::string_view policy, std::string_view key,
                          uint16_t k, uint32_t epoch, int64_t expires_unix_ms);
// Ok when the token was made with one of `secrets` for exactly this split and has not lapsed
// by `now_unix_ms - skew_ms`; else what is wrong with it.
Status CheckSplitToken(const Secrets& secrets, Bytes token, std::string_view policy,
                       std::string_view key, uint16_t k, uint32_t epoch, int64_t now_unix_ms,
                       int64_t skew_ms);

}  // namespace limiter::auth
