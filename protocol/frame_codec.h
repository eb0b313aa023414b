// The frame codec: a 4-byte little-endian length, then that many bytes of one FlatBuffers
// message. Pure: feed it bytes, get a frame, "need more", or an error; no sockets. The node,
// the client and the fuzzer share it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace limiter {

inline constexpr size_t kFrameHeaderBytes = 4;
inline constexpr uint32_t kDefaultMaxFrameBytes = 1u << 20;
// The largest frame a peer may send before it has proved the cluster secret: a hello.
inline constexpr uint32_t kMaxHelloFrameBytes = 4096;

enum class FrameStatus {
  kFrame,     // `body` is a whole frame; drop `consumed` bytes from the input
  kNeedMore,  // not a whole frame yet
  kEmpty,     // a length of zero: a framing error
  kTooLarge,  // a length above the maximum: a framing error, seen before any allocation
};

struct FrameResult {
  FrameStatus status = FrameStatus::kNeedMore;
  std::span<const uint8_t> body;  // within the input, valid while it is
  size_t consumed = 0;
  uint32_t declared_bytes = 0;  // the length the header states
};

// Looks at the start of `input` only; call again after dropping `consumed` bytes.
FrameResult DecodeFrame(std::span<const uint8_t> input, uint32_t max_frame_bytes);

std::array<uint8_t, kFrameHeaderBytes> EncodeFrameHeader(uint32_t body_bytes);
void AppendFrame(std::vector<uint8_t>& out, std::span<const uint8_t> body);

// "frame length 0", "frame length 2000000 above the maximum of 1048576".
std::string DescribeFrameError(const FrameResult& result, uint32_t max_frame_bytes);

}  // namespace limiter
