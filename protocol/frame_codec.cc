#include "protocol/frame_codec.h"

namespace limiter {

FrameResult DecodeFrame(std::span<const uint8_t> input, uint32_t max_frame_bytes) {
  FrameResult r;
  if (input.size() < kFrameHeaderBytes) return r;
  r.declared_bytes = uint32_t{input[0]} | uint32_t{input[1]} << 8 | uint32_t{input[2]} << 16 |
                     uint32_t{input[3]} << 24;
  if (r.declared_bytes == 0) {
    r.status = FrameStatus::kEmpty;
  } else if (r.declared_bytes > max_frame_bytes) {
    r.status = FrameStatus::kTooLarge;
  } else if (input.size() - kFrameHeaderBytes >= r.declared_bytes) {
    r.status = FrameStatus::kFrame;
    r.body = input.subspan(kFrameHeaderBytes, r.declared_bytes);
    r.consumed = kFrameHeaderBytes + r.declared_bytes;
  }
  return r;
}

std::array<uint8_t, kFrameHeaderBytes> EncodeFrameHeader(uint32_t n) {
  return {static_cast<uint8_t>(n), static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n >> 16),
          static_cast<uint8_t>(n >> 24)};
}

void AppendFrame(std::vector<uint8_t>& out, std::span<const uint8_t> body) {
  const auto header = EncodeFrameHeader(static_cast<uint32_t>(body.size()));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), body.begin(), body.end());
}

std::string DescribeFrameError(const FrameResult& r, uint32_t max_frame_bytes) {
  switch (r.status) {
    case FrameStatus::kEmpty:
      return "frame length 0";
    case FrameStatus::kTooLarge:
      return "frame length " + std::to_string(r.declared_bytes) + " above the maximum of " +
             std::to_string(max_frame_bytes);
    case FrameStatus::kFrame:
    case FrameStatus::kNeedMore:
      break;
  }
  return "no error";
}

}  // namespace limiter
