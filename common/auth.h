// The cluster secret: where it comes from, the proofs of it that a hello carries, and the
// tokens that let a node check a split it did not make.
//
// Proof, not the secret, crosses the network: HMAC-SHA256 over a node challenge and a client
// nonce, both random per connection, so a recorded hello cannot be replayed on another
// connection, and proofs are compared in constant time. A node holds one or two secrets, the
// current and the next (rotation); a client proves with one.
//
// The secret never comes from a command-line argument (it would show in `ps`): a file named
// by --secret-file or LIMITER_SECRET_FILE, or the LIMITER_SECRET variable.
//
// Thread-safety: pure functions; Secrets is a value.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

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

Nonce RandomNonce();
bool EqualConstantTime(Bytes a, Bytes b);

Mac ClientProof(std::string_view secret, Bytes challenge, Bytes nonce);
Mac NodeProof(std::string_view secret, Bytes challenge, Bytes nonce);
// The cluster's key-id seed (key_id.h) from its secret: secret-derived, so that nobody outside
// the cluster can compute key ids; a fixed one for an empty secret.
uint64_t KeyIdSeedOf(std::string_view secret);
// The index of the secret in `secrets` that made `proof`, or -1. Every secret is tried, so
// the time taken does not say which matched.
int MatchClientProof(const Secrets& secrets, Bytes challenge, Bytes nonce, Bytes proof);

// A token for a split of (policy, key) into k sub-buckets, epoch `epoch`, valid until
// `expires_unix_ms`.
SplitToken MakeSplitToken(std::string_view secret, std::string_view policy, std::string_view key,
                          uint16_t k, uint32_t epoch, int64_t expires_unix_ms);
// Empty when the token was made with one of `secrets` for exactly this split and has not
// lapsed by `now_unix_ms - skew_ms`; else what is wrong with it.
std::string CheckSplitToken(const Secrets& secrets, Bytes token, std::string_view policy,
                            std::string_view key, uint16_t k, uint32_t epoch, int64_t now_unix_ms,
                            int64_t skew_ms);

}  // namespace limiter::auth
