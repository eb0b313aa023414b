// The store-op floor and the accuracy accounting, on hand-made decisions whose answers are
// known.
#include "bench/fleet_accounting.h"

#include <gtest/gtest.h>

#include <random>

#include "limiter/client/client.h"
#include "test/support/policies.h"
#include "test/unit/test_seed.h"

namespace limiter::bench {
namespace {

constexpr auto kStore = static_cast<uint8_t>(client::Source::kStore);
constexpr auto kLeased = static_cast<uint8_t>(client::Source::kLease);
constexpr auto kFellBack = static_cast<uint8_t>(client::Source::kFallback);

const char* kPolicies = R"(
policies:
  - {name: api_key, algorithm: token_bucket, limit: 100, window: 1s, burst: 200, class: contract}
  - {name: login, algorithm: gcra, limit: 10, window: 1m, class: security}
)";

class Accounting : public ::testing::Test {
 protected:
  Accounting() {
    policies_ = testing::Policies(kPolicies, "test.yaml");
    Result<std::vector<KindLimits>> limits = LimitsOf(policies_, 4, /*deadline_us=*/2000);
    EXPECT_TRUE(limits.ok()) << limits.error();
    if (limits.ok()) limits_ = std::move(limits).value();
  }

  // An admission (or denial) of key 0 on gateway `g` at `ms`, decided `rtt_us` later.
  static DecisionRecord At(double ms, bool allowed, uint8_t source = kStore, int gateway = 0,
                           int32_t retry_ms = 0, int64_t rtt_us = 200) {
    DecisionRecord r;
    r.intended_us = static_cast<int64_t>(ms * 1000);
    r.done_us = r.intended_us + (source == kLeased ? 0 : rtt_us);
    r.gateway = static_cast<uint16_t>(gateway);
    r.source = source;
    r.allowed = allowed;
    r.retry_after_ms = retry_ms;
    r.measured = 1;
    return r;
  }
  // Four keys in two tenants, four accounts.
  static Scenario Small() {
    Scenario s;
    s.keys = 4;
    s.tenants = 2;
    s.accounts = 4;
    return s;
  }
  // `r` decided by its own CHECK (charged between its arrival and its decision).
  static DecisionRecord Checked(DecisionRecord r) {
    r.checked = 1;
    return r;
  }

