#include "client/handshake.h"

#include "client/request_builder.h"
#include "common/wire.h"

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

std::optional<std::string> ClientHandshake::BuildProofHello(const wire::Reply& reply,
                                                            RequestBuilder& b,
                                                            std::string_view client) {
  if (reply.error()) return address_ + " refused the hello: " + reply.error()->str();
  const wire::HelloReply* hello = reply.hello();
  if (hello == nullptr) return address_ + " did not answer the hello";
  if (hello->challenge() == nullptr) {
    // Whoever answers without asking for the secret cannot prove it holds it either.
    return address_ + " does not ask for the cluster secret; refusing to trust it";
  }
  if (hello->challenge()->size() != challenge_.size()) {
    return address_ + " sent a challenge of " + std::to_string(hello->challenge()->size()) +
           " bytes, not " + std::to_string(challenge_.size());
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
  return std::nullopt;
}

std::optional<std::string> ClientHandshake::CheckNode(const wire::Reply& reply) const {
  if (reply.error()) return address_ + " refused the cluster secret: " + reply.error()->str();
  const wire::HelloReply* hello = reply.hello();
  const bool peer = !peer_secret_.empty();
  const auth::Mac expected = peer ? auth::PeerNodeProof(peer_secret_, challenge_, nonce_, peer_name_)
                                  : auth::NodeProof(secret_, challenge_, nonce_);
  if (hello == nullptr || hello->proof() == nullptr ||
      !auth::EqualConstantTime(expected, {hello->proof()->data(), hello->proof()->size()})) {
    return address_ + (peer ? " did not prove the peer secret in its hello"
                            : " did not prove the cluster secret in its hello");
  }
  return std::nullopt;
}

}  // namespace limiter
