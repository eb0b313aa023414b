// The frame fuzzer's seed corpus as an ordinary test: every file goes through the fuzzer's
// entry function, so a seed that once crashed the node stays fixed in every build.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "protocol/frame_codec.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"
#include "test/fuzz/frame_fuzz_target.h"
#include "test/support/build_paths.h"

namespace limiter::fuzz {
namespace {

namespace fs = std::filesystem;

const std::string kCorpusDir = testing::SourcePath("test/fuzz/corpus");

std::vector<fs::path> CorpusFiles() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kCorpusDir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<uint8_t> ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The reply frames of a stream, each verified.
struct Replies {
  explicit Replies(std::span<const uint8_t> stream) {
    while (!stream.empty()) {
      const FrameResult frame = DecodeFrame(stream, UINT32_MAX);
      EXPECT_EQ(frame.status, FrameStatus::kFrame);
      if (frame.status != FrameStatus::kFrame) break;
      const wire::Reply* reply = VerifiedReply(frame.body, copies.emplace_back());
      EXPECT_NE(reply, nullptr);
      if (reply == nullptr) break;
      replies.push_back(reply);
      stream = stream.subspan(frame.consumed);
    }
  }
  std::vector<std::vector<uint64_t>> copies;  // aligned copies; growing keeps their bytes
  std::vector<const wire::Reply*> replies;
};

// Every file in one test, in name order: the node is shared, so later files meet the state
// earlier ones left, as the fuzzer's inputs do.
TEST(FrameFuzzCorpus, EveryFileIsAnsweredWithVerifiedReplies) {
  const std::vector<fs::path> files = CorpusFiles();
  ASSERT_GE(files.size(), 40u) << "the corpus is missing from " << kCorpusDir;
  for (const fs::path& path : files) {
    SCOPED_TRACE(path.filename().string());
    const std::vector<uint8_t> input = ReadBytes(path);
    EXPECT_EQ(LLVMFuzzerTestOneInput(input.data(), input.size()), 0);

    std::vector<uint8_t> stream;
    FeedStream(input, stream);
    const Replies read(stream);
    const std::vector<const wire::Reply*>& replies = read.replies;
    const std::string name = path.filename().string();
    if (name.starts_with("truncated")) {
      EXPECT_TRUE(replies.empty());
    } else {
      ASSERT_FALSE(replies.empty());
    }
    if (name.starts_with("bad_frame") || name.ends_with("_bad_frame")) {
      const wire::Reply* last = replies.back();
      ASSERT_NE(last->error(), nullptr);
      EXPECT_NE(last->error()->string_view().find("frame length"), std::string_view::npos);
    }
  }
}

TEST(FrameFuzzCorpus, NodeAnswersAValidCheckAfterTheCorpus) {
  for (const fs::path& path : CorpusFiles()) {
    const std::vector<uint8_t> input = ReadBytes(path);
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  // An hour on, past every window, every key is fresh: sweeping reclaims them all and the
  // count of keys returns to zero.
  FuzzNode& f = SharedFuzzNode();
  f.clock.Advance(60 * 60 * 1000);
  while (f.node.Sweep() > 0) {
  }
  EXPECT_EQ(f.node.store().keys(), 0);

  RequestBuilder b;
  b.Hello("corpus-test");
  b.Check(77, "quota", "after-the-corpus", {}, 3);
  std::vector<uint8_t> frame;
  AppendFrame(frame, b.Finish());
  std::vector<uint8_t> stream;
  FeedStream(frame, stream);

  const Replies read(stream);
  const std::vector<const wire::Reply*>& replies = read.replies;
  ASSERT_EQ(replies.size(), 1u);
  const wire::Reply& reply = *replies.front();
  EXPECT_EQ(reply.error(), nullptr);
  ASSERT_NE(reply.hello(), nullptr);
  EXPECT_EQ(reply.hello()->protocol_version(), kProtocolVersion);
  ASSERT_NE(reply.ops(), nullptr);
  ASSERT_EQ(reply.ops()->size(), 1u);
  const wire::OpReply& op = *reply.ops()->Get(0);
  EXPECT_EQ(op.id(), 77u);
  EXPECT_EQ(op.status(), wire::Status::Ok);
  EXPECT_TRUE(op.allowed());
  EXPECT_EQ(op.denied_by(), -1);
  ASSERT_NE(op.results(), nullptr);
  ASSERT_EQ(op.results()->size(), 1u);
  EXPECT_EQ(op.results()->Get(0)->remaining(), 1000 - 3);  // quota: 1000 a minute

  // The bad input was counted, not fatal.
  WorkerCounters& counters = Node::CountersOf(f.worker);
  EXPECT_GT(counters.bad_frames[static_cast<size_t>(BadFrame::kInvalid)].Get(), 0u);
}

}  // namespace
}  // namespace limiter::fuzz

namespace limiter::fuzz {
namespace {

// The fuzzer's sessions: after the handshake a CHECK is answered; without it, the first
// frame is refused and closes the connection.
TEST(FrameFuzzCorpus, TheSecretNodeAnswersOnlyAfterTheHandshake) {
  RequestBuilder b;
  b.Check(5, "quota", "session-key");
  b.Check(6, "quota", "session-key");
  std::vector<uint8_t> frames;
  AppendFrame(frames, b.Finish());
  AppendFrame(frames, b.Finish());

  std::vector<uint8_t> stream;
  EXPECT_EQ(FeedSession(frames, Role::kGateway, stream), 2u);
  const Replies answered(stream);
  ASSERT_EQ(answered.replies.size(), 2u);
  ASSERT_NE(answered.replies[0]->ops(), nullptr);
  EXPECT_EQ(answered.replies[0]->ops()->size(), 2u);

  stream.clear();
  EXPECT_EQ(FeedSession(frames, Role::kNone, stream), 1u);
  const Replies refused(stream);
  ASSERT_EQ(refused.replies.size(), 1u);
  ASSERT_NE(refused.replies[0]->error(), nullptr);
  EXPECT_NE(refused.replies[0]->error()->string_view().find("cluster secret"),
            std::string_view::npos);
}

// The node-to-node seeds: refused on a gateway's session, checked (and taken) on a peer's.
TEST(FrameFuzzCorpus, PeerOpsAreRefusedToAGatewayAndTakenFromAPeer) {
  const std::vector<uint8_t> changes =
      ReadBytes(fs::path(kCorpusDir) / "peer_members_leaving_joining");
  std::vector<uint8_t> stream;
  EXPECT_EQ(FeedSession(changes, Role::kGateway, stream), 3u);
  for (const wire::Reply* r : Replies(stream).replies) {
    ASSERT_NE(r->ops(), nullptr);
    EXPECT_EQ(r->ops()->Get(0)->status(), wire::Status::Forbidden);
  }
  stream.clear();
  EXPECT_EQ(FeedSession(changes, Role::kPeer, stream), 3u);
  const Replies peer(stream);
  ASSERT_EQ(peer.replies.size(), 3u);
  EXPECT_EQ(peer.replies[0]->ops()->Get(0)->status(), wire::Status::Ok);         // its own leave
  EXPECT_EQ(peer.replies[1]->ops()->Get(0)->status(), wire::Status::Ok);         // its own join
  EXPECT_EQ(peer.replies[2]->ops()->Get(0)->status(), wire::Status::Forbidden);  // another's
}

}  // namespace
}  // namespace limiter::fuzz
