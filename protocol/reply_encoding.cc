#include "protocol/reply_encoding.h"

namespace limiter {
namespace reply_encoding {

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> Members(
    flatbuffers::FlatBufferBuilder& fbb, std::span<const std::string> members) {
  std::vector<flatbuffers::Offset<flatbuffers::String>> list;
  list.reserve(members.size());
  for (const std::string& m : members) list.push_back(fbb.CreateString(m));
  return fbb.CreateVector(list);
}

}  // namespace reply_encoding

using reply_encoding::Members;
using reply_encoding::Str;

flatbuffers::Offset<wire::HelloReply> EncodeHelloReply(flatbuffers::FlatBufferBuilder& fbb,
                                                       std::string_view node,
                                                       uint32_t max_frame_bytes,
                                                       const ReplyFields::Owner& ring,
                                                       std::span<const uint8_t> proof) {
  const auto name = Str(fbb, node);
  const auto list = Members(fbb, ring.members);
  const auto node_proof = proof.empty() ? 0 : fbb.CreateVector(proof.data(), proof.size());
  wire::HelloReplyBuilder b(fbb);
  b.add_protocol_version(kProtocolVersion);
  b.add_ring_version(ring.ring_version);
  b.add_node(name);
  b.add_max_frame_bytes(max_frame_bytes);
  b.add_members(list);
  b.add_generation(ring.generation);
  if (!node_proof.IsNull()) b.add_proof(node_proof);
  return b.Finish();
}

}  // namespace limiter
