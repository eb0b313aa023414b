#include "test/fuzz/frame_fuzz_target.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/policy_file.h"
#include "protocol/auth.h"
#include "protocol/frame_codec.h"
#include "protocol/key_id.h"
#include "protocol/wire.h"

namespace limiter::fuzz {
namespace {

constexpr size_t kSweepEveryFrames = 1024;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "frame fuzzer: %s\n", message.c_str());
  std::abort();
}

PolicySet LoadPolicies() {
  if (!KeyIdSeedUsed()) SetKeyIdSeed(kFuzzKeySeed);
  Result<PolicySet> policies = ParsePolicies(kPolicies, "fuzz-policies.yaml");
  if (!policies) Die(policies.error());
  return std::move(policies).value();
}

// One Request frame body holding a hello with `nonce` and, when given, `proof` (a gateway's)
// or, with `peer`, a peer's hello naming kFuzzPeer and its proof.
std::vector<uint8_t> HelloFrame(const auth::Nonce& nonce, const auth::Mac* proof,
                                bool peer = false) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto client = fbb.CreateString("fuzzer");
  const auto n = fbb.CreateVector(nonce.data(), nonce.size());
  const auto p = proof && !peer ? fbb.CreateVector(proof->data(), proof->size()) : 0;
  const auto name = peer ? fbb.CreateString(kFuzzPeer.data(), kFuzzPeer.size()) : 0;
  const auto pp = proof && peer ? fbb.CreateVector(proof->data(), proof->size()) : 0;
  const auto hello = wire::CreateHello(fbb, kProtocolVersion, client, n, p, name, pp);
  fbb.Finish(wire::CreateRequest(fbb, hello));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

NodeOptions FuzzOptions() {
  NodeOptions options;
  options.name = "fuzz-node";
  options.store.max_keys = 100;
  options.store.stripes = 4;
  options.sweep_budget = 64;
  return options;
}

// The reply frame `reply` (length prefix included) must be exactly one verified Reply. For a
// request that verified, it answers each op in order; otherwise it carries only an error.
void CheckReply(std::span<const uint8_t> reply, const wire::Request* request,
                std::vector<uint64_t>& scratch) {
  const FrameResult frame = DecodeFrame(reply, UINT32_MAX);
  if (frame.status != FrameStatus::kFrame || frame.consumed != reply.size()) {
    Die("the node appended " + std::to_string(reply.size()) + " bytes that are not one frame");
  }
  const wire::Reply* r = VerifiedReply(frame.body, scratch);
  if (r == nullptr) Die("a reply frame does not verify as a Reply");
  if (request == nullptr) {
    if (r->error() == nullptr || r->error()->size() == 0 || r->ops() != nullptr) {
      Die("a bad frame was not answered with an error reply alone");
    }
    return;
  }
  const size_t asked = request->ops() ? request->ops()->size() : 0;
  const size_t answered = r->ops() ? r->ops()->size() : 0;
  if (asked != answered) {
    Die(std::to_string(asked) + " ops asked, " + std::to_string(answered) + " answered");
  }
  for (size_t i = 0; i < asked; ++i) {
    const auto at = static_cast<flatbuffers::uoffset_t>(i);
    if (request->ops()->Get(at)->id() != r->ops()->Get(at)->id()) {
      Die("reply op " + std::to_string(i) + " carries another op's id");
    }
  }
  if ((request->hello() != nullptr) != (r->hello() != nullptr)) {
    Die("a hello was not answered with exactly one hello");
  }
}

// The store's key count is a reservation count: it must stay within [0, max_keys].
void CheckKeyCount(Store& store) {
  const int64_t keys = store.keys();
  if (keys < 0 || keys > store.max_keys()) {
    Die("the store counts " + std::to_string(keys) + " keys; the bound is " +
        std::to_string(store.max_keys()));
  }
}

}  // namespace

FuzzNode::FuzzNode()
    : policies(LoadPolicies()), node(policies, clock, FuzzOptions()), worker(node.AddWorker()) {}

FuzzNode& SharedFuzzNode() {
  static FuzzNode node;
  return node;
}

namespace {
NodeOptions FuzzAuthOptions() {
  NodeOptions options = FuzzOptions();
  options.secrets = auth::Secrets{{std::string(kFuzzSecret)}};
  options.peer_secrets = auth::Secrets{{std::string(kFuzzPeerSecret)}};
  options.self = std::string(kFuzzSelf);
  options.members = {std::string(kFuzzSelf), std::string(kFuzzPeer)};
  options.generation = 1;
  options.max_ops_per_frame = 64;
  options.max_reply_bytes = 64 * 1024;
  return options;
}

// A reply on a session: an error alone when the connection is to close, else an answer to
// the request (as CheckReply).
void CheckSessionReply(std::span<const uint8_t> reply, const wire::Request* request,
                       Node::AfterFrame after, std::vector<uint64_t>& scratch) {
  if (after == Node::AfterFrame::kClose || request == nullptr) {
    CheckReply(reply, nullptr, scratch);
    return;
  }
  CheckReply(reply, request, scratch);
}

// The client's side of the handshake on `session`, a gateway's or a peer's; aborts unless the
// node accepts it.
void Handshake(FuzzAuthNode& f, Session& session, bool peer) {
  const auth::Nonce nonce = auth::RandomNonce();
  std::vector<uint8_t> out;
  if (f.node.HandleFrame(f.worker, session, HelloFrame(nonce, nullptr, peer), out) !=
      Node::AfterFrame::kContinue) {
    Die("the node closed the connection on a nonce hello");
  }
  const FrameResult frame = DecodeFrame(out, UINT32_MAX);
  const wire::Reply* r = VerifiedReply(frame.body, f.reply_copy);
  if (!r || !r->hello() || !r->hello()->challenge() ||
      r->hello()->challenge()->size() != auth::kNonceBytes) {
    Die("a nonce hello was not answered with a challenge");
  }
  auth::Nonce challenge{};
  std::copy(r->hello()->challenge()->begin(), r->hello()->challenge()->end(), challenge.begin());
  const auth::Mac proof = peer ? auth::PeerProof(kFuzzPeerSecret, challenge, nonce, kFuzzPeer)
                               : auth::ClientProof(kFuzzSecret, challenge, nonce);
  out.clear();
  if (f.node.HandleFrame(f.worker, session, HelloFrame(nonce, &proof, peer), out) !=
          Node::AfterFrame::kContinue ||
      !session.authenticated || session.peer != peer) {
    Die("the node refused a valid proof");
  }
}
}  // namespace

