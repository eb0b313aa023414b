#include "protocol/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <cstring>

#include "common/read_file.h"

namespace limiter::auth {
namespace {

constexpr std::string_view kHelloLabel = "limiter hello v1";
constexpr std::string_view kNodeLabel = "limiter node v1";
constexpr std::string_view kSplitLabel = "limiter split v1";
constexpr std::string_view kPeerHelloLabel = "limiter peer hello v1";
constexpr std::string_view kPeerNodeLabel = "limiter peer node v1";
constexpr std::string_view kAdminLabel = "limiter admin v1";

struct KindNames {
  const char* file_var;
  const char* value_var;
  const char* next_var;  // null: one value only
  std::string_view name;
};
KindNames NamesOf(SecretKind kind) {
  switch (kind) {
    case SecretKind::kGateway:
      return {"LIMITER_SECRET_FILE", "LIMITER_SECRET", "LIMITER_SECRET_NEXT", "the gateway secret"};
    case SecretKind::kPeer:
      return {"LIMITER_PEER_SECRET_FILE", "LIMITER_PEER_SECRET", "LIMITER_PEER_SECRET_NEXT",
              "the peer secret"};
    case SecretKind::kKeySeed:
      break;
  }
  return {"LIMITER_KEY_SEED_FILE", "LIMITER_KEY_SEED", nullptr, "the key-id seed"};
}

std::string_view Trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// HMAC-SHA256 of the parts, each preceded by its length so that no two part lists collide.
Mac Hmac(std::string_view secret, std::initializer_list<Bytes> parts) {
  std::vector<uint8_t> message;
  for (Bytes part : parts) {
    const uint32_t n = static_cast<uint32_t>(part.size());
    for (int i = 0; i < 4; ++i) message.push_back(static_cast<uint8_t>(n >> (8 * i)));
    message.insert(message.end(), part.begin(), part.end());
  }
  Mac mac{};
  unsigned int length = 0;
  const unsigned char* ok = HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
                                 message.data(), message.size(), mac.data(), &length);
  // A broken crypto library: no proof can be trusted.
  LIMITER_CHECK(ok != nullptr && length == mac.size(), "HMAC-SHA256 failed in OpenSSL");
  return mac;
}

Bytes AsBytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

std::array<uint8_t, 8> Le64(uint64_t v) {
  std::array<uint8_t, 8> out{};
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
  return out;
}

Mac SplitMac(std::string_view secret, std::string_view policy, std::string_view key, uint16_t k,
             uint32_t epoch, int64_t expires) {
  const auto split = Le64((uint64_t{k} << 32) | epoch);
  const auto until = Le64(static_cast<uint64_t>(expires));
  return Hmac(secret, {AsBytes(kSplitLabel), AsBytes(policy), AsBytes(key), split, until});
}

}  // namespace

Result<Secrets> ParseSecrets(std::string_view text, const std::string& where) {
  Secrets out;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t end = text.find('\n');
    const std::string_view line = Trim(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (line.empty()) continue;
    const std::string at = where + ":" + std::to_string(line_no);
    if (line.size() < kMinSecretBytes) {
      return Error{at + ": the secret is " + std::to_string(line.size()) + " bytes; use at least " +
                   std::to_string(kMinSecretBytes) + " (e.g. `openssl rand -hex 32`)"};
    }
    if (line.size() > kMaxSecretBytes) {
      return Error{at + ": the secret is longer than " + std::to_string(kMaxSecretBytes) +
                   " bytes"};
    }
    if (out.values.size() == kMaxSecrets) {
      return Error{at + ": more than two secrets (the current one and the next)"};
    }
    out.values.emplace_back(line);
  }
  if (out.empty()) return Error{where + ": no secret in it"};
  return out;
}

Result<Secrets> LoadSecretFile(const std::string& path) {
  Result<std::string> text = ReadWholeFile(path, "secret");
  if (!text) return Error{text.error()};
  return ParseSecrets(*text, path);
}

Result<SecretSource> FindSecrets(const std::string& file) {
  return FindSecrets(file, SecretKind::kGateway);
}

std::string_view SecretKindName(SecretKind kind) { return NamesOf(kind).name; }

Result<SecretSource> FindSecrets(const std::string& file, SecretKind kind) {
  const KindNames names = NamesOf(kind);
  const auto one_only = [&](Result<Secrets> s) -> Result<Secrets> {
    if (s && names.next_var == nullptr && s->values.size() > 1) {
      return Error{std::string(names.name) +
                   " is one value, never two: it does not rotate (key ids depend on it)"};
    }
    return s;
  };
  SecretSource source;
  const char* env_file = std::getenv(names.file_var);
  const char* env_secret = std::getenv(names.value_var);
  if (!file.empty() || (env_file != nullptr && *env_file != '\0')) {
    source.file = !file.empty() ? file : env_file;
    Result<Secrets> s = one_only(LoadSecretFile(source.file));
    if (!s) return Error{s.error()};
    source.secrets = std::move(s).value();
    source.description = "file " + source.file;
    return source;
  }
  if (env_secret != nullptr && *env_secret != '\0') {
    std::string text = env_secret;
    if (const char* next = names.next_var ? std::getenv(names.next_var) : nullptr;
        next != nullptr && *next) {
      text += '\n';
      text += next;
    }
    Result<Secrets> s = one_only(ParseSecrets(text, std::string("$") + names.value_var));
    if (!s) return Error{s.error()};
    source.secrets = std::move(s).value();
    source.description = std::string("$") + names.value_var;
    return source;
  }
  source.description = "none";
  return source;
}

