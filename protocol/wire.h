// Reading verified wire messages. Every inbound buffer passes the FlatBuffers Verifier
// before anything reads it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "schema/limiter_generated.h"

namespace limiter {

inline constexpr uint32_t kProtocolVersion = 1;

// The message, or nullptr when the bytes are not a valid one. FlatBuffers reads scalars and
// structs in place, so the message must be 8-byte aligned, and a frame's body starts 4 bytes
// after its length prefix: a body that is not aligned is copied into `storage` first, and the
// result then points into it.
const wire::Request* VerifiedRequest(std::span<const uint8_t> body, std::vector<uint64_t>& storage);
const wire::Reply* VerifiedReply(std::span<const uint8_t> body, std::vector<uint64_t>& storage);
// For a body known to be 8-byte aligned (nullptr when it is not).
const wire::Request* VerifiedRequest(std::span<const uint8_t> body);

// Finishes, in `fbb`, a Request of one node-to-node op (Members, Handoff, with id 1) carrying
// `peer`; returns the body.
std::span<const uint8_t> FinishPeerRequest(flatbuffers::FlatBufferBuilder& fbb, wire::OpType type,
                                           flatbuffers::Offset<wire::Peer> peer);
const wire::Reply* VerifiedReply(std::span<const uint8_t> body);

}  // namespace limiter
