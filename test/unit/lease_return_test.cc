// RETURN against a reference: random traffic on one key between leases and their returns,
// for every algorithm, compared with a run of the same traffic in which the returned units
// were never charged. The key must end exactly as that reference does; a return must never
// give back what is no longer owed.
#include <gtest/gtest.h>

#include <iostream>
#include <random>
#include <vector>

#include "common/key_limiter.h"
#include "common/lease_book.h"
#include "test/unit/test_printers.h"
#include "test/unit/test_seed.h"

namespace limiter {

namespace {

using testing::SeedTrace;
using testing::TestSeed;

constexpr int kTraces = 100'000;
constexpr int64_t kTtl = 1000;

struct Lease {
  uint64_t id;
  int64_t at;
  int64_t units;
  int64_t returned = 0;  // units whose return was accepted (the reference never charges them)
};

struct Charge {
  int64_t at;
  int64_t cost;
};

// The node's side of one key: its state and its lease book, driven as Node drives them.
struct Keeper {
  explicit Keeper(Algorithm a) : limiter(a) {}
  KeyLimiter limiter;
  LeaseBook book;

  bool Admit(const Rate& rate, int64_t now, int64_t cost) {
    book.Clamp(limiter.InEffect(rate, now));
    return limiter.Decide(rate, now, cost).allowed;
  }
  int64_t Grant(const Rate& rate, int64_t now, uint64_t id, int64_t wanted) {
    book.Clamp(limiter.InEffect(rate, now));
    const int64_t grant = std::min(wanted, limiter.Available(rate, now));
    if (grant == 0) return 0;
    EXPECT_TRUE(limiter.Decide(rate, now, grant).allowed);
    book.Grant(id, now, now + kTtl, grant, limiter.InEffect(rate, now));
    return grant;
  }
  // Charge units given back, or -1 when the return is refused.
  int64_t Return(const Rate& rate, int64_t now, const Lease& l, int64_t units) {
    book.Clamp(limiter.InEffect(rate, now));
    const int64_t scale = limiter.ChargeScale(rate);
    Result<int64_t> claim = book.Claim(l.id, l.at, units, scale, now);
    if (!claim) return -1;
    const int64_t given = limiter.Refund(rate, now, *claim, l.at);
    book.Settle(l.id, given);
    return given;
  }
};

struct Trace {
  Rate rate;
  std::vector<Lease> leases;
  std::vector<Charge> admitted;  // checks the keeper admitted
  int64_t end = 0;
};

// Runs one random trace through a Keeper; fills `trace` with what the reference needs.
void RunTrace(std::mt19937_64& rng, Keeper& keeper, Trace& trace, int max_leases) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t limit = uniform(1, 30);
  const int64_t windows[] = {1, 7, 100, 1000, 1001, 60'000};
  const int64_t window = windows[uniform(0, 5)];
  const int64_t burst = uniform(1, 3 * limit);
  trace.rate = Rate(limit, window, burst);
  const Rate& rate = trace.rate;
  int64_t t = uniform(0, 3 * window);
  const int events = static_cast<int>(uniform(5, 60));
  uint64_t next_id = uniform(1, 1 << 20);
  for (int i = 0; i < events; ++i) {
    switch (uniform(0, 3)) {  // bursts, steady, gaps within the TTL, long gaps
      case 0:
        break;
      case 1:
        t += uniform(0, std::max<int64_t>(1, window / limit));
        break;
      case 2:
        t += uniform(0, std::min<int64_t>(kTtl / 4, window / 2 + 1));
        break;
      default:
        t += uniform(0, kTtl / 2);
        break;
    }
    const int64_t kind = uniform(0, 9);
    if (kind < 3 && static_cast<int>(trace.leases.size()) < max_leases) {
      const uint64_t id = next_id++;
      const int64_t got = keeper.Grant(rate, t, id, uniform(1, burst + 2));
      if (got > 0) trace.leases.push_back({id, t, got});
    } else if (kind < 5 && !trace.leases.empty()) {
      Lease& l = trace.leases[static_cast<size_t>(uniform(0, trace.leases.size() - 1))];
      if (l.returned > 0 || t > l.at + kTtl) continue;  // the client returns each lease once
      const int64_t units = uniform(1, l.units);
      const int64_t given = keeper.Return(rate, t, l, units);
      ASSERT_GE(given, 0) << "an outstanding lease's return was refused";
      l.returned = units;
    } else {
      const int64_t cost = uniform(0, 5) == 0 ? uniform(1, burst) : 1;
      if (keeper.Admit(rate, t, cost)) trace.admitted.push_back({t, cost});
    }
  }
  trace.end = t;
}

// The same traffic, with every returned unit never charged.
KeyLimiter Reference(Algorithm a, const Trace& trace) {
  KeyLimiter ref(a);
  struct Event {
    int64_t at;
    int64_t cost;
  };
  std::vector<Event> events;
  for (const Lease& l : trace.leases) {
    if (l.units > l.returned) events.push_back({l.at, l.units - l.returned});
  }
  for (const Charge& c : trace.admitted) events.push_back({c.at, c.cost});
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& x, const Event& y) { return x.at < y.at; });
  for (const Event& e : events) {
    EXPECT_TRUE(ref.Decide(trace.rate, e.at, e.cost).allowed)
        << "the reference refused what the keeper admitted at t=" << e.at;
  }
  return ref;
}

