// State transfer between two nodes' clocks (protocol/state_transfer.h): a state read on one
// clock and written on another decides the same from then on (bucket algorithms and the log,
// whose times shift exactly), or keeps its window's count (the window algorithms, whose
// windows are aligned to each node's own clock).
#include "protocol/state_transfer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace limiter {
namespace {

uint64_t Seed() {
  if (const char* s = std::getenv("LIMITER_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

Rate MakeRate(int64_t limit, int64_t window_ms, int64_t burst) {
  return Rate(limit, window_ms, burst);
}

struct Case {
  Algorithm algorithm;
  const char* name;
};

class ShiftExactly : public ::testing::TestWithParam<Case> {};

// Sender and receiver clocks read far apart; the state moves at a random moment of a random
// run, and from then on both copies see the same arrivals (at the same offsets): they must
// decide the same, every time.
TEST_P(ShiftExactly, AMovedStateDecidesLikeTheOneLeftBehind) {
  const uint64_t seed = Seed();
  std::printf("seed %llu (LIMITER_TEST_SEED=%llu repeats this run)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const Rate rate = MakeRate(20, 1000, 10);
  for (int run = 0; run < 200; ++run) {
    KeyLimiter sender(GetParam().algorithm);
    int64_t t = 5'000'000 + static_cast<int64_t>(rng() % 10'000);
    const int64_t receiver_offset = -4'000'000 + static_cast<int64_t>(rng() % 1000);
    for (int i = 0, n = static_cast<int>(rng() % 40); i < n; ++i) {
      t += static_cast<int64_t>(rng() % 120);
      sender.Decide(rate, t, 1 + static_cast<int64_t>(rng() % 3));
    }
    std::vector<int64_t> fields;
    if (sender.IsFresh(rate, t)) continue;
    ExportState(sender, t, fields);
    Result<std::optional<KeyLimiter>> moved =
        ImportState(GetParam().algorithm, rate, fields, t + receiver_offset);
    ASSERT_TRUE(moved.ok()) << moved.error();
    ASSERT_TRUE(moved->has_value()) << "a live state arrived fresh";
    KeyLimiter receiver = std::move(**moved);
    for (int i = 0; i < 60; ++i) {
      t += static_cast<int64_t>(rng() % 90);
      const int64_t cost = 1 + static_cast<int64_t>(rng() % 3);
      const LimitDecision a = sender.Decide(rate, t, cost);
      const LimitDecision b = receiver.Decide(rate, t + receiver_offset, cost);
      ASSERT_EQ(a.allowed, b.allowed) << "run " << run << " arrival " << i;
      ASSERT_EQ(a.remaining, b.remaining) << "run " << run << " arrival " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Buckets, ShiftExactly,
                         ::testing::Values(Case{Algorithm::kTokenBucket, "token_bucket"},
                                           Case{Algorithm::kGcra, "gcra"},
                                           Case{Algorithm::kLeakyBucket, "leaky_bucket"},
                                           Case{Algorithm::kSlidingLog, "sliding_log"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(StateTransfer, AnOpenFixedWindowCarriesItsCountIntoTheReceiversWindow) {
  const Rate rate = MakeRate(5, 1000, 5);
  KeyLimiter sender(Algorithm::kFixedWindow);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(sender.Decide(rate, 10'900, 1).allowed);
  std::vector<int64_t> fields;
  ExportState(sender, 10'950, fields);
  // The receiver's window has just begun: its count is the sender's, so one more, not five.
  Result<std::optional<KeyLimiter>> moved =
      ImportState(Algorithm::kFixedWindow, rate, fields, 3'000);
  ASSERT_TRUE(moved.ok() && moved->has_value());
  KeyLimiter receiver = std::move(**moved);
  EXPECT_TRUE(receiver.Decide(rate, 3'000, 1).allowed);
  EXPECT_FALSE(receiver.Decide(rate, 3'999, 1).allowed);
  EXPECT_TRUE(receiver.Decide(rate, 4'000, 1).allowed);  // the receiver's next window
}

TEST(StateTransfer, AWindowThatHasPassedArrivesFresh) {
  const Rate rate = MakeRate(5, 1000, 5);
  KeyLimiter sender(Algorithm::kFixedWindow);
  ASSERT_TRUE(sender.Decide(rate, 10'100, 3).allowed);
  std::vector<int64_t> fields;
  ExportState(sender, 10'999, fields);
  fields[0] -= 1000;  // as if read a window later
  Result<std::optional<KeyLimiter>> moved = ImportState(Algorithm::kFixedWindow, rate, fields, 50);
  ASSERT_TRUE(moved.ok());
  EXPECT_FALSE(moved->has_value());
}

TEST(StateTransfer, ASlidingWindowKeepsBothCounts) {
  const Rate rate = MakeRate(10, 1000, 10);
  KeyLimiter sender(Algorithm::kSlidingWindow);
  ASSERT_TRUE(sender.Decide(rate, 5'500, 6).allowed);
  ASSERT_TRUE(sender.Decide(rate, 6'200, 2).allowed);  // prev 6, curr 2
  std::vector<int64_t> fields;
  ExportState(sender, 6'300, fields);
  Result<std::optional<KeyLimiter>> moved =
      ImportState(Algorithm::kSlidingWindow, rate, fields, 90'100);
  ASSERT_TRUE(moved.ok() && moved->has_value());
  const auto& s = std::get<SlidingWindow::State>((*moved)->state());
  EXPECT_EQ(s.prev, 6u);
  EXPECT_EQ(s.curr, 2u);
  EXPECT_EQ(s.window_start_ms, 90'000);
}

// Fields come from the network: every malformed list is an error naming what is wrong.
TEST(StateTransfer, MalformedFieldsAreRefusedWithTheFieldNamed) {
  const Rate rate = MakeRate(10, 1000, 10);
  struct Bad {
    Algorithm algorithm;
    std::vector<int64_t> fields;
    std::string says;
  };
  const std::vector<Bad> cases = {
      {Algorithm::kTokenBucket, {1}, "count"},
      {Algorithm::kTokenBucket, {-1, -5}, "tokens"},
      {Algorithm::kTokenBucket, {5, 7}, "last"},
      {Algorithm::kTokenBucket, {5, INT64_MIN}, "last"},
      {Algorithm::kGcra, {INT64_MAX, 0}, "tat"},
      {Algorithm::kGcra, {-5, -1}, "tat_frac"},
      {Algorithm::kFixedWindow, {0, -1}, "count"},
      {Algorithm::kSlidingWindow, {0, -1, 2}, "count"},
      {Algorithm::kSlidingLog, {0, -5, -1}, "entry 0"},
      {Algorithm::kGcra, {10, 10}, "tat_frac"},
      {Algorithm::kLeakyBucket, {-3, 0}, "level"},
      {Algorithm::kFixedWindow, {0, 1, 2}, "count"},
      {Algorithm::kSlidingLog, {0, -5, 1, -6, 1}, "entry 1"},
      {Algorithm::kSlidingLog, {0, -5, 0}, "entry 0"},
      {Algorithm::kSlidingLog, {0, -5}, "count"},
  };
  for (const Bad& c : cases) {
    Result<std::optional<KeyLimiter>> r = ImportState(c.algorithm, rate, c.fields, 1'000'000);
    ASSERT_FALSE(r.ok()) << AlgorithmName(c.algorithm) << " took " << c.says;
    EXPECT_NE(r.error().find(c.says), std::string::npos) << r.error();
  }
}

// Amounts beyond what the rate holds (a state written under a higher limit or burst: a
// rollout, a policy lowered across a restart) are clamped to it: the key arrives exhausted
// at this rate, never refused (which would make it fresh).
TEST(StateTransfer, AmountsBeyondTheRateArriveClampedAndExhausted) {
  const Rate rate = MakeRate(10, 1000, 10);
  struct Over {
    Algorithm algorithm;
    std::vector<int64_t> fields;
  };
  const std::vector<Over> cases = {
      {Algorithm::kTokenBucket, {0, -5}},  // empty: stays empty
      {Algorithm::kGcra, {5'000, 0}},      // beyond what a burst of 10 can leave
      {Algorithm::kGcra, {1'000, 5}},      // just beyond
      {Algorithm::kLeakyBucket, {10 * 1000 + 1, 0}},
      {Algorithm::kFixedWindow, {0, 11}},
      {Algorithm::kSlidingWindow, {0, 1, 20}},
      {Algorithm::kSlidingLog, {0, -5, 8, -4, 8}},
      {Algorithm::kSlidingLog, {0, -5, 100}},
  };
  for (const Over& c : cases) {
    Result<std::optional<KeyLimiter>> r = ImportState(c.algorithm, rate, c.fields, 1'000'000);
    ASSERT_TRUE(r.ok()) << AlgorithmName(c.algorithm) << ": " << r.error();
    ASSERT_TRUE(r->has_value()) << AlgorithmName(c.algorithm) << " arrived fresh";
    EXPECT_EQ((*r)->Available(rate, 1'000'000), 0) << AlgorithmName(c.algorithm);
  }
  // A full bucket's worth of tokens and more is a full bucket: fresh, as it would be.
  Result<std::optional<KeyLimiter>> full = ImportState(
      Algorithm::kTokenBucket, rate, std::vector<int64_t>{10 * 1000 + 1, -5}, 1'000'000);
  ASSERT_TRUE(full.ok()) << full.error();
  EXPECT_FALSE(full->has_value());
  // The log keeps its newest entries, up to the limit: room again as they leave the window.
  Result<std::optional<KeyLimiter>> log =
      ImportState(Algorithm::kSlidingLog, rate, std::vector<int64_t>{0, -900, 8, -5, 8}, 1'000'000);
  ASSERT_TRUE(log.ok()) << log.error();
  ASSERT_TRUE(log->has_value());
  EXPECT_EQ((*log)->Available(rate, 1'000'000 + 50), 0) << "the newest 8 and 2 of the older";
  EXPECT_EQ((*log)->Available(rate, 1'000'000 + 101), 2) << "the older entry's part has left";
}

TEST(StateTransfer, TheStricterOfTwoStatesIsTheOneWithMoreInEffect) {
  const Rate rate = MakeRate(10, 1000, 10);
  KeyLimiter a(Algorithm::kTokenBucket), b(Algorithm::kTokenBucket);
  a.Decide(rate, 100, 7);
  b.Decide(rate, 100, 2);
  EXPECT_EQ(StricterOf(rate, a, b, 100).Available(rate, 100), 3);
  EXPECT_EQ(StricterOf(rate, b, a, 100).Available(rate, 100), 3);
}

}  // namespace
}  // namespace limiter
