// The load loop against an in-memory channel (counts, depth, schedule, errors; no timing is
// asserted), and one short end-to-end run of `limiter-bench node` against a real limiterd.
#include "bench/load_loop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "bench/node_bench.h"
#include "test/support/build_paths.h"

namespace limiter::bench {
namespace {

const std::string kBenchPolicies = testing::SourcePath("bench/policies.yaml");

using ::testing::HasSubstr;

// A target in memory: a frame is its key numbers; odd keys are denied. Replies are ready as
// soon as the frame is sent. Records which threads call it, and may take only a few bytes per
// SendSome (a full socket, as the open loop sees it).
class FakeChannel final : public LoadChannel {
 public:
  void EncodeFrame(std::span<const uint64_t> keys, std::vector<uint8_t>& out) override {
    Touch();
    const uint64_t n = keys.size();
    Append(out, &n, sizeof(n));
    Append(out, keys.data(), keys.size_bytes());
  }

  Status Send(std::span<const uint8_t> bytes) override {
    Touch();
    if (fail_sends_) return Error{"send failed"};
    Take(bytes);
    return Status::Ok();
  }

  Status ReceiveFrame(size_t checks, CheckCounts& counts) override {
    Result<bool> took = TakeFrame(checks, counts);
    if (!took) return took.status();
    if (!*took) return Error{"no frame in flight"};  // what a socket's read timeout would end in
    return Status::Ok();
  }

  Result<size_t> SendSome(std::span<const uint8_t> bytes) override {
    Touch();
    if (fail_sends_) return Error{"send failed"};
    ++send_calls_;
    // When throttled, every other call finds the socket full.
    if (max_bytes_per_send_ > 0 && send_calls_ % 2 == 0) return size_t{0};
    const size_t n =
        max_bytes_per_send_ > 0 ? std::min(bytes.size(), max_bytes_per_send_) : bytes.size();
    Take(bytes.first(n));
    return n;
  }

  Status Poll(Time until, bool for_replies, bool for_send) override {
    Touch();
    // A reply waiting, or room to send (there always is), ends the wait at once.
    if ((for_replies && !frames_.empty() && !silent_) || for_send) return Status::Ok();
    std::this_thread::sleep_until(until);
    return Status::Ok();
  }

  Result<bool> TakeFrame(size_t checks, CheckCounts& counts) override {
    Touch();
    if (frames_.empty() || silent_) return false;
    if (fail_receive_after_ >= 0 && received_frames_ == fail_receive_after_) {
      return Error{"boom"};
    }
    std::vector<uint64_t> frame = std::move(frames_.front());
    frames_.pop_front();
    ++received_frames_;
    if (frame.size() != checks) return Error{"frame size mismatch"};
    for (uint64_t key : frame) {
      ++counts.checks;
      ++(key % 2 ? counts.denied : counts.allowed);
      keys_seen_.push_back(key);
    }
    return true;
  }

  void FailSends() { fail_sends_ = true; }
  void FailReceiveAfter(int frames) { fail_receive_after_ = frames; }
  void ThrottleSends(size_t max_bytes) { max_bytes_per_send_ = max_bytes; }
  void NeverReply() { silent_ = true; }
  size_t max_in_flight() const { return max_in_flight_; }
  int received_frames() const { return received_frames_; }
  const std::vector<uint64_t>& keys_seen() const { return keys_seen_; }
  size_t threads() const { return threads_.size(); }

 private:
  static void Append(std::vector<uint8_t>& out, const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }

  // Bytes sent: whole frames join the queue of frames in flight.
  void Take(std::span<const uint8_t> bytes) {
    staged_.insert(staged_.end(), bytes.begin(), bytes.end());
    size_t at = 0;
    while (staged_.size() - at >= sizeof(uint64_t)) {
      uint64_t n = 0;
      std::memcpy(&n, staged_.data() + at, sizeof(n));
      const size_t frame_bytes = sizeof(n) + n * sizeof(uint64_t);
      if (staged_.size() - at < frame_bytes) break;
      std::vector<uint64_t> frame(n);
      std::memcpy(frame.data(), staged_.data() + at + sizeof(n), n * sizeof(uint64_t));
      frames_.push_back(std::move(frame));
      at += frame_bytes;
    }
    staged_.erase(staged_.begin(), staged_.begin() + static_cast<ptrdiff_t>(at));
    max_in_flight_ = std::max(max_in_flight_, frames_.size());
  }