// From `end` on, both decide alike: the same charge in effect now, and the same answers to
// every cost at a few later times.
void ExpectSameFromNowOn(const KeyLimiter& keeper, const KeyLimiter& ref, const Trace& trace) {
  const Rate& rate = trace.rate;
  ASSERT_EQ(keeper.InEffect(rate, trace.end), ref.InEffect(rate, trace.end))
      << "charge in effect at t=" << trace.end;
  for (int64_t later : {int64_t{0}, int64_t{1}, rate.window_ms() / 3, rate.window_ms()}) {
    for (int64_t cost = 1; cost <= rate.burst() + 1;
         cost += std::max<int64_t>(1, rate.burst() / 5)) {
      const LimitDecision x = keeper.Peek(rate, trace.end + later, cost);
      const LimitDecision y = ref.Peek(rate, trace.end + later, cost);
      ASSERT_EQ(x.allowed, y.allowed) << "cost " << cost << " at t=" << trace.end + later;
      ASSERT_EQ(x.remaining, y.remaining) << "cost " << cost << " at t=" << trace.end + later;
    }
  }
}

class ReturnProperty : public ::testing::TestWithParam<Algorithm> {};

TEST_P(ReturnProperty, OneLeaseEndsExactlyAsIfItsReturnedUnitsWereNeverCharged) {
  const uint64_t seed = TestSeed();
  std::cout << "seed " << seed << " (" << SeedTrace(seed) << ")\n";
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const Algorithm a = GetParam();
  int returns = 0;
  for (int i = 0; i < kTraces; ++i) {
    Keeper keeper(a);
    Trace trace;
    RunTrace(rng, keeper, trace, /*max_leases=*/1);
    if (HasFatalFailure()) return;
    for (const Lease& l : trace.leases) returns += l.returned > 0;
    SCOPED_TRACE("trace " + std::to_string(i));
    const KeyLimiter ref = Reference(a, trace);
    ExpectSameFromNowOn(keeper.limiter, ref, trace);
    if (HasFailure()) return;
  }
  EXPECT_GT(returns, kTraces / 10);  // the traces did return units
}

