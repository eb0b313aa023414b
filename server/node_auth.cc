// Node's defences against its peers: the handshakes of the gateway and peer credentials and the
// roles they give, the bounds on what one frame may ask for, and the check that an op on a
// sub-bucket names a real split.
#include <chrono>

#include "common/limits.h"
#include "common/protocol.h"
#include "common/wire.h"
#include "server/node.h"
#include "server/node_internal.h"

namespace limiter {
namespace {

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

auth::Bytes BytesOf(const flatbuffers::Vector<uint8_t>* v) {
  return v ? auth::Bytes(v->data(), v->size()) : auth::Bytes();
}

}  // namespace

std::optional<std::string> Node::SetSecrets(auth::Secrets secrets) {
  if (!requires_secret_ || secrets.empty()) return std::nullopt;
  if (auth::Overlap(secrets, *peer_secrets_.load())) {
    return "a gateway secret is also a peer secret: every gateway could act as a node";
  }
  secrets_.store(std::make_shared<const auth::Secrets>(std::move(secrets)));
  secrets_version_.fetch_add(1);
  return std::nullopt;
}

std::optional<std::string> Node::SetPeerSecrets(auth::Secrets secrets) {
  if (!has_peer_secret_ || secrets.empty()) return std::nullopt;
  if (auth::Overlap(secrets, *secrets_.load())) {
    return "the peer secret is also a gateway secret: every gateway could act as a node";
  }
  peer_secrets_.store(std::make_shared<const auth::Secrets>(std::move(secrets)));
  secrets_version_.fetch_add(1);
  return std::nullopt;
}

Node::Session Node::NewSession() const {
  Session s;
  s.authenticated = !requires_secret_;
  s.peer = trust_all_;
  s.secrets_version = secrets_version_.load(std::memory_order_relaxed);
  return s;
}

bool Node::SessionValid(Session& session) const {
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

bool Node::AdminTokenValid(std::string_view token) const {
  if (!has_peer_secret_) return false;
  return auth::MatchAdminToken(*peer_secrets_.load(), token);
}

bool Node::WantsHandshake(const Session& session, const wire::Request& request) const {
  if (!session.authenticated) return true;
  const wire::Hello* hello = request.hello();
  // A gateway session's hello that names a member: the step up to the peer role, when this
  // node has a peer credential to check.
  return hello != nullptr && !session.peer && hello->peer_name() != nullptr &&
         (has_peer_secret_ || options_.peer_tls);
}

std::optional<std::string> Node::PeerOpRefusal(Worker& w, std::string_view what,
                                               const std::string* member) {
  const Session* s = w.session;
  if (trust_all_ || s == nullptr || s->in_process) return std::nullopt;
  std::string why;
  if (!s->peer) {
    why = std::string(what) +
          " is for nodes only: this connection did not prove the peer credential (a gateway "
          "holds the gateway secret, which allows ops about keys, not node-to-node ops)";
  } else if (member != nullptr && *member != s->peer_name) {
    why = std::string(what) + " speaks for " + member->substr(0, kMaxNameBytes) +
          ", but this connection proved the peer credential for " + s->peer_name +
          "; a node speaks only for itself";
  } else {
    return std::nullopt;
  }
  w.counters.peer_refusals.Add();
  return why;
}

Node::Gate Node::Authenticate(Worker& w, Session& session, const wire::Request& request,
                              std::vector<uint8_t>& out, std::optional<auth::Mac>& node_proof) {
  const auto refuse = [&](std::string_view why) {
    w.counters.auth_failures.Add();
    ErrorFrame(w, why, out);
    return Gate::kRefused;
  };
  const wire::Hello* hello = request.hello();
  if (hello == nullptr) {
    return refuse(
        "this node requires the cluster secret: start the connection with a hello carrying a "
        "nonce, then one carrying the proof (see the README's security model)");
  }
  const flatbuffers::String* peer_name = hello->peer_name();
  if (peer_name != nullptr && (peer_name->size() == 0 || peer_name->size() > kMaxNameBytes)) {
    return refuse("hello.peer_name: a member is host:port, 1 to " +
                  std::to_string(kMaxNameBytes) + " bytes");
  }
  const std::string name = peer_name ? peer_name->str() : std::string();
  // A proof is asked for the gateway secret (a session not yet authenticated, when the node
  // has one) or the peer secret (a session naming a member, when the node has one).
  const bool wants_gateway = !session.authenticated && requires_secret_;
  const bool wants_peer = peer_name != nullptr && has_peer_secret_;
  if (!wants_gateway && !wants_peer) {
    // Nothing to prove: the gateway role is open here, and a peer is known by its TLS
    // certificate alone (or cannot be one).
    session.authenticated = true;
    if (peer_name != nullptr && options_.peer_tls && session.tls_node) {
      session.peer = true;
      session.peer_name = name;
    }
    return Gate::kProceed;
  }
  const auth::Bytes nonce = BytesOf(hello->nonce());
  const auth::Bytes proof = BytesOf(hello->proof());
  const auth::Bytes peer_proof = BytesOf(hello->peer_proof());
  if (nonce.size() != auth::kNonceBytes) {
    return refuse("hello.nonce must be " + std::to_string(auth::kNonceBytes) +
                  " random bytes; this node requires the cluster secret");
  }
  if (proof.empty() && peer_proof.empty()) {
    if (session.challenged) return refuse("a second hello without a proof; one challenge only");
    if (request.ops() && request.ops()->size() > 0) {
      return refuse("ops before authentication: answer the challenge first");
    }
    session.challenged = true;
    session.challenge = auth::RandomNonce();
    session.claimed = name;
    std::copy(nonce.begin(), nonce.end(), session.nonce.begin());
    auto& fbb = w.fbb;
    fbb.Clear();
    const auto node_name = fbb.CreateString(options_.name);
    const auto challenge = fbb.CreateVector(session.challenge.data(), session.challenge.size());
    wire::HelloReplyBuilder h(fbb);
    h.add_protocol_version(kProtocolVersion);
    h.add_node(node_name);
    h.add_max_frame_bytes(FrameLimit(session));
    h.add_challenge(challenge);
    const auto hello_reply = h.Finish();
    wire::ReplyBuilder reply(fbb);
    reply.add_hello(hello_reply);
    fbb.Finish(reply.Finish());
    AppendFrame(out, {fbb.GetBufferPointer(), fbb.GetSize()});
    return Gate::kAnswered;
  }
  if (!session.challenged) {
    return refuse("hello.proof without a challenge: send a hello with only a nonce first");
  }
  session.challenged = false;  // one answer per challenge
  if (!auth::EqualConstantTime(nonce, session.nonce)) {
    return refuse("hello.nonce differs from the one the challenge was made for");
  }
  if (!peer_proof.empty()) {
    if (!has_peer_secret_) return refuse("hello.peer_proof: this node holds no peer secret");
    if (name != session.claimed || name.empty()) {
      return refuse("hello.peer_name must name the same member in both hellos");
    }
    const std::shared_ptr<const auth::Secrets> secrets = peer_secrets_.load();
    const int match = auth::MatchPeerProof(*secrets, session.challenge, nonce, name, peer_proof);
    if (match < 0) return refuse("hello.peer_proof does not match the peer secret");
    if (options_.peer_tls && !session.tls_node) {
      return refuse("hello.peer_proof over TLS needs a node certificate (signed by the peer CA)");
    }
    const std::string& secret = secrets->values[static_cast<size_t>(match)];
    session.authenticated = true;
    session.peer = true;
    session.peer_name = name;
    session.secret_tag = auth::SecretTag(secret);
    session.tag_is_peer = true;
    node_proof = auth::PeerNodeProof(secret, session.challenge, nonce, name);
    return Gate::kProceed;
  }
  if (!requires_secret_) {
    return refuse("hello.proof: this node holds no gateway secret; a peer proves peer_proof");
  }
  const std::shared_ptr<const auth::Secrets> secrets = secrets_.load();
  const int match = auth::MatchClientProof(*secrets, session.challenge, nonce, proof);
  if (match < 0) return refuse("hello.proof does not match the cluster secret");
  const std::string& secret = secrets->values[static_cast<size_t>(match)];
  session.authenticated = true;
  session.secret_tag = auth::SecretTag(secret);
  if (!session.claimed.empty() && options_.peer_tls && !has_peer_secret_ && session.tls_node) {
    session.peer = true;  // the node certificate is the peer credential here
    session.peer_name = session.claimed;
  }
  node_proof = auth::NodeProof(secret, session.challenge, nonce);
  return Gate::kProceed;
}

std::optional<std::string> Node::FrameBoundError(const wire::Request& request) const {
  const auto* ops = request.ops();
  if (ops == nullptr) return std::nullopt;
  if (ops->size() > options_.max_ops_per_frame) {
    return "the frame has " + std::to_string(ops->size()) + " ops; at most " +
           std::to_string(options_.max_ops_per_frame) + " are allowed per frame";
  }
  uint32_t stats = 0, hot = 0, inspects = 0;
  for (const wire::Op* op : *ops) {
    stats += op->type() == wire::OpType::Stats;
    hot += op->type() == wire::OpType::HotKeys;
    // A question about region shares costs what an INSPECT does.
    inspects += op->type() == wire::OpType::Inspect || op->type() == wire::OpType::Regions;
  }
  if (stats > 1)
    return "the frame asks for STATS " + std::to_string(stats) + " times; once at most";
  if (hot > 1) return "the frame asks for HOTKEYS " + std::to_string(hot) + " times; once at most";
  if (inspects > options_.max_inspects_per_frame) {
    return "the frame has " + std::to_string(inspects) + " INSPECT (or REGIONS) ops; at most " +
           std::to_string(options_.max_inspects_per_frame) + " are allowed per frame";
  }
  return std::nullopt;
}

std::optional<Node::SplitRefusal> Node::SplitError(int policy, const Policy& p,
                                                   std::string_view key, const wire::Op& op,
                                                   const Membership& m, int64_t now,
                                                   OpResult& r) {
  const std::string_view key_routing = protocol::RoutingKey(p, key, {});
  if (m.ring.empty() || m.ring.Owner(key_routing) == options_.self) {
    // This node owns the key: its own record says whether the split is real. When it is not,
    // the gateway's view is out of date (the key merged, or split again): it gets the split
    // as it is now, as any op on the key would.
    const KeyId id = protocol::LimitId(p, key, {});
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    Store::Split* split = store_.FindSplit(id);
    if (split != nullptr && split->k == op.split_k() && split->epoch == op.split_epoch()) {
      return std::nullopt;
    }
    std::string why = "the key is not split " + std::to_string(op.split_k()) +
                      " ways in epoch " + std::to_string(op.split_epoch()) + " on its owner; ";
    const std::optional<int64_t> view =
        split ? HandOutView(policy, id, *split, now) : std::nullopt;
    if (view) {
      PutSplit(p, key, *split, *view, now, r);
      why += "it is split " + std::to_string(split->k) + " ways in epoch " +
             std::to_string(split->epoch) + " now";
    } else {
      why += "it is not split now";  // split_k 0
    }
    return SplitRefusal{wire::Status::SplitChanged, std::move(why)};
  }
  if (!requires_secret_) return std::nullopt;  // no secret: peers are trusted
  const std::shared_ptr<const auth::Secrets> secrets = secrets_.load();
  const auth::Bytes token = BytesOf(op.split_token());
  std::string why = auth::CheckSplitToken(*secrets, token, p.name, key, op.split_k(),
                                          op.split_epoch(), UnixMs(), options_.clock_skew_ms);
  if (why.empty()) return std::nullopt;
  // A token a member made that was good at any time has lapsed: the gateway's view is out of
  // date, and the owner has the split now (this node does not).
  const bool lapsed = auth::CheckSplitToken(*secrets, token, p.name, key, op.split_k(),
                                            op.split_epoch(), 0, 0)
                          .empty();
  if (lapsed) why += "; ask the key's owner for its split now";
  return SplitRefusal{lapsed ? wire::Status::SplitChanged : wire::Status::BadRequest,
                      std::move(why)};
}

void Node::SignSplit(const Policy& p, std::string_view key, uint16_t k, uint32_t epoch,
                     int64_t valid_ms, OpResult& r) {
  if (!requires_secret_) return;
  const std::shared_ptr<const auth::Secrets> secrets = secrets_.load();
  r.split_token =
      auth::MakeSplitToken(secrets->values.front(), p.name, key, k, epoch, UnixMs() + valid_ms);
  r.reply.split_token = r.split_token;
}

std::string Node::current_secret() const {
  const std::shared_ptr<const auth::Secrets> secrets = secrets_.load();
  return secrets->empty() ? std::string() : secrets->values.front();
}

std::string Node::current_peer_secret() const {
  const std::shared_ptr<const auth::Secrets> secrets = peer_secrets_.load();
  return secrets->empty() ? std::string() : secrets->values.front();
}

}  // namespace limiter
