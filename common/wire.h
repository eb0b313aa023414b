// Reading verified wire messages. Every inbound buffer passes the FlatBuffers Verifier
// before anything reads it.
#pragma once

#include <cstdint>
#include <span>

#include "schema/limiter_generated.h"

namespace limiter {

inline constexpr uint32_t kProtocolVersion = 1;

// The message, or nullptr when the bytes are not a valid one.
const wire::Request* VerifiedRequest(std::span<const uint8_t> body);
const wire::Reply* VerifiedReply(std::span<const uint8_t> body);

}  // namespace limiter
