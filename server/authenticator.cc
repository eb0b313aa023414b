#include "server/authenticator.h"

#include <chrono>

#include "common/limits.h"
#include "protocol/frame_codec.h"
#include "protocol/wire.h"

namespace limiter {
namespace {

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Authenticator::Authenticator(Options options)
    : options_(std::move(options)),
      requires_secret_(!options_.secrets.empty()),
      has_peer_secret_(!options_.peer_secrets.empty()),
      trust_all_(!requires_secret_ && !has_peer_secret_ && !options_.peer_tls) {
  secrets_.store(std::make_shared<const auth::Secrets>(options_.secrets));
  peer_secrets_.store(std::make_shared<const auth::Secrets>(options_.peer_secrets));
}

Status Authenticator::SetSecrets(auth::Secrets secrets) {
  if (!requires_secret_ || secrets.empty()) return Status::Ok();
  if (auth::Overlap(secrets, *peer_secrets_.load())) {
    return Error{"a gateway secret is also a peer secret: every gateway could act as a node"};
  }
  secrets_.store(std::make_shared<const auth::Secrets>(std::move(secrets)));
  secrets_version_.fetch_add(1);
  return Status::Ok();
}

Status Authenticator::SetPeerSecrets(auth::Secrets secrets) {
  if (!has_peer_secret_ || secrets.empty()) return Status::Ok();
  if (auth::Overlap(secrets, *secrets_.load())) {
    return Error{"the peer secret is also a gateway secret: every gateway could act as a node"};
  }
  peer_secrets_.store(std::make_shared<const auth::Secrets>(std::move(secrets)));
  secrets_version_.fetch_add(1);
  return Status::Ok();
}

Session Authenticator::NewSession() const {
  Session s;
  s.authenticated = !requires_secret_;
  s.peer = trust_all_;
  s.secrets_version = secrets_version_.load(std::memory_order_relaxed);
  return s;
}

bool Authenticator::SessionValid(Session& session) const {
  const uint64_t version = secrets_version_.load(std::memory_order_relaxed);
  if (session.secrets_version == version) return true;
  if (session.secret_tag == 0) return true;  // proved nothing that can be removed
  const std::shared_ptr<const auth::Secrets> set =
      session.tag_is_peer ? peer_secrets_.load() : secrets_.load();
  for (const std::string& secret : set->values) {
    if (auth::SecretTag(secret) == session.secret_tag) {
      session.secrets_version = version;  // checked against this set: valid until it changes
      return true;
    }
  }
  return false;  // and stays so: the version is not taken, so every later check fails too
}

uint32_t Authenticator::FrameLimit(const Session& session) const {
  return session.authenticated ? options_.max_frame_bytes
                               : std::min(options_.max_frame_bytes, kMaxHelloFrameBytes);
}

bool Authenticator::AdminTokenValid(std::string_view token) const {
  if (!has_peer_secret_) return false;
  return auth::MatchAdminToken(*peer_secrets_.load(), token);
}

bool Authenticator::WantsHandshake(const Session& session, const wire::Request& request) const {
  if (!session.authenticated) return true;
  const wire::Hello* hello = request.hello();
  // A gateway session's hello that names a member: the step up to the peer role, when this
  // node has a peer credential to check.
  return hello != nullptr && !session.peer && hello->peer_name() != nullptr &&
         (has_peer_secret_ || options_.peer_tls);
}

Status Authenticator::MayActAsPeer(const Session* s, std::string_view what,
                                   const std::string* member) const {
  if (trust_all_ || s == nullptr || s->in_process) return Status::Ok();
  if (!s->peer) {
    return Error{std::string(what) +
                 " is for nodes only: this connection did not prove the peer credential (a "
                 "gateway holds the gateway secret, which allows ops about keys, not "
                 "node-to-node ops)"};
  }
  if (member != nullptr && *member != s->peer_name) {
    return Error{std::string(what) + " speaks for " + member->substr(0, kMaxNameBytes) +
                 ", but this connection proved the peer credential for " + s->peer_name +
                 "; a node speaks only for itself"};
  }
  return Status::Ok();
}

Result<Authenticator::Step> Authenticator::Authenticate(
    Session& session, const wire::Request& request, std::vector<uint8_t>& out,
    std::optional<auth::Mac>& node_proof) const {
  const wire::Hello* wire_hello = request.hello();
  if (wire_hello == nullptr) {
    return Error{
        "this node requires the cluster secret: start the connection with a hello carrying a "
        "nonce, then one carrying the proof (see docs/features/security.md)"};
  }
  Result<NodeHandshake::Hello> read = NodeHandshake::Read(*wire_hello);
  if (!read) return read.status();
  const NodeHandshake::Hello& hello = *read;
  // A proof is asked for the gateway secret (a session not yet authenticated, when the node
  // has one) or the peer secret (a session naming a member, when the node has one).
  const bool wants_gateway = !session.authenticated && requires_secret_;
  const bool wants_peer = hello.names_member && has_peer_secret_;
  if (!wants_gateway && !wants_peer) {
    // Nothing to prove: the gateway role is open here, and a peer is known by its TLS
    // certificate alone (or cannot be one).
    session.authenticated = true;
    if (hello.names_member && options_.peer_tls && session.tls_node) {
      session.peer = true;
      session.peer_name = hello.member;
    }
    return Step::kProceed;
  }
  NodeHandshake& handshake = session.handshake;
  const bool has_ops = request.ops() && request.ops()->size() > 0;
  Result<bool> challenged =
      handshake.Step(hello, has_ops, options_.node_name, FrameLimit(session), out);
  if (!challenged) return challenged.status();
  if (*challenged) return Step::kAnswered;
  if (!hello.peer_proof.empty()) {
    if (!has_peer_secret_) return Error{"hello.peer_proof: this node holds no peer secret"};
    if (hello.member != handshake.claimed() || hello.member.empty()) {
      return Error{"hello.peer_name must name the same member in both hellos"};
    }
    const std::shared_ptr<const auth::Secrets> secrets = peer_secrets_.load();
    const int match = auth::MatchPeerProof(*secrets, handshake.challenge(), hello.nonce,
                                           hello.member, hello.peer_proof);
    if (match < 0) return Error{"hello.peer_proof does not match the peer secret"};
    if (options_.peer_tls && !session.tls_node) {
      return Error{"hello.peer_proof over TLS needs a node certificate (signed by the peer CA)"};
    }
    const std::string& secret = secrets->values[static_cast<size_t>(match)];
    session.authenticated = true;
    session.peer = true;
    session.peer_name = hello.member;
    session.secret_tag = auth::SecretTag(secret);
    session.tag_is_peer = true;
    node_proof = auth::PeerNodeProof(secret, handshake.challenge(), hello.nonce, hello.member);
    return Step::kProceed;
  }
  if (!requires_secret_) {
    return Error{"hello.proof: this node holds no gateway secret; a peer proves peer_proof"};
  }
  const std::shared_ptr<const auth::Secrets> secrets = secrets_.load();
  const int match =
      auth::MatchClientProof(*secrets, handshake.challenge(), hello.nonce, hello.proof);
  if (match < 0) return Error{"hello.proof does not match the cluster secret"};
  const std::string& secret = secrets->values[static_cast<size_t>(match)];
  session.authenticated = true;
  session.secret_tag = auth::SecretTag(secret);
  if (!handshake.claimed().empty() && options_.peer_tls && !has_peer_secret_ && session.tls_node) {
    session.peer = true;  // the node certificate is the peer credential here
    session.peer_name = handshake.claimed();
  }
  node_proof = auth::NodeProof(secret, handshake.challenge(), hello.nonce);
  return Step::kProceed;
}

std::optional<auth::SplitToken> Authenticator::SignSplit(std::string_view policy,
                                                         std::string_view key, uint16_t k,
                                                         uint32_t epoch, int64_t valid_ms) const {
  if (!requires_secret_) return std::nullopt;
  const std::shared_ptr<const auth::Secrets> secrets = secrets_.load();
  return auth::MakeSplitToken(secrets->values.front(), policy, key, k, epoch, UnixMs() + valid_ms);
}

Authenticator::TokenCheck Authenticator::CheckSplitToken(std::span<const uint8_t> token,
                                                         std::string_view policy,
                                                         std::string_view key, uint16_t k,
                                                         uint32_t epoch) const {
  if (!requires_secret_) return {};  // no secret: peers are trusted
  const std::shared_ptr<const auth::Secrets> secrets = secrets_.load();
  TokenCheck check;
  check.status = auth::CheckSplitToken(*secrets, token, policy, key, k, epoch, UnixMs(),
                                       options_.clock_skew_ms);
  if (check.status.ok()) return check;
  // A token a member made that was good at any time has lapsed: the gateway's view is out of
  // date. Any other is forged.
  check.lapsed = auth::CheckSplitToken(*secrets, token, policy, key, k, epoch, 0, 0).ok();
  return check;
}

std::string Authenticator::current_secret() const {
  const std::shared_ptr<const auth::Secrets> secrets = secrets_.load();
  return secrets->empty() ? std::string() : secrets->values.front();
}

std::string Authenticator::current_peer_secret() const {
  const std::shared_ptr<const auth::Secrets> secrets = peer_secrets_.load();
  return secrets->empty() ? std::string() : secrets->values.front();
}

}  // namespace limiter