  void Touch() { threads_.insert(std::this_thread::get_id()); }

  std::vector<uint8_t> staged_;               // sent bytes short of a whole frame
  std::deque<std::vector<uint64_t>> frames_;  // sent, not yet received
  bool fail_sends_ = false;
  int fail_receive_after_ = -1;
  size_t max_bytes_per_send_ = 0;  // 0: no limit
  bool silent_ = false;
  uint64_t send_calls_ = 0;
  size_t max_in_flight_ = 0;
  int received_frames_ = 0;
  std::vector<uint64_t> keys_seen_;
  std::set<std::thread::id> threads_;  // that called it
};

std::vector<LoadChannel*> Pointers(std::vector<FakeChannel>& channels) {
  std::vector<LoadChannel*> out;
  for (FakeChannel& c : channels) out.push_back(&c);
  return out;
}

TEST(KeyPickerTest, DrawsEveryKeyInRangeOnly) {
  KeyPicker picker(10, 42);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t k = picker.Next();
    ASSERT_LT(k, 10u);
    seen.insert(k);
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(KeyNameTest, FormatsNumbers) {
  KeyBuffer buf;
  EXPECT_EQ(KeyName(0, buf), "k0");
  EXPECT_EQ(KeyName(123, buf), "k123");
  EXPECT_EQ(KeyName(UINT64_MAX, buf), "k18446744073709551615");
}

TEST(TouchEveryKeyTest, ChecksEachKeyOnceWithinDepth) {
  FakeChannel channel;
  Result<CheckCounts> counts = TouchEveryKey(channel, 2501, 100, 3);
  ASSERT_TRUE(counts.ok()) << counts.error();
  EXPECT_EQ(counts->checks, 2501u);
  EXPECT_EQ(counts->allowed, 1251u);
  EXPECT_EQ(counts->denied, 1250u);
  EXPECT_LE(channel.max_in_flight(), 3u);
  std::vector<uint64_t> expected(2501);
  for (uint64_t i = 0; i < expected.size(); ++i) expected[i] = i;
  EXPECT_EQ(channel.keys_seen(), expected);
}

TEST(RunLoadTest, ClosedLoopKeepsDepthAndCountsEveryCheck) {
  std::vector<FakeChannel> channels(3);
  LoadShape shape;
  shape.depth = 4;
  shape.batch = 5;
  shape.keys = 1000;
  shape.duration_s = 0.05;
  Result<LoadResult> result = RunLoad(Pointers(channels), shape);
  ASSERT_TRUE(result.ok()) << result.error();
  uint64_t checks = 0, frames = 0;
  for (const FakeChannel& c : channels) {
    EXPECT_EQ(c.threads(), 1u);
    EXPECT_LE(c.max_in_flight(), 4u);
    EXPECT_GT(c.received_frames(), 4);
    for (uint64_t k : c.keys_seen()) ASSERT_LT(k, 1000u);
    checks += c.keys_seen().size();
    frames += static_cast<uint64_t>(c.received_frames());
  }
  EXPECT_EQ(result->counts.checks, checks);
  EXPECT_EQ(result->counts.allowed + result->counts.denied, checks);
  EXPECT_EQ(result->counts.errors, 0u);
  EXPECT_EQ(result->latency_us.count, frames);
}

TEST(RunLoadTest, OpenLoopSendsExactlyTheSchedule) {
  // 20000 checks/s in frames of 10 over 2 connections: a frame every 1 ms per connection,
  // for 50 ms: 50 frames each, whatever the timing.
  std::vector<FakeChannel> channels(2);
  LoadShape shape;
  shape.batch = 10;
  shape.rate = 20000;
  shape.duration_s = 0.05;
  Result<LoadResult> result = RunLoad(Pointers(channels), shape);
  ASSERT_TRUE(result.ok()) << result.error();
  for (const FakeChannel& c : channels) {
    EXPECT_EQ(c.received_frames(), 50);
    EXPECT_EQ(c.threads(), 1u);  // sends and receives on one thread
  }
  EXPECT_EQ(result->counts.checks, 1000u);
  EXPECT_EQ(result->counts.allowed + result->counts.denied, 1000u);
  EXPECT_EQ(result->latency_us.count, 100u);
  EXPECT_EQ(result->send_lag_us.count, 100u);
}

TEST(RunLoadTest, OpenLoopSendsTheScheduleThroughPartialWrites) {
  // Frames of 3 checks are 32 bytes; the channel takes at most 5 bytes a write and is full
  // every other time, so frames go in pieces and the loop waits for room.
  std::vector<FakeChannel> channels(2);
  for (FakeChannel& c : channels) c.ThrottleSends(5);
  LoadShape shape;
  shape.batch = 3;
  shape.rate = 6000;  // a frame every 1 ms per connection
  shape.duration_s = 0.03;
  Result<LoadResult> result = RunLoad(Pointers(channels), shape);
  ASSERT_TRUE(result.ok()) << result.error();
  for (const FakeChannel& c : channels) EXPECT_EQ(c.received_frames(), 30);
  EXPECT_EQ(result->counts.checks, 180u);
  EXPECT_EQ(result->latency_us.count, 60u);
}

TEST(RunLoadTest, OpenLoopTimesOutWhenNoReplyComes) {
  std::vector<FakeChannel> channels(1);
  channels[0].NeverReply();
  LoadShape shape;
  shape.rate = 1000;
  shape.duration_s = 0.01;
  shape.reply_timeout_s = 0.05;
  Result<LoadResult> result = RunLoad(Pointers(channels), shape);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "timed out waiting for a reply");
}

TEST(RunLoadTest, ReportsAReceiveError) {
  for (double rate : {0.0, 10000.0}) {
    std::vector<FakeChannel> channels(2);
    channels[1].FailReceiveAfter(3);
    LoadShape shape;
    shape.rate = rate;
    shape.duration_s = 0.05;
    Result<LoadResult> result = RunLoad(Pointers(channels), shape);
    ASSERT_FALSE(result.ok()) << "rate " << rate;
    EXPECT_EQ(result.error(), "boom");
  }
}

TEST(RunLoadTest, ReportsASendError) {
  for (double rate : {0.0, 10000.0}) {
    std::vector<FakeChannel> channels(1);
    channels[0].FailSends();
    LoadShape shape;
    shape.rate = rate;
    shape.duration_s = 0.05;
    Result<LoadResult> result = RunLoad(Pointers(channels), shape);
    ASSERT_FALSE(result.ok()) << "rate " << rate;
    EXPECT_EQ(result.error(), "send failed");
  }
}

// The whole command against a real limiterd (and redis-server when installed), closed and
// open loop; counts only.
class NodeBenchTest : public ::testing::TestWithParam<double> {};

TEST_P(NodeBenchTest, RunsAgainstALocalNode) {
  NodeBenchOptions o;
  o.shape.rate = GetParam();
  o.limiterd = testing::LimiterdBin();
  o.policies = kBenchPolicies;
  o.connections = 2;
  o.shape.depth = 2;
  o.shape.batch = 16;
  o.shape.keys = 500;
  o.shape.duration_s = 0.2;
  o.vs_redis = std::system("command -v redis-server >/dev/null 2>&1") == 0;
  o.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(RunNodeBench(o, out, err), 0) << err.str();
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_GT(j["checks"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["allowed"], j["checks"]);
  EXPECT_EQ(j["errors"], 0);
  EXPECT_EQ(j["keys"], 500);
  EXPECT_TRUE(j["bytes_per_key"].is_number());
  for (const char* field : {"checks_per_s", "p50_us", "p99_us", "p999_us", "node_rss_bytes"}) {
    EXPECT_TRUE(j.contains(field)) << field;
  }
  if (o.vs_redis) {
    EXPECT_EQ(j["redis_allowed"], j["redis_checks"]);
    EXPECT_EQ(j["redis_errors"], 0);
    EXPECT_TRUE(j["ratio"].is_number());
  }
}

INSTANTIATE_TEST_SUITE_P(ClosedAndOpenLoop, NodeBenchTest, ::testing::Values(0.0, 5000.0));

TEST(NodeBenchErrorTest, AnUnreachableServerIsOneErrorLine) {
  NodeBenchOptions o;
  o.server = "127.0.0.1:1";
  o.policies = kBenchPolicies;
  std::ostringstream out, err;
  EXPECT_EQ(RunNodeBench(o, out, err), 1);
  EXPECT_EQ(out.str(), "");
  const std::string error = err.str();
  EXPECT_THAT(error, HasSubstr("127.0.0.1:1"));
  EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 1);
}

}  // namespace
}  // namespace limiter::bench
