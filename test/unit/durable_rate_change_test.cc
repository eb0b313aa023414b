// A durable key's state read back under a lowered limit or burst (server/durable_record.h,
// protocol/state_transfer.h ConvertFields): for every algorithm, a random state written under
// one rate and read under a smaller one admits no more, at any later time, than the old state
// would have under the old rate, and an exhausted key stays exhausted (never fresh). The same
// fields under the same rate come back unchanged (the hand-off's case).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "protocol/state_transfer.h"
#include "server/durable_record.h"
#include "test/support/policies.h"
#include "test/unit/test_seed.h"

namespace limiter {
namespace {

struct RateChange {
  const char* name;
  int64_t limit1, burst1, limit2, burst2;
};

// Window 10 s, so that states live across the probes.
constexpr RateChange kChanges[] = {
    {"limit_and_burst_lowered", 50, 50, 20, 20},
    {"burst_lowered", 50, 50, 50, 10},
    {"limit_lowered_burst_kept", 50, 10, 20, 10},
    {"limit_lowered_far", 1000, 1000, 20, 20},
};

const std::vector<std::string> kAlgorithms = {"fixed_window", "sliding_log", "sliding_window",
                                              "token_bucket", "gcra",        "leaky_bucket"};

Policy MakePolicy(const std::string& algorithm, int64_t limit, int64_t burst) {
  const bool bucket = algorithm == "token_bucket" || algorithm == "gcra" ||
                      algorithm == "leaky_bucket";  // the window algorithms have no burst
  const std::string text = "policies:\n  - {name: p, algorithm: " + algorithm +
                           ", limit: " + std::to_string(limit) + ", window: 10s" +
                           (bucket ? ", burst: " + std::to_string(burst) : std::string()) +
                           ", class: contract, durable: true}\n";
  const PolicySet set = testing::Policies(text, "rate_change.yaml");
  return set.policies().empty() ? Policy{} : set.policies()[0];
}

class LoweredRate : public ::testing::TestWithParam<std::string> {};

TEST_P(LoweredRate, AStateReadUnderASmallerRateIsNeverMoreGenerousAndStaysExhausted) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const DurableKeyName name{DurableKeyName::kLimit, "k", ""};
  constexpr int64_t kWall = 1'700'000'000'000;
  int exhausted_cases = 0;
  for (const RateChange& c : kChanges) {
    SCOPED_TRACE(c.name);
    const Policy old_policy = MakePolicy(GetParam(), c.limit1, c.burst1);
    const Policy new_policy = MakePolicy(GetParam(), c.limit2, c.burst2);
    ASSERT_EQ(old_policy.algorithm, new_policy.algorithm);
    for (int run = 0; run < 300; ++run) {
      KeyLimiter old_state(old_policy.algorithm);
      int64_t t = 1'000'000 + static_cast<int64_t>(rng() % 10'000);
      // Some runs drive the key to exhaustion, others leave it part used.
      const int arrivals = static_cast<int>(rng() % (run % 2 == 0 ? 3000 : 40));
      for (int i = 0; i < arrivals; ++i) {
        t += static_cast<int64_t>(rng() % 5);
        old_state.Decide(old_policy.rate, t, 1 + static_cast<int64_t>(rng() % 3));
      }
      if (old_state.IsFresh(old_policy.rate, t)) continue;
      std::string bytes;
      durable::Encode(old_policy, name, old_state, t, kWall, bytes);
      Result<durable::Record> decoded = durable::Decode(bytes);
      ASSERT_TRUE(decoded.ok()) << decoded.error();
      const durable::Record& r = *decoded;
      // Read back at once, by a node whose clock reads elsewhere (a restart). The window
      // algorithms count in windows aligned to each node's clock (state_transfer.h), so for
      // them the new clock is put in the same phase: what is compared is the rate change, not
      // the windows' realignment (whose bound, 2L in any W, state_transfer_test covers).
      const bool windows = old_policy.algorithm == Algorithm::kFixedWindow ||
                           old_policy.algorithm == Algorithm::kSlidingWindow;
      const int64_t now = 7'000'000 + (windows ? t % 10'000 : static_cast<int64_t>(rng() % 1000));
      Result<std::optional<KeyLimiter>> read = durable::Import(new_policy, r, now, kWall);
      ASSERT_TRUE(read.ok()) << "run " << run << ": " << read.error();
      const bool was_exhausted = old_state.Available(old_policy.rate, t) == 0;
      if (was_exhausted) {
        ++exhausted_cases;
        ASSERT_TRUE(read->has_value()) << "run " << run << ": an exhausted key came back fresh";
        EXPECT_EQ((*read)->Available(new_policy.rate, now), 0) << "run " << run;
      }
      KeyLimiter new_state = read->has_value() ? **read : KeyLimiter(new_policy.algorithm);
      // At later times (no arrivals between), the new state admits at most what the old one
      // would have: one probe per copy, each on its own copy.
      for (int64_t dt : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{199}, int64_t{1000},
                         int64_t{4999}, int64_t{9999}, int64_t{10'000}, int64_t{15'001},
                         static_cast<int64_t>(rng() % 25'000)}) {
        const int64_t old_room = old_state.Available(old_policy.rate, t + dt);
        const int64_t new_room = new_state.Available(new_policy.rate, now + dt);
        ASSERT_LE(new_room, old_room) << "run " << run << " " << dt << " ms after the read";
        for (int64_t cost = 1; cost <= 3; ++cost) {
          if (new_state.Peek(new_policy.rate, now + dt, cost).allowed) {
            ASSERT_TRUE(old_state.Peek(old_policy.rate, t + dt, cost).allowed)
                << "run " << run << " " << dt << " ms after the read, cost " << cost;
          }
        }
      }
    }
  }
  EXPECT_GT(exhausted_cases, 0) << "the runs never exhausted a key: the test tests nothing";
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, LoweredRate, ::testing::ValuesIn(kAlgorithms),
                         [](const auto& info) { return info.param; });

// The conversion is a change of rate only: under the same rate the fields are untouched, and
// a state moved between two nodes with the same policy arrives as it left.
TEST(ConvertFields, TheSameRateChangesNothing) {
  const Rate rate(20, 1000, 10);
  std::vector<int64_t> f = {3, 17};
  ConvertFields(Algorithm::kGcra, rate, rate, f);
  EXPECT_EQ(f, (std::vector<int64_t>{3, 17}));
  f = {9000, -5};
  ConvertFields(Algorithm::kTokenBucket, rate, rate, f);
  EXPECT_EQ(f, (std::vector<int64_t>{9000, -5}));
}

// A record of the format before the rate was written (no kWithRate): read as if written under
// the rate of the read, its amounts clamped to it.
TEST(ConvertFields, ARecordWithoutItsRateIsClampedToTheNewOne) {
  const Policy old_policy = MakePolicy("fixed_window", 1000, 1000);
  const Policy new_policy = MakePolicy("fixed_window", 20, 20);
  KeyLimiter state(old_policy.algorithm);
  for (int i = 0; i < 600; ++i) state.Decide(old_policy.rate, 1'000'000, 1);
  std::string bytes;
  durable::Encode(old_policy, {DurableKeyName::kLimit, "k", ""}, state, 1'000'000, 5, bytes);
  Result<durable::Record> decoded = durable::Decode(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.error();
  durable::Record& r = *decoded;
  r.flags &= static_cast<uint8_t>(~durable::kWithRate);
  Result<std::optional<KeyLimiter>> read = durable::Import(new_policy, r, 3'000'000, 5);
  ASSERT_TRUE(read.ok()) << read.error();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ((*read)->Available(new_policy.rate, 3'000'000), 0);
}

TEST(ConvertFields, ARecordWithAnImpossibleRateIsMalformed) {
  const Policy policy = MakePolicy("gcra", 20, 20);
  KeyLimiter state(policy.algorithm);
  state.Decide(policy.rate, 1'000'000, 5);
  std::string bytes;
  durable::Encode(policy, {DurableKeyName::kLimit, "k", ""}, state, 1'000'000, 5, bytes);
  bytes.back() = 0;  // burst 0
  const Result<durable::Record> decoded = durable::Decode(bytes);
  EXPECT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.error(), "malformed record rate");
}

}  // namespace
}  // namespace limiter