  PolicySet policies_;
  std::vector<KindLimits> limits_;
};

TEST_F(Accounting, LimitsComeFromThePolicies) {
  ASSERT_EQ(limits_.size(), 2u);
  EXPECT_EQ(limits_[kApiKey].lease_units, 20);                // a fifth of 100/s
  EXPECT_EQ(limits_[kApiKey].fallback_window_us, 4'000'000);  // L per N·W
  EXPECT_EQ(limits_[kApiKey].fallback_burst, 50);             // B/N
  EXPECT_TRUE(limits_[kLogin].strict);
  EXPECT_EQ(limits_[kLogin].fallback_limit, 0);  // no local limit: denies
  PolicySet none;
  const Result<std::vector<KindLimits>> limits = LimitsOf(none, 4, 2000);
  EXPECT_FALSE(limits.ok());
  EXPECT_NE(limits.error().find("no policy 'api_key'"), std::string::npos) << limits.error();
}

TEST_F(Accounting, OneLeasePerTtlAndLeaseSize) {
  std::vector<DecisionRecord> r;
  for (int i = 0; i < 25; ++i) r.push_back(At(10.0 * i, true, i == 0 ? kStore : kLeased));
  // 25 units inside one TTL: a lease of 20, then another.
  EXPECT_EQ(StoreOpFloor(r, limits_).leases, 2u);
  // Spaced wider than the TTL: one each.
  r = {At(0, true), At(1500, true), At(3000, true)};
  EXPECT_EQ(StoreOpFloor(r, limits_).leases, 3u);
  // Two gateways are two streams.
  r = {At(0, true, kStore, 0), At(1, true, kStore, 1)};
  EXPECT_EQ(StoreOpFloor(r, limits_).leases, 2u);
  // A request costing more than a lease takes one of its own, and leaves nothing.
  DecisionRecord big = At(2, true);
  big.cost = 50;
  r = {At(0, true), big, At(3, true)};
  EXPECT_EQ(StoreOpFloor(r, limits_).leases, 3u);
}

TEST_F(Accounting, ADenialPeriodNeedsOneAnswer) {
  std::vector<DecisionRecord> r;
  for (int i = 0; i < 5; ++i) r.push_back(At(i * 10.0, false, kStore, 0, 100));
  r.push_back(At(150, false, kStore, 0, 100));  // after the 100 ms it was told
  EXPECT_EQ(StoreOpFloor(r, limits_).denials, 2u);
  // Right after a lease, the lease's reply could have said it: free.
  r = {At(0, true), At(5, false, kStore, 0, 100), At(50, false, kStore, 0, 100)};
  const StoreOpFloorResult f = StoreOpFloor(r, limits_);
  EXPECT_EQ(f.leases, 1u);
  EXPECT_EQ(f.denials, 0u);
  // Fallbacks and errors were no store call's to make.
  r = {At(0, true, kFellBack), At(1, false, kFellBack)};
  EXPECT_EQ(StoreOpFloor(r, limits_).total(), 0u);
}

TEST_F(Accounting, RequestsThatWaitedTogetherShareOneLease) {
  // One lease's reply pays a cost-1 and a cost-50 request that waited for it: one op.
  DecisionRecord big = At(0.05, true, kStore, 0, 0, 150);
  big.cost = 50;
  const std::vector<DecisionRecord> r = {At(0, true), big};
  EXPECT_EQ(StoreOpFloor(r, limits_).leases, 1u);
}

TEST_F(Accounting, ADenialIsCachedFromWhenItWasDecided) {
  // Decided 5 ms after it arrived, told 100 ms: the client asks again only after 105 ms.
  const std::vector<DecisionRecord> r = {At(0, false, kStore, 0, 100, 5000),
                                         At(102, false, kStore, 0, 3, 0)};
  EXPECT_EQ(StoreOpFloor(r, limits_).denials, 1u);
}

TEST_F(Accounting, RecordsFromAFileAreChecked) {
  const std::array<size_t, kKinds> keys = {10, 5};
  DecisionRecord r = At(0, true);
  EXPECT_TRUE(CheckRecord(r, keys).ok());
  DecisionRecord bad = r;
  bad.kind = 2;
  EXPECT_NE(CheckRecord(bad, keys).error().find("kind 2"), std::string::npos);
  bad = r;
  bad.kind = kLogin;
  bad.index = 5;
  EXPECT_NE(CheckRecord(bad, keys).error().find("key rank 5 of 5"), std::string::npos);
  bad = r;
  bad.source = 7;
  EXPECT_FALSE(CheckRecord(bad, keys).ok());
  bad = r;
  bad.allowed = 2;
  EXPECT_FALSE(CheckRecord(bad, keys).ok());
  bad = r;
  bad.cost = 0;
  EXPECT_FALSE(CheckRecord(bad, keys).ok());
  bad = r;
  bad.done_us = bad.intended_us - 1;
  EXPECT_FALSE(CheckRecord(bad, keys).ok());
}

TEST_F(Accounting, StrictAndCheckedRequestsAreOneCheckEach) {
  std::vector<DecisionRecord> r;
  for (int i = 0; i < 3; ++i) {
    DecisionRecord login = At(i, true);
    login.kind = kLogin;
    r.push_back(login);
  }
  DecisionRecord report = At(0.5, true);
  report.checked = true;
  report.cost = 20;
  r.push_back(report);
  r.push_back(At(0.2, true));
  r.push_back(At(0.7, true, kLeased));
  const StoreOpFloorResult f = StoreOpFloor(r, limits_);
  EXPECT_EQ(f.checks, 4u);  // three logins and the report
  EXPECT_EQ(f.leases, 1u);  // the report did not end the lease
}

TEST_F(Accounting, ArrivalsBeforeTheMeasurementSetStateButCountNothing) {
  std::vector<DecisionRecord> r = {At(0, true), At(500, true, kLeased), At(1200, true)};
  r[0].measured = 0;  // the warm-up's lease covers the arrival at 500 ms
  EXPECT_EQ(StoreOpFloor(r, limits_).leases, 1u);
}

TEST_F(Accounting, StoreAdmissionsWithinThePromisePass) {
  const Workload w(Small());
  std::vector<DecisionRecord> r;
  // Checked admissions: each charged between its arrival and its decision.
  for (int i = 0; i < 200; ++i) r.push_back(Checked(At(0, true)));              // the burst
  for (int i = 0; i < 100; ++i) r.push_back(Checked(At(10 + i * 10.0, true)));  // the rate
  Accuracy a = CheckAccuracy(r, limits_, w);
  EXPECT_EQ(a.keys_checked, 1u);
  EXPECT_EQ(a.keys_over_promise, 0u);
  EXPECT_EQ(a.keys_over_real_time_bound, 0u);
  r.push_back(Checked(At(500, true)));
  r.push_back(Checked(At(500, true)));
  a = CheckAccuracy(r, limits_, w);
  EXPECT_EQ(a.keys_over_promise, 1u);
  EXPECT_EQ(a.worst.key, "k0");
  EXPECT_GT(a.worst.excess, 0);
}

TEST_F(Accounting, AStoreDecisionOfALeasedPolicyMayBePaidFromUnitsInHand) {
  const Workload w(Small());
  // 300 admissions in 10 ms, decided by replies: the units may have come from leases granted
  // up to a TTL (and a deadline) before, so in charge time this is B + L·1 s, not over; as
  // CHECKs it would be.
  std::vector<DecisionRecord> r;
  for (int i = 0; i < 300; ++i) r.push_back(At(1000 + i / 30.0, true));
  EXPECT_EQ(CheckAccuracy(r, limits_, w).keys_over_promise, 0u);
  for (DecisionRecord& x : r) x.checked = 1;
  EXPECT_EQ(CheckAccuracy(r, limits_, w).keys_over_promise, 1u);
}

TEST_F(Accounting, LeasedUnitsCountWhenSpentInRealTime) {
  const Workload w(Small());
  std::vector<DecisionRecord> r;
  // The burst at 500 ms, then leased units spent by gateway 1 half a second later: they may
  // have been charged up to a TTL before they were spent, before the burst, so in charge time
  // the key keeps its promise; in real time about 250 are allowed by then.
  for (int i = 0; i < 200; ++i) r.push_back(At(500, true));
  for (int i = 0; i < 80; ++i) r.push_back(At(1000.5, true, kLeased, 1));
  Accuracy a = CheckAccuracy(r, limits_, w);
  EXPECT_EQ(a.keys_over_promise, 0u);
  EXPECT_EQ(a.keys_over_promise_real_time, 1u);
  EXPECT_EQ(a.keys_over_real_time_bound, 1u) << "30 over, and one lease of 20 outstanding";
  r.resize(r.size() - 15);  // 15 over: within one lease's units
  a = CheckAccuracy(r, limits_, w);
  EXPECT_EQ(a.keys_over_promise_real_time, 1u);
  EXPECT_EQ(a.keys_over_real_time_bound, 0u);
  r.resize(r.size() - 20);
  a = CheckAccuracy(r, limits_, w);
  EXPECT_EQ(a.keys_over_promise_real_time, 0u);
}

TEST_F(Accounting, FallbackKeysAreJudgedByTheirAllowance) {
  const Workload w(Small());
  std::vector<DecisionRecord> r;
  for (int i = 0; i < 200; ++i) r.push_back(Checked(At(0, true)));
  // One gateway falls back: its L/N bucket adds B/N = 50 at once.
  for (int i = 0; i < 50; ++i) r.push_back(At(1, true, kFellBack, 2));
  Accuracy a = CheckAccuracy(r, limits_, w);
  EXPECT_EQ(a.keys_over_promise, 0u);
  EXPECT_EQ(a.keys_with_fallback, 1u);
  EXPECT_EQ(a.keys_over_promise_with_fallback, 1u);
  EXPECT_EQ(a.keys_over_allowance, 0u);
  EXPECT_EQ(a.worst_with_fallback.limit_class, "contract");
  EXPECT_TRUE(a.worst_with_fallback.within_allowance);
  for (int i = 0; i < 10; ++i) r.push_back(At(1, true, kFellBack, 2));
  a = CheckAccuracy(r, limits_, w);
  EXPECT_EQ(a.keys_over_allowance, 1u);
  EXPECT_FALSE(a.worst_with_fallback.within_allowance);
  // A reset owner allows one more burst.
  std::vector<DecisionRecord> reset;
  for (int i = 0; i < 400; ++i) reset.push_back(Checked(At(0, true)));
  const std::vector<std::vector<uint16_t>> resets = {{1, 0, 0, 0}, {0, 0, 0, 0}};
  a = CheckAccuracy(reset, limits_, w, &resets);
  EXPECT_EQ(a.keys_over_promise, 0u);
  EXPECT_EQ(a.keys_over_promise_with_fallback, 1u);
  EXPECT_EQ(a.keys_over_allowance, 0u);
  // A security key has no local allowance: any fallback admission over the promise is over.
  std::vector<DecisionRecord> logins;
  for (int i = 0; i < 11; ++i) {
    DecisionRecord l = At(i, true, i < 10 ? kStore : kFellBack);
    l.kind = kLogin;
    logins.push_back(l);
  }
  a = CheckAccuracy(logins, limits_, w);
  EXPECT_EQ(a.keys_over_allowance, 1u);
  EXPECT_EQ(a.worst_with_fallback.limit_class, "security");
}

// Against brute force over every (start, end) pair, on random spans whose starts are in any
// order; and against FindWorstWindow where starts follow ends.
TEST(ExactWorstWindow, MatchesBruteForce) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 300; ++round) {
    const PromiseBound bound{
        1 + static_cast<int64_t>(rng() % 20), 1000 + static_cast<int64_t>(rng() % 5000),
        1 + static_cast<int64_t>(rng() % 10), static_cast<int64_t>(rng() % 3) * 100};
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<Admission> spans;
    const bool monotone = round % 2 == 0;
    int64_t t = 0;
    for (int i = 0; i < n; ++i) {
      t += static_cast<int64_t>(rng() % 300);
      const int64_t back = monotone ? 50 : static_cast<int64_t>(rng() % 3000);
      spans.push_back(
          {t - back, t + static_cast<int64_t>(rng() % 40), 1 + static_cast<int64_t>(rng() % 3)});
    }
    std::sort(spans.begin(), spans.end(),
              [](const Admission& x, const Admission& y) { return x.end_us < y.end_us; });
    __int128 best = 0;
    bool have = false;
    for (const Admission& a : spans) {
      for (const Admission& b : spans) {
        if (b.end_us < a.end_us) continue;  // a window holds the admission it starts at
        __int128 inside = 0;
        for (const Admission& x : spans) {
          if (x.start_us >= a.start_us && x.end_us <= b.end_us) inside += x.cost;
        }
        const __int128 score =
            inside * bound.window_us -
            __int128{bound.limit} * (b.end_us - a.start_us + bound.resolution_us);
        if (!have || score > best) best = score;
        have = true;
      }
    }
    const bool over = best > __int128{bound.burst} * bound.window_us;
    std::vector<Admission> copy = spans;
    EXPECT_EQ(ExactWorstWindow(copy, bound).over, over) << "round " << round;
    if (monotone) {
      // Starts in the order of ends: the one-pass check agrees.
      bool sorted_starts = std::is_sorted(
          spans.begin(), spans.end(),
          [](const Admission& x, const Admission& y) { return x.start_us < y.start_us; });
      if (sorted_starts) {
        EXPECT_EQ(FindWorstWindow(spans, bound).over, over) << "round " << round;
      }
    }
  }
}

}  // namespace
}  // namespace limiter::bench
