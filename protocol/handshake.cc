#include "protocol/handshake.h"

#include "common/limits.h"
#include "protocol/frame_codec.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"

namespace limiter {

ClientHandshake::ClientHandshake(std::string secret, std::string address)
    : secret_(std::move(secret)), address_(std::move(address)), nonce_(auth::RandomNonce()) {}

ClientHandshake ClientHandshake::ForPeer(std::string secret, std::string peer_secret,
                                         std::string peer_name, std::string address) {
  ClientHandshake h(std::move(secret), std::move(address));
  h.peer_secret_ = std::move(peer_secret);
  h.peer_name_ = std::move(peer_name);
  return h;
}

void ClientHandshake::BuildNonceHello(RequestBuilder& b, std::string_view client) const {
  b.Clear();
  b.Hello(client, nonce_, {}, peer_name_);
}

Status ClientHandshake::BuildProofHello(const wire::Reply& reply, RequestBuilder& b,
                                        std::string_view client) {
  if (reply.error()) return Error{address_ + " refused the hello: " + reply.error()->str()};
  const wire::HelloReply* hello = reply.hello();
  if (hello == nullptr) return Error{address_ + " did not answer the hello"};
  if (hello->challenge() == nullptr) {
    // Whoever answers without asking for the secret cannot prove it holds it either.
    return Error{address_ + " does not ask for the cluster secret; refusing to trust it"};
  }
  if (hello->challenge()->size() != challenge_.size()) {
    return Error{address_ + " sent a challenge of " + std::to_string(hello->challenge()->size()) +
                 " bytes, not " + std::to_string(challenge_.size())};
  }
  std::copy(hello->challenge()->begin(), hello->challenge()->end(), challenge_.begin());
  b.Clear();
  if (!peer_secret_.empty()) {
    const auth::Mac proof = auth::PeerProof(peer_secret_, challenge_, nonce_, peer_name_);
    b.Hello(client, nonce_, {}, peer_name_, proof);
  } else {
    const auth::Mac proof = auth::ClientProof(secret_, challenge_, nonce_);
    b.Hello(client, nonce_, proof, peer_name_);
  }
  return Status::Ok();
}

Status ClientHandshake::CheckNode(const wire::Reply& reply) const {
  if (reply.error()) {
    return Error{address_ + " refused the cluster secret: " + reply.error()->str()};
  }
  const wire::HelloReply* hello = reply.hello();
  const bool peer = !peer_secret_.empty();
  const auth::Mac expected = peer
                                 ? auth::PeerNodeProof(peer_secret_, challenge_, nonce_, peer_name_)
                                 : auth::NodeProof(secret_, challenge_, nonce_);
  if (hello == nullptr || hello->proof() == nullptr ||
      !auth::EqualConstantTime(expected, {hello->proof()->data(), hello->proof()->size()})) {
    return Error{address_ + (peer ? " did not prove the peer secret in its hello"
                                  : " did not prove the cluster secret in its hello")};
  }
  return Status::Ok();
}

}  // namespace limiter

namespace limiter {

Result<NodeHandshake::Hello> NodeHandshake::Read(const wire::Hello& hello) {
  const auto bytes = [](const flatbuffers::Vector<uint8_t>* v) {
    return v ? auth::Bytes(v->data(), v->size()) : auth::Bytes();
  };
  Hello h;
  if (const flatbuffers::String* name = hello.peer_name()) {
    if (name->size() == 0 || name->size() > kMaxNameBytes) {
      return Error{"hello.peer_name: a member is host:port, 1 to " + std::to_string(kMaxNameBytes) +
                   " bytes"};
    }
    h.names_member = true;
    h.member = name->str();
  }
  h.nonce = bytes(hello.nonce());
  h.proof = bytes(hello.proof());
  h.peer_proof = bytes(hello.peer_proof());
  return h;
}

Result<bool> NodeHandshake::Step(const Hello& hello, bool has_ops, std::string_view node_name,
                                 uint32_t max_frame_bytes, std::vector<uint8_t>& out) {
  if (hello.nonce.size() != auth::kNonceBytes) {
    return Error{"hello.nonce must be " + std::to_string(auth::kNonceBytes) +
                 " random bytes; this node requires the cluster secret"};
  }
  if (!hello.has_proof()) {
    if (challenged_) return Error{"a second hello without a proof; one challenge only"};
    if (has_ops) return Error{"ops before authentication: answer the challenge first"};
    challenged_ = true;
    challenge_ = auth::RandomNonce();
    claimed_ = hello.member;
    std::copy(hello.nonce.begin(), hello.nonce.end(), nonce_.begin());
    flatbuffers::FlatBufferBuilder fbb(256);
    const auto node = fbb.CreateString(node_name.data(), node_name.size());
    const auto challenge = fbb.CreateVector(challenge_.data(), challenge_.size());
    wire::HelloReplyBuilder h(fbb);
    h.add_protocol_version(kProtocolVersion);
    h.add_node(node);
    h.add_max_frame_bytes(max_frame_bytes);
    h.add_challenge(challenge);
    const auto hello_reply = h.Finish();
    wire::ReplyBuilder reply(fbb);
    reply.add_hello(hello_reply);
    fbb.Finish(reply.Finish());
    AppendFrame(out, {fbb.GetBufferPointer(), fbb.GetSize()});
    return true;
  }
  if (!challenged_) {
    return Error{"hello.proof without a challenge: send a hello with only a nonce first"};
  }
  challenged_ = false;  // one answer per challenge
  if (!auth::EqualConstantTime(hello.nonce, nonce_)) {
    return Error{"hello.nonce differs from the one the challenge was made for"};
  }
  return false;
}

}  // namespace limiter
