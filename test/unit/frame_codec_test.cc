#include "protocol/frame_codec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace limiter {
namespace {

std::vector<uint8_t> Body(size_t n) {
  std::vector<uint8_t> body(n);
  for (size_t i = 0; i < n; ++i) body[i] = static_cast<uint8_t>(i * 7 + 1);
  return body;
}

std::vector<uint8_t> Framed(const std::vector<uint8_t>& body) {
  std::vector<uint8_t> out;
  AppendFrame(out, body);
  return out;
}

std::vector<uint8_t> HeaderOnly(uint32_t declared) {
  const auto header = EncodeFrameHeader(declared);
  return {header.begin(), header.end()};
}

TEST(FrameCodec, HeaderIsLittleEndian) {
  const auto header = EncodeFrameHeader(0x01020304);
  EXPECT_EQ(header, (std::array<uint8_t, 4>{0x04, 0x03, 0x02, 0x01}));
}

TEST(FrameCodec, NeedsMoreAtEveryPrefixOfAFrame) {
  const std::vector<uint8_t> body = Body(37);
  const std::vector<uint8_t> frame = Framed(body);
  ASSERT_EQ(frame.size(), kFrameHeaderBytes + body.size());
  for (size_t n = 0; n < frame.size(); ++n) {
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    const FrameResult r = DecodeFrame(std::span(frame).first(n), kDefaultMaxFrameBytes);
    EXPECT_EQ(r.status, FrameStatus::kNeedMore);
    EXPECT_EQ(r.consumed, 0u);
    EXPECT_TRUE(r.body.empty());
  }
  const FrameResult r = DecodeFrame(frame, kDefaultMaxFrameBytes);
  ASSERT_EQ(r.status, FrameStatus::kFrame);
  EXPECT_EQ(r.consumed, frame.size());
  EXPECT_EQ(r.declared_bytes, body.size());
  EXPECT_EQ(std::vector<uint8_t>(r.body.begin(), r.body.end()), body);
  EXPECT_EQ(r.body.data(), frame.data() + kFrameHeaderBytes);  // a view, not a copy
}

TEST(FrameCodec, ZeroLengthIsAnError) {
  std::vector<uint8_t> input = HeaderOnly(0);
  const std::vector<uint8_t> next = Framed(Body(3));
  input.insert(input.end(), next.begin(), next.end());
  const FrameResult r = DecodeFrame(input, kDefaultMaxFrameBytes);
  EXPECT_EQ(r.status, FrameStatus::kEmpty);
  EXPECT_EQ(r.consumed, 0u);
  EXPECT_EQ(DescribeFrameError(r, kDefaultMaxFrameBytes), "frame length 0");
}

TEST(FrameCodec, TooLargeIsKnownFromTheHeaderAlone) {
  for (uint32_t declared : {kDefaultMaxFrameBytes + 1, 2'000'000u, UINT32_MAX}) {
    SCOPED_TRACE(declared);
    const std::vector<uint8_t> header = HeaderOnly(declared);
    const FrameResult r = DecodeFrame(header, kDefaultMaxFrameBytes);
    EXPECT_EQ(r.status, FrameStatus::kTooLarge);
    EXPECT_EQ(r.declared_bytes, declared);
    EXPECT_EQ(r.consumed, 0u);
    // Three bytes cannot tell yet.
    EXPECT_EQ(DecodeFrame(std::span(header).first(3), kDefaultMaxFrameBytes).status,
              FrameStatus::kNeedMore);
  }
}

TEST(FrameCodec, ExactlyTheMaximumIsAFrame) {
  for (uint32_t max : {1u, 16u, kDefaultMaxFrameBytes}) {
    SCOPED_TRACE(max);
    const std::vector<uint8_t> at_max = Framed(Body(max));
    const FrameResult r = DecodeFrame(at_max, max);
    EXPECT_EQ(r.status, FrameStatus::kFrame);
    EXPECT_EQ(r.consumed, at_max.size());
    EXPECT_EQ(DecodeFrame(std::span(at_max).first(at_max.size() - 1), max).status,
              FrameStatus::kNeedMore);

    const std::vector<uint8_t> above = Framed(Body(max + 1));
    EXPECT_EQ(DecodeFrame(above, max).status, FrameStatus::kTooLarge);
  }
}

TEST(FrameCodec, TwoPipelinedFrames) {
  const std::vector<uint8_t> first = Body(5);
  const std::vector<uint8_t> second = Body(300);
  std::vector<uint8_t> input;
  AppendFrame(input, first);
  AppendFrame(input, second);
  input.push_back(0x02);  // the start of a third frame's header

  std::span<const uint8_t> rest(input);
  FrameResult r = DecodeFrame(rest, kDefaultMaxFrameBytes);
  ASSERT_EQ(r.status, FrameStatus::kFrame);
  EXPECT_EQ(std::vector<uint8_t>(r.body.begin(), r.body.end()), first);
  rest = rest.subspan(r.consumed);

  r = DecodeFrame(rest, kDefaultMaxFrameBytes);
  ASSERT_EQ(r.status, FrameStatus::kFrame);
  EXPECT_EQ(std::vector<uint8_t>(r.body.begin(), r.body.end()), second);
  rest = rest.subspan(r.consumed);

  EXPECT_EQ(rest.size(), 1u);
  EXPECT_EQ(DecodeFrame(rest, kDefaultMaxFrameBytes).status, FrameStatus::kNeedMore);
}

TEST(FrameCodec, DescribeFrameError) {
  const std::vector<uint8_t> big = HeaderOnly(2'000'000);
  EXPECT_EQ(DescribeFrameError(DecodeFrame(big, kDefaultMaxFrameBytes), kDefaultMaxFrameBytes),
            "frame length 2000000 above the maximum of 1048576");
  EXPECT_EQ(DescribeFrameError(DecodeFrame(big, 1000), 1000),
            "frame length 2000000 above the maximum of 1000");
  const std::vector<uint8_t> empty = HeaderOnly(0);
  EXPECT_EQ(DescribeFrameError(DecodeFrame(empty, 1000), 1000), "frame length 0");
  const std::vector<uint8_t> frame = Framed(Body(4));
  EXPECT_EQ(DescribeFrameError(DecodeFrame(frame, 1000), 1000), "no error");
  EXPECT_EQ(DescribeFrameError(DecodeFrame({}, 1000), 1000), "no error");
}

}  // namespace
}  // namespace limiter