bool Overlap(const Secrets& a, const Secrets& b) {
  for (const std::string& x : a.values) {
    for (const std::string& y : b.values) {
      if (x == y) return true;
    }
  }
  return false;
}

Nonce RandomNonce() {
  Nonce n{};
  // A predictable challenge would make every proof replayable.
  LIMITER_CHECK(RAND_bytes(n.data(), static_cast<int>(n.size())) == 1,
                "OpenSSL has no randomness (RAND_bytes failed)");
  return n;
}

bool EqualConstantTime(Bytes a, Bytes b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Mac ClientProof(std::string_view secret, Bytes challenge, Bytes nonce) {
  return Hmac(secret, {AsBytes(kHelloLabel), challenge, nonce});
}

uint64_t KeyIdSeedOf(std::string_view secret) {
  if (secret.empty()) return 0x6c696d697465723a;  // "limiter:": no secret, nothing to hide
  const Mac mac = Hmac(secret, {AsBytes("limiter key-id seed v1")});
  uint64_t seed = 0;
  for (int i = 0; i < 8; ++i) seed = seed << 8 | mac[static_cast<size_t>(i)];
  return seed;
}

Mac NodeProof(std::string_view secret, Bytes challenge, Bytes nonce) {
  return Hmac(secret, {AsBytes(kNodeLabel), challenge, nonce});
}

int MatchClientProof(const Secrets& secrets, Bytes challenge, Bytes nonce, Bytes proof) {
  int match = -1;
  for (size_t i = 0; i < secrets.values.size(); ++i) {
    const Mac expected = ClientProof(secrets.values[i], challenge, nonce);
    if (EqualConstantTime(expected, proof) && match < 0) match = static_cast<int>(i);
  }
  return match;
}

Mac PeerProof(std::string_view peer_secret, Bytes challenge, Bytes nonce, std::string_view name) {
  return Hmac(peer_secret, {AsBytes(kPeerHelloLabel), challenge, nonce, AsBytes(name)});
}

Mac PeerNodeProof(std::string_view peer_secret, Bytes challenge, Bytes nonce,
                  std::string_view name) {
  return Hmac(peer_secret, {AsBytes(kPeerNodeLabel), challenge, nonce, AsBytes(name)});
}

int MatchPeerProof(const Secrets& peer_secrets, Bytes challenge, Bytes nonce, std::string_view name,
                   Bytes proof) {
  int match = -1;
  for (size_t i = 0; i < peer_secrets.values.size(); ++i) {
    const Mac expected = PeerProof(peer_secrets.values[i], challenge, nonce, name);
    if (EqualConstantTime(expected, proof) && match < 0) match = static_cast<int>(i);
  }
  return match;
}

std::string AdminToken(std::string_view peer_secret) {
  const Mac mac = Hmac(peer_secret, {AsBytes(kAdminLabel)});
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : mac) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  return hex;
}

bool MatchAdminToken(const Secrets& peer_secrets, std::string_view token) {
  bool match = false;
  for (const std::string& secret : peer_secrets.values) {
    match |= EqualConstantTime(AsBytes(AdminToken(secret)), AsBytes(token));
  }
  return match;
}

uint64_t SecretTag(std::string_view secret) {
  const Mac mac = Hmac(secret, {AsBytes("limiter secret tag v1")});
  uint64_t tag = 0;
  for (int i = 0; i < 8; ++i) tag = tag << 8 | mac[static_cast<size_t>(i)];
  return tag;
}

SplitToken MakeSplitToken(std::string_view secret, std::string_view policy, std::string_view key,
                          uint16_t k, uint32_t epoch, int64_t expires_unix_ms) {
  SplitToken token{};
  const auto until = Le64(static_cast<uint64_t>(expires_unix_ms));
  std::memcpy(token.data(), until.data(), until.size());
  const Mac mac = SplitMac(secret, policy, key, k, epoch, expires_unix_ms);
  std::memcpy(token.data() + 8, mac.data(), kSplitTokenBytes - 8);
  return token;
}

Status CheckSplitToken(const Secrets& secrets, Bytes token, std::string_view policy,
                       std::string_view key, uint16_t k, uint32_t epoch, int64_t now_unix_ms,
                       int64_t skew_ms) {
  if (token.empty()) return Error{"the op on a sub-bucket carries no split_token"};
  if (token.size() != kSplitTokenBytes) {
    return Error{"split_token is " + std::to_string(token.size()) + " bytes, not " +
                 std::to_string(kSplitTokenBytes)};
  }
  uint64_t until = 0;
  for (int i = 7; i >= 0; --i) until = (until << 8) | token[static_cast<size_t>(i)];
  const int64_t expires = static_cast<int64_t>(until);
  bool valid = false;
  for (const std::string& secret : secrets.values) {
    const Mac mac = SplitMac(secret, policy, key, k, epoch, expires);
    valid |= EqualConstantTime(Bytes(mac.data(), kSplitTokenBytes - 8), token.subspan(8));
  }
  if (!valid) return Error{"split_token was not made for this split by a member of this cluster"};
  if (now_unix_ms - skew_ms > expires) return Error{"split_token has lapsed; renew the split"};
  return Status::Ok();
}

}  // namespace limiter::auth
