#include "protocol/wire.h"

#include <cstring>

namespace limiter {
namespace {

bool Aligned(std::span<const uint8_t> body) {
  return reinterpret_cast<uintptr_t>(body.data()) % alignof(uint64_t) == 0;
}

std::span<const uint8_t> AlignedBody(std::span<const uint8_t> body,
                                     std::vector<uint64_t>& storage) {
  if (Aligned(body)) return body;
  storage.resize((body.size() + sizeof(uint64_t) - 1) / sizeof(uint64_t));
  std::memcpy(storage.data(), body.data(), body.size());
  return {reinterpret_cast<const uint8_t*>(storage.data()), body.size()};
}

template <class T>
const T* Verified(std::span<const uint8_t> body) {
  if (!Aligned(body)) return nullptr;
  // Depth and table counts bound the work a hostile frame can cause.
  flatbuffers::Verifier verifier(body.data(), body.size(), /*max_depth=*/16,
                                 /*max_tables=*/1u << 20);
  if (!verifier.VerifyBuffer<T>(nullptr)) return nullptr;
  return flatbuffers::GetRoot<T>(body.data());
}

}  // namespace

const wire::Request* VerifiedRequest(std::span<const uint8_t> body) {
  return Verified<wire::Request>(body);
}

const wire::Reply* VerifiedReply(std::span<const uint8_t> body) {
  return Verified<wire::Reply>(body);
}

const wire::Request* VerifiedRequest(std::span<const uint8_t> body,
                                     std::vector<uint64_t>& storage) {
  return Verified<wire::Request>(AlignedBody(body, storage));
}

const wire::Reply* VerifiedReply(std::span<const uint8_t> body, std::vector<uint64_t>& storage) {
  return Verified<wire::Reply>(AlignedBody(body, storage));
}

std::span<const uint8_t> FinishPeerRequest(flatbuffers::FlatBufferBuilder& fbb, wire::OpType type,
                                           flatbuffers::Offset<wire::Peer> peer) {
  wire::OpBuilder op(fbb);
  op.add_id(1);
  op.add_type(type);
  const auto ops = fbb.CreateVector(std::vector<flatbuffers::Offset<wire::Op>>{op.Finish()});
  wire::RequestBuilder request(fbb);
  request.add_ops(ops);
  request.add_peer(peer);
  fbb.Finish(request.Finish());
  return {fbb.GetBufferPointer(), fbb.GetSize()};
}

}  // namespace limiter