TEST_P(ReturnProperty, SeveralLeasesEndExactlyAsIfTheirReturnedUnitsWereNeverCharged) {
  const uint64_t seed = TestSeed();
  std::cout << "seed " << seed << " (" << SeedTrace(seed) << ")\n";
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const Algorithm a = GetParam();
  for (int i = 0; i < kTraces; ++i) {
    Keeper keeper(a);
    Trace trace;
    RunTrace(rng, keeper, trace, /*max_leases=*/4);
    if (HasFatalFailure()) return;
    SCOPED_TRACE("trace " + std::to_string(i));
    const KeyLimiter ref = Reference(a, trace);
    ExpectSameFromNowOn(keeper.limiter, ref, trace);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, ReturnProperty, ::testing::ValuesIn(kAllAlgorithms),
                         [](const auto& info) { return std::string(AlgorithmName(info.param)); });

TEST(LeaseBook, AReturnIsAcceptedOnceForAnOutstandingLeaseOnly) {
  const Rate rate(10, 1000, 10);
  Keeper k(Algorithm::kTokenBucket);
  ASSERT_EQ(k.Grant(rate, 5000, 7, 4), 4);
  const Lease lease{7, 5000, 4};
  EXPECT_EQ(k.Return(rate, 5000, {8, 5000, 4}, 1), -1);  // never granted
  EXPECT_EQ(k.Return(rate, 5000, {7, 4999, 4}, 1), -1);  // not when it was granted
  EXPECT_EQ(k.Return(rate, 5000, lease, 5), -1);         // more than it granted
  EXPECT_EQ(k.Return(rate, 5000, lease, 3), 3000);       // 3 units, scaled by W
  EXPECT_EQ(k.Return(rate, 5000, lease, 1), -1);         // a replay
  const Result<int64_t> again = k.book.Claim(7, 5000, 1, rate.window_ms(), 5000);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error(), "lease 7 was returned already");
  ASSERT_EQ(k.Grant(rate, 5000, 9, 2), 2);
  EXPECT_EQ(k.Return(rate, 6001, {9, 5000, 2}, 1), -1);  // lapsed
}

TEST(LeaseBook, AChargeForgottenByAFullBucketIsNotGivenBack) {
  const Rate rate(10, 1000, 10);  // 10 per second
  Keeper k(Algorithm::kGcra);
  ASSERT_EQ(k.Grant(rate, 0, 1, 5), 5);
  // 600 ms: full again. Ten admissions drain it; the lease's charge is gone.
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(k.Admit(rate, 600, 1));
  EXPECT_EQ(k.Return(rate, 600, {1, 0, 5}, 5), 0);
  EXPECT_FALSE(k.Admit(rate, 600, 1));
}

TEST(LeaseBook, APartlyForgottenChargeGivesBackThePartStillInEffect) {
  const Rate rate(10, 1000, 10);
  Keeper k(Algorithm::kTokenBucket);
  ASSERT_EQ(k.Grant(rate, 0, 1, 10), 10);
  // 200 ms later two tokens are back, and two admissions take them: since the grant the
  // bucket came within 8 units of full, so the lease's charge still in effect is 8 units.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(k.Admit(rate, 200, 1)) << i;
  ASSERT_FALSE(k.Admit(rate, 200, 1));
  EXPECT_EQ(k.Return(rate, 200, {1, 0, 10}, 10), 8000);
}

TEST(LeaseBook, KeepsAtMostItsBoundOfRecordsAndForgetsLapsedOnes) {
  LeaseBook book;
  for (uint64_t id = 1; id <= 20; ++id) book.Grant(id, 100, 1100, 1, static_cast<int64_t>(id));
  EXPECT_EQ(book.records().size(), LeaseBook::kMaxRecords);
  const uint64_t oldest = 20 - LeaseBook::kMaxRecords + 1;
  EXPECT_EQ(book.records().front().lease_id, oldest);
  EXPECT_FALSE(book.Claim(1, 100, 1, 1, 100).ok());  // forgotten: its unit lapses
  EXPECT_TRUE(book.Claim(oldest, 100, 1, 1, 100).ok());
  // A claim far above any lease is refused before anything is multiplied.
  const Result<int64_t> huge = book.Claim(oldest, 100, kMaxCost, int64_t{400} * 86'400'000, 100);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error(),
            "returns 1000000000 units of lease " + std::to_string(oldest) + ", which granted 1");
  EXPECT_FALSE(book.Expire(1100));
  EXPECT_TRUE(book.Expire(1101));
  // A grant drops what has lapsed before it.
  for (uint64_t id = 1; id <= 3; ++id) book.Grant(id, 100, 1100, 1, 1);
  book.Grant(4, 1200, 2200, 1, 1);
  EXPECT_EQ(book.records().size(), 1u);
}

}  // namespace
}  // namespace limiter
