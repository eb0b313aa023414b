// Node's defences against its peers: the cluster secret's handshake, the bounds on what one
// frame may ask for, and the check that an op on a sub-bucket names a real split.
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

void Node::SetSecrets(auth::Secrets secrets) {
  if (!requires_secret_ || secrets.empty()) return;
  secrets_.store(std::make_shared<const auth::Secrets>(std::move(secrets)));
}

Node::Session Node::NewSession() const {
  Session s;
  s.authenticated = !requires_secret_;
  return s;
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
  const auth::Bytes nonce = BytesOf(hello->nonce());
  const auth::Bytes proof = BytesOf(hello->proof());
  if (nonce.size() != auth::kNonceBytes) {
    return refuse("hello.nonce must be " + std::to_string(auth::kNonceBytes) +
                  " random bytes; this node requires the cluster secret");
  }
  if (proof.empty()) {
    if (session.challenged) return refuse("a second hello without a proof; one challenge only");
    if (request.ops() && request.ops()->size() > 0) {
      return refuse("ops before authentication: answer the challenge first");
    }
    session.challenged = true;
    session.challenge = auth::RandomNonce();
    std::copy(nonce.begin(), nonce.end(), session.nonce.begin());
    auto& fbb = w.fbb;
    fbb.Clear();
    const auto name = fbb.CreateString(options_.name);
    const auto challenge = fbb.CreateVector(session.challenge.data(), session.challenge.size());
    wire::HelloReplyBuilder h(fbb);
    h.add_protocol_version(kProtocolVersion);
    h.add_node(name);
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
  if (!auth::EqualConstantTime(nonce, session.nonce)) {
    return refuse("hello.nonce differs from the one the challenge was made for");
  }
  const std::shared_ptr<const auth::Secrets> secrets = secrets_.load();
  const int match = auth::MatchClientProof(*secrets, session.challenge, nonce, proof);
  if (match < 0) return refuse("hello.proof does not match the cluster secret");
  session.authenticated = true;
  node_proof =
      auth::NodeProof(secrets->values[static_cast<size_t>(match)], session.challenge, nonce);
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

std::optional<std::string> Node::SplitError(const Policy& p, std::string_view key,
                                            const wire::Op& op, const Membership& m) {
  const std::string_view key_routing = protocol::RoutingKey(p, key, {});
  if (m.ring.empty() || m.ring.Owner(key_routing) == options_.self) {
    // This node owns the key: its own record says whether the split is real.
    const KeyId id = protocol::LimitId(p, key, {});
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    const Store::Split* split = store_.FindSplit(id);
    if (split == nullptr || split->k != op.split_k() || split->epoch != op.split_epoch()) {
      return "the key is not split " + std::to_string(op.split_k()) + " ways in epoch " +
             std::to_string(op.split_epoch()) + " on its owner; ask its owner again";
    }
    return std::nullopt;
  }
  if (!requires_secret_) return std::nullopt;  // no secret: peers are trusted
  const std::shared_ptr<const auth::Secrets> secrets = secrets_.load();
  const std::string why =
      auth::CheckSplitToken(*secrets, BytesOf(op.split_token()), p.name, key, op.split_k(),
                            op.split_epoch(), UnixMs(), options_.clock_skew_ms);
  if (why.empty()) return std::nullopt;
  return why;
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

}  // namespace limiter