FuzzAuthNode::FuzzAuthNode()
    : policies(LoadPolicies()),
      node(policies, clock, FuzzAuthOptions()),
      worker(node.AddWorker()) {}

FuzzAuthNode& SharedFuzzAuthNode() {
  static FuzzAuthNode node;
  return node;
}

size_t FeedSession(std::span<const uint8_t> input, Role role, std::vector<uint8_t>& replies) {
  FuzzAuthNode& f = SharedFuzzAuthNode();
  Session session = f.node.authenticator().NewSession();
  if (role != Role::kNone) Handshake(f, session, role == Role::kPeer);
  size_t handled = 0;
  // A peer's changes queue hand-off jobs; nothing runs them here, so each input's are run
  // (to a sink that takes nothing) before the next: memory stays bounded over a long run.
  struct Drain {
    FuzzAuthNode& f;
    ~Drain() {
      const Handoff::Sink refuse = [](const std::string&, std::span<const uint8_t>) {
        return int64_t{-1};
      };
      while (f.node.ownership().jobs_in_progress() > 0 &&
             f.node.handoff().RunNext(refuse, std::chrono::milliseconds(0))) {
      }
    }
  } drain{f};
  for (;;) {
    const uint32_t max_frame = f.node.authenticator().FrameLimit(session);
    const FrameResult frame = DecodeFrame(input, max_frame);
    if (frame.status != FrameStatus::kFrame) return handled;  // the server's framing errors
    f.clock.Advance(kStepMs);
    const size_t reply_at = replies.size();
    const std::shared_ptr<const ClusterRing> before = f.node.membership();
    const int64_t received = f.node.handoff().counters().keys_received.load();
    const Node::AfterFrame after = f.node.HandleFrame(f.worker, session, frame.body, replies);
    ++handled;
    if (role == Role::kNone && session.authenticated) {
      Die("a connection was authenticated without the proof");
    }
    if (role != Role::kPeer && session.peer) Die("a gateway's connection became a peer's");
    if (role != Role::kPeer && f.node.membership() != before) {
      Die("a connection without the peer secret changed the member list");
    }
    if (role != Role::kPeer && f.node.handoff().counters().keys_received.load() != received) {
      Die("a connection without the peer secret handed the node a key");
    }
    CheckSessionReply(std::span(replies).subspan(reply_at),
                      VerifiedRequest(frame.body, f.request_copy), after, f.reply_copy);
    CheckKeyCount(f.node.store());
    if (after == Node::AfterFrame::kClose) return handled;
    input = input.subspan(frame.consumed);
  }
}

void FeedStream(std::span<const uint8_t> input, std::vector<uint8_t>& replies) {
  FuzzNode& f = SharedFuzzNode();
  const uint32_t max_frame = f.node.options().max_frame_bytes;
  Session session = f.node.authenticator().NewSession();  // no secret: trusted from the start
  for (;;) {
    const FrameResult frame = DecodeFrame(input, max_frame);
    if (frame.status == FrameStatus::kNeedMore) return;
    const size_t reply_at = replies.size();
    if (frame.status != FrameStatus::kFrame) {
      f.node.ErrorFrame(f.worker, DescribeFrameError(frame, max_frame), replies);
      CheckReply(std::span(replies).subspan(reply_at), nullptr, f.reply_copy);
      return;
    }
    f.clock.Advance(kStepMs);
    // The body goes to the node where it is, at any alignment, as the server passes it. A
    // frame over a bound (ops, STATS, INSPECT, reply size) is refused whole, and the server
    // would close the connection.
    const Node::AfterFrame after = f.node.HandleFrame(f.worker, session, frame.body, replies);
    CheckSessionReply(std::span(replies).subspan(reply_at),
                      VerifiedRequest(frame.body, f.request_copy), after, f.reply_copy);
    if (++f.frames % kSweepEveryFrames == 0) f.node.Sweep();
    CheckKeyCount(f.node.store());
    if (after == Node::AfterFrame::kClose) return;
    input = input.subspan(frame.consumed);
  }
}

}  // namespace limiter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> replies;
  limiter::fuzz::FeedStream({data, size}, replies);
  replies.clear();
  limiter::fuzz::FeedSession({data, size}, limiter::fuzz::Role::kGateway, replies);
  replies.clear();
  limiter::fuzz::FeedSession({data, size}, limiter::fuzz::Role::kPeer, replies);
  replies.clear();
  limiter::fuzz::FeedSession({data, size}, limiter::fuzz::Role::kNone, replies);
  return 0;
}
