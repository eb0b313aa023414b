#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <vector>

#include "common/key_limiter.h"
#include "common/promise_check.h"
#include "test/unit/test_printers.h"
#include "test/unit/test_seed.h"

namespace limiter {

namespace {

using testing::SeedTrace;
using testing::TestSeed;

// ----- hand-checked cases, one algorithm at a time -----

TEST(FixedWindow, CountsFromZeroAndAdmitsTwiceTheLimitAcrossABoundary) {
  const Rate rate(10, 1000, 10);
  FixedWindow::State s;
  int admitted = 0;
  for (int i = 0; i < 15; ++i) admitted += FixedWindow::Decide(rate, s, 900 + i, 1).allowed;
  EXPECT_EQ(admitted, 10);
  for (int i = 0; i < 15; ++i) admitted += FixedWindow::Decide(rate, s, 1000 + i, 1).allowed;
  EXPECT_EQ(admitted, 20);  // 20 within 115 ms: the fixed window's known weakness
  const LimitDecision d = FixedWindow::Decide(rate, s, 1500, 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, 500);
  EXPECT_EQ(d.reset_after_ms, 500);
  EXPECT_EQ(d.remaining, 0);
}

TEST(FixedWindow, WeighsCostAndNeverAdmitsMoreThanTheLimitAtOnce) {
  const Rate rate(10, 1000, 10);
  FixedWindow::State s;
  EXPECT_TRUE(FixedWindow::Decide(rate, s, 0, 7).allowed);
  LimitDecision d = FixedWindow::Decide(rate, s, 1, 4);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 3);
  EXPECT_EQ(d.retry_after_ms, 999);
  d = FixedWindow::Decide(rate, s, 2, 11);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, kNever);
}

TEST(SlidingLog, ForgetsEntriesExactlyOneWindowLater) {
  const Rate rate(3, 100, 3);
  SlidingLog::State s;
  EXPECT_TRUE(SlidingLog::Decide(rate, s, 0, 1).allowed);
  EXPECT_TRUE(SlidingLog::Decide(rate, s, 10, 2).allowed);
  LimitDecision d = SlidingLog::Decide(rate, s, 50, 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, 50);  // the entry at 0 leaves the window (t-100, t] at t = 100
  EXPECT_EQ(d.reset_after_ms, 60);
  EXPECT_FALSE(SlidingLog::Decide(rate, s, 99, 1).allowed);
  EXPECT_TRUE(SlidingLog::Decide(rate, s, 100, 1).allowed);
  d = SlidingLog::Decide(rate, s, 100, 3);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, 100);  // needs the entries at 10 and 100 gone
}

TEST(SlidingWindow, WeighsThePreviousWindowByItsOverlap) {
  const Rate rate(10, 1000, 10);
  SlidingWindow::State s;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(SlidingWindow::Decide(rate, s, 900 + i, 1).allowed);
  // At 1250 the previous window weighs 10 * 750/1000 = 7.5: three more fit (7.5 + 2 < 10).
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(SlidingWindow::Decide(rate, s, 1250, 1).allowed);
  const LimitDecision d = SlidingWindow::Decide(rate, s, 1250, 1);
  EXPECT_FALSE(d.allowed);
  // 10*(1000-e) + 3*1000 < 10000 first holds at e = 301, 51 ms later.
  EXPECT_EQ(d.retry_after_ms, 51);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.reset_after_ms, 1750);
}

TEST(SlidingWindow, IgnoresAPreviousWindowThatIsNotTheOneJustBefore) {
  const Rate rate(10, 1000, 10);
  SlidingWindow::State s;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(SlidingWindow::Decide(rate, s, 500, 1).allowed);
  int admitted = 0;
  for (int i = 0; i < 12; ++i) admitted += SlidingWindow::Decide(rate, s, 2000, 1).allowed;
  EXPECT_EQ(admitted, 10);
}

TEST(TokenBucket, StartsFullAndRefillsContinuously) {
  const Rate rate(10, 1000, 20);
  TokenBucket::State s;
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(TokenBucket::Decide(rate, s, 5000, 1).allowed);
  LimitDecision d = TokenBucket::Decide(rate, s, 5000, 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, 100);
  EXPECT_EQ(d.reset_after_ms, 2000);
  EXPECT_FALSE(TokenBucket::Decide(rate, s, 5099, 1).allowed);
  EXPECT_TRUE(TokenBucket::Decide(rate, s, 5100, 1).allowed);
  d = TokenBucket::Decide(rate, s, 5100, 21);
  EXPECT_EQ(d.retry_after_ms, kNever);
}

TEST(Gcra, SpacesRequestsByTheEmissionInterval) {
  const Rate rate(4, 1000, 1);  // T = 250 ms, no burst tolerance
  Gcra::State s;
  EXPECT_TRUE(Gcra::Decide(rate, s, 1000, 1).allowed);
  LimitDecision d = Gcra::Decide(rate, s, 1100, 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, 150);
  EXPECT_TRUE(Gcra::Decide(rate, s, 1250, 1).allowed);
  EXPECT_EQ(Gcra::Decide(rate, s, 1250, 2).retry_after_ms, kNever);
}

TEST(LeakyBucket, DrainsAtTheRate) {
  const Rate rate(2, 1000, 3);
  LeakyBucket::State s;
  EXPECT_TRUE(LeakyBucket::Decide(rate, s, 0, 3).allowed);
  LimitDecision d = LeakyBucket::Decide(rate, s, 0, 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_ms, 500);
  EXPECT_EQ(d.reset_after_ms, 1500);
  EXPECT_TRUE(LeakyBucket::Decide(rate, s, 500, 1).allowed);
}

TEST(ExactArithmetic, SevenPerSecondIsExactOverALongRun) {
  // W/L = 142.857... ms. After the burst, the k-th refilled unit is ready at ceil(k*1000/7).
  const Rate rate(7, 1000, 7);
  for (Algorithm a : {Algorithm::kTokenBucket, Algorithm::kGcra, Algorithm::kLeakyBucket}) {
    SCOPED_TRACE(std::string(AlgorithmName(a)));
    KeyLimiter limiter(a);
    std::vector<int64_t> admitted_at;
    for (int64_t t = 0; t <= 1'000'000; ++t) {
      if (limiter.Decide(rate, t, 1).allowed) admitted_at.push_back(t);
    }
    ASSERT_EQ(admitted_at.size(), 7u + 7000u);  // burst + 7 per 1000 ms for 1000 s
    for (int64_t k = 1; k <= 7000; ++k) {
      ASSERT_EQ(admitted_at[static_cast<size_t>(6 + k)], (k * 1000 + 6) / 7) << "k=" << k;
    }
  }
  for (Algorithm a : {Algorithm::kFixedWindow, Algorithm::kSlidingLog}) {
    KeyLimiter limiter(a);
    int admitted = 0;
    for (int64_t t = 0; t < 100'000; ++t) admitted += limiter.Decide(rate, t, 1).allowed;
    EXPECT_EQ(admitted, 700) << AlgorithmName(a);
  }
}

TEST(ExactArithmetic, WindowsOfADay) {
  const int64_t day = 86'400'000;
  const Rate rate(7, day, 7);  // one unit per 12,342,857.14... ms
  for (Algorithm a : {Algorithm::kTokenBucket, Algorithm::kGcra, Algorithm::kLeakyBucket}) {
    SCOPED_TRACE(std::string(AlgorithmName(a)));
    KeyLimiter limiter(a);
    const int64_t start = 3 * day + 17;
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(limiter.Decide(rate, start, 1).allowed);
    LimitDecision d = limiter.Decide(rate, start, 1);
    ASSERT_FALSE(d.allowed);
    EXPECT_EQ(d.retry_after_ms, 12'342'858);
    EXPECT_EQ(d.reset_after_ms, day);
    d = limiter.Decide(rate, start, 3);
    EXPECT_EQ(d.retry_after_ms, 37'028'572);  // ceil(3 * 86,400,000 / 7)
    EXPECT_FALSE(limiter.Decide(rate, start + 12'342'857, 1).allowed);
    EXPECT_TRUE(limiter.Decide(rate, start + 12'342'858, 1).allowed);
  }
  KeyLimiter fixed(Algorithm::kFixedWindow);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(fixed.Decide(rate, day + 5, 1).allowed);
  EXPECT_EQ(fixed.Decide(rate, day + 5, 1).retry_after_ms, day - 5);
  KeyLimiter sliding(Algorithm::kSlidingWindow);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(sliding.Decide(rate, day + 5, 1).allowed);
  // Next day: 7*(W-e) + 0 < 7W for any e >= 1.
  EXPECT_EQ(sliding.Decide(rate, day + 5, 1).retry_after_ms, day - 5 + 1);
}

// ----- properties over random traces -----

struct Request {
  int64_t t;
  int64_t cost;
};

struct RandomCase {
  Rate rate;
  std::vector<Request> requests;
};

RandomCase MakeCase(std::mt19937_64& rng) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t limit = uniform(1, 25);
  const int64_t windows[] = {1, 7, 100, 1000, 1001, 60'000, 86'400'000};
  const int64_t window = windows[uniform(0, 6)];
  const int64_t burst = uniform(1, 3 * limit);
  RandomCase c{Rate(limit, window, burst), {}};
  int64_t t = uniform(0, 3 * window);
  const int n = static_cast<int>(uniform(50, 600));
  for (int i = 0; i < n; ++i) {
    switch (uniform(0, 3)) {  // bursts, steady, long gaps
      case 0:
        break;
      case 1:
        t += uniform(0, std::max<int64_t>(1, window / limit));
        break;
      case 2:
        t += uniform(0, window / 3 + 1);
        break;
      default:
        t += uniform(0, 3 * window);
        break;
    }
    const int64_t cost = uniform(0, 9) == 0 ? uniform(1, burst + 3) : 1;
    c.requests.push_back({t, cost});
  }
  return c;
}

class Properties : public ::testing::TestWithParam<Algorithm> {};

// remaining, retry_after and reset_after mean exactly what they say, checked on copies of
// the state so the run itself is not disturbed.
TEST_P(Properties, RemainingRetryAfterAndResetAreExact) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const Algorithm a = GetParam();
  for (int round = 0; round < 200; ++round) {
    const RandomCase c = MakeCase(rng);
    KeyLimiter limiter(a);
    for (const Request& r : c.requests) {
      const LimitDecision d = limiter.Decide(c.rate, r.t, r.cost);
      if (!d.allowed) {
        ASSERT_GE(d.retry_after_ms, 1);
        if (d.retry_after_ms == kNever) {
          ASSERT_GT(r.cost, FullAllowance(a, c.rate));
        } else {
          KeyLimiter later = limiter;
          ASSERT_TRUE(later.Decide(c.rate, r.t + d.retry_after_ms, r.cost).allowed)
              << "retry_after " << d.retry_after_ms << " at t=" << r.t << " cost=" << r.cost;
          KeyLimiter earlier = limiter;
          ASSERT_FALSE(earlier.Decide(c.rate, r.t + d.retry_after_ms - 1, r.cost).allowed)
              << "retry_after " << d.retry_after_ms << " is not the earliest, t=" << r.t;
        }
      } else {
        ASSERT_EQ(d.retry_after_ms, 0);
      }
      if (d.remaining > 0) {
        KeyLimiter now = limiter;
        ASSERT_TRUE(now.Decide(c.rate, r.t, d.remaining).allowed) << "t=" << r.t;
      }
      KeyLimiter over = limiter;
      ASSERT_FALSE(over.Decide(c.rate, r.t, d.remaining + 1).allowed)
          << "remaining " << d.remaining << " at t=" << r.t;
      KeyLimiter reset = limiter;
      ASSERT_TRUE(reset.Decide(c.rate, r.t + d.reset_after_ms, FullAllowance(a, c.rate)).allowed)
          << "reset_after " << d.reset_after_ms << " at t=" << r.t;
    }
  }
}

// When IsFresh says so, swapping the state for a fresh one changes no later decision.
TEST_P(Properties, FreshStatesDecideLikeFreshKeys) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const Algorithm a = GetParam();
  int fresh_seen = 0;
  for (int round = 0; round < 200; ++round) {
    const RandomCase c = MakeCase(rng);
    KeyLimiter kept(a);
    KeyLimiter swapped(a);
    for (const Request& r : c.requests) {
      if (swapped.IsFresh(c.rate, r.t)) {
        swapped = KeyLimiter(a);
        ++fresh_seen;
      }
      const LimitDecision x = kept.Decide(c.rate, r.t, r.cost);
      const LimitDecision y = swapped.Decide(c.rate, r.t, r.cost);
      ASSERT_EQ(x.allowed, y.allowed) << "t=" << r.t;
      ASSERT_EQ(x.remaining, y.remaining) << "t=" << r.t;
      ASSERT_EQ(x.retry_after_ms, y.retry_after_ms) << "t=" << r.t;
    }
  }
  EXPECT_GT(fresh_seen, 0);
}

// A worker that read the clock before waiting for a key's lock brings a time earlier than one
// the key's state was already moved to (here up to a window back). The key's time never
// runs backwards: placed at the key's time (the latest time its state was moved to), every
// algorithm's admissions keep its promise: no window is counted twice, no refill taken twice.
TEST_P(Properties, ATimeEarlierThanTheKeysOwnNeverBreaksItsPromise) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const Algorithm a = GetParam();
  int stale = 0;
  for (int round = 0; round < 300; ++round) {
    const RandomCase c = MakeCase(rng);
    const int64_t w = c.rate.window_ms();
    KeyLimiter limiter(a);
    int64_t key_time = 0;
    std::vector<Request> admitted;  // at the key's time
    for (const Request& r : c.requests) {
      int64_t given = r.t;
      if (std::uniform_int_distribution<int>(0, 2)(rng) == 0) {
        given = std::max<int64_t>(0, r.t - std::uniform_int_distribution<int64_t>(0, w)(rng));
        stale += given < key_time;
      }
      const auto before = limiter.Fields();
      const bool allowed = limiter.Decide(c.rate, given, r.cost).allowed;
      if (limiter.Fields() != before) key_time = std::max(key_time, given);
      if (allowed) admitted.push_back({key_time, r.cost});
    }
    if (a == Algorithm::kFixedWindow || a == Algorithm::kSlidingWindow) {
      std::map<int64_t, int64_t> per_window;  // the aligned windows [kW, (k+1)W)
      for (const Request& r : admitted) {
        ASSERT_LE(per_window[r.t / w] += r.cost, c.rate.limit()) << "window at " << r.t / w * w;
      }
    } else if (a == Algorithm::kSlidingLog) {
      for (size_t j = 0; j < admitted.size(); ++j) {
        int64_t sum = 0;
        for (size_t i = j + 1; i-- > 0 && admitted[i].t > admitted[j].t - w;) {
          sum += admitted[i].cost;
        }
        ASSERT_LE(sum, c.rate.limit()) << "window ending at " << admitted[j].t;
      }
    } else {
      std::vector<Admission> at;
      for (const Request& r : admitted) at.push_back({r.t * 1000, r.t * 1000, r.cost});
      const WorstWindow worst = FindWorstWindow(at, {c.rate.limit(), w * 1000, c.rate.burst(), 0});
      ASSERT_FALSE(worst.over) << worst.admitted << " in " << worst.interval_us << " us";
    }
  }
  EXPECT_GT(stale, 0);
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, Properties, ::testing::ValuesIn(kAllAlgorithms),
                         [](const auto& info) { return std::string(AlgorithmName(info.param)); });

TEST(PropertiesOfPromises, SlidingLogNeverExceedsTheLimitInAnyWindow) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 300; ++round) {
    const RandomCase c = MakeCase(rng);
    SlidingLog::State s;
    std::vector<Request> admitted;
    for (const Request& r : c.requests) {
      if (SlidingLog::Decide(c.rate, s, r.t, r.cost).allowed) admitted.push_back(r);
    }
    // Any window (t-W, t] that holds admissions can be slid to end at one of them.
    for (size_t j = 0; j < admitted.size(); ++j) {
      int64_t sum = 0;
      for (size_t i = j + 1; i-- > 0 && admitted[i].t > admitted[j].t - c.rate.window_ms();) {
        sum += admitted[i].cost;
      }
      ASSERT_LE(sum, c.rate.limit()) << "window ending at " << admitted[j].t;
    }
  }
}

// A log holds at most min(L, W) entries (distinct milliseconds in one window, each at least
// 1 of at most L): the bound the store counts a log's memory against. Peek answers as Decide
// would, without changing (or copying) the log; the ring buffer keeps its order through
// wrap-arounds, refunds from the middle and reallocations.
TEST(PropertiesOfPromises, SlidingLogHoldsAtMostMinOfLAndWEntriesAndPeekIsDecide) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 300; ++round) {
    const RandomCase c = MakeCase(rng);
    const int64_t most = SlidingLog::MaxEntries(c.rate);
    ASSERT_EQ(most, std::min(c.rate.limit(), c.rate.window_ms()));
    SlidingLog::State s;
    std::vector<SlidingLog::Entry> model;  // the same entries in a plain vector
    for (const Request& r : c.requests) {
      const LimitDecision peeked = SlidingLog::Peek(c.rate, s, r.t, r.cost);
      SlidingLog::State copy = s;
      const LimitDecision d = SlidingLog::Decide(c.rate, copy, r.t, r.cost);
      ASSERT_EQ(peeked.allowed, d.allowed);
      ASSERT_EQ(peeked.remaining, d.remaining);
      ASSERT_EQ(peeked.retry_after_ms, d.retry_after_ms);
      ASSERT_EQ(peeked.reset_after_ms, d.reset_after_ms);
      s = std::move(copy);
      const int64_t now = s.seen_ms;
      while (!model.empty() && model.front().t_ms <= now - c.rate.window_ms()) {
        model.erase(model.begin());
      }
      if (d.allowed) {
        if (!model.empty() && model.back().t_ms == now) {
          model.back().cost += r.cost;
        } else {
          model.push_back({now, r.cost});
        }
      }
      if (!model.empty() && rng() % 8 == 0) {  // a refund from anywhere in the log
        const size_t i = rng() % model.size();
        const int64_t back = SlidingLog::Refund(c.rate, s, now, 1, model[i].t_ms);
        ASSERT_EQ(back, 1);
        if (--model[i].cost == 0) model.erase(model.begin() + static_cast<ptrdiff_t>(i));
      }
      ASSERT_LE(static_cast<int64_t>(s.entries.size()), most);
      ASSERT_EQ(s.entries.size(), model.size());
      int64_t total = 0;
      for (size_t i = 0; i < model.size(); ++i) {
        ASSERT_EQ(s.entries[i].t_ms, model[i].t_ms);
        ASSERT_EQ(s.entries[i].cost, model[i].cost);
        total += model[i].cost;
      }
      ASSERT_EQ(s.total, total);
    }
  }
}

TEST(PropertiesOfPromises, TokenBucketNeverExceedsBurstPlusRateTimesTime) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 300; ++round) {
    const RandomCase c = MakeCase(rng);
    TokenBucket::State s;
    std::vector<Request> admitted;
    for (const Request& r : c.requests) {
      if (TokenBucket::Decide(c.rate, s, r.t, r.cost).allowed) admitted.push_back(r);
    }
    // For every interval [t_i, t_j]: admitted cost <= B + L*(t_j - t_i)/W, in integers.
    for (size_t i = 0; i < admitted.size(); ++i) {
      int64_t sum = 0;
      for (size_t j = i; j < admitted.size(); ++j) {
        sum += admitted[j].cost;
        const int64_t span = admitted[j].t - admitted[i].t;
        ASSERT_LE((sum - c.rate.burst()) * c.rate.window_ms(), c.rate.limit() * span)
            << "interval [" << admitted[i].t << ", " << admitted[j].t << "]";
      }
    }
  }
}

TEST(PropertiesOfPromises, GcraTokenBucketAndLeakyBucketDecideIdentically) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 500; ++round) {
    const RandomCase c = MakeCase(rng);
    TokenBucket::State tb;
    Gcra::State gcra;
    LeakyBucket::State leaky;
    for (const Request& r : c.requests) {
      const LimitDecision a = TokenBucket::Decide(c.rate, tb, r.t, r.cost);
      const LimitDecision b = Gcra::Decide(c.rate, gcra, r.t, r.cost);
      const LimitDecision l = LeakyBucket::Decide(c.rate, leaky, r.t, r.cost);
      ASSERT_EQ(a.allowed, b.allowed) << "t=" << r.t;
      ASSERT_EQ(a.allowed, l.allowed) << "t=" << r.t;
      ASSERT_EQ(a.remaining, b.remaining);
      ASSERT_EQ(a.remaining, l.remaining);
      ASSERT_EQ(a.retry_after_ms, b.retry_after_ms);
      ASSERT_EQ(a.retry_after_ms, l.retry_after_ms);
      ASSERT_EQ(a.reset_after_ms, b.reset_after_ms);
      ASSERT_EQ(a.reset_after_ms, l.reset_after_ms);
    }
  }
}

TEST(Rate, RejectsNumbersThatCannotBeExact) {
  EXPECT_FALSE(Rate::Validate(0, 1000, 1).ok());
  EXPECT_FALSE(Rate::Validate(-3, 1000, 1).ok());
  EXPECT_FALSE(Rate::Validate(1, 0, 1).ok());
  EXPECT_FALSE(Rate::Validate(1, 1000, 0).ok());
  EXPECT_FALSE(Rate::Validate(int64_t{1} << 40, int64_t{1} << 30, 1).ok());
  EXPECT_FALSE(Rate::Validate(1, Rate::kMaxWindowMs + 1, 1).ok());
  EXPECT_TRUE(Rate::Validate(1'000'000, 86'400'000, 1'000'000).ok());
}

TEST(Rate, TheDefaultIsOnePerSecondWithItsDerivedNumbers) {
  const Rate spelled_out;
  const Rate validated(1, 1000, 1);
  EXPECT_EQ(spelled_out, validated);
  EXPECT_EQ(spelled_out.capacity_scaled(), validated.capacity_scaled());
  EXPECT_EQ(spelled_out.refill_ms(), validated.refill_ms());
  EXPECT_EQ(spelled_out.interval_ms(), validated.interval_ms());
  EXPECT_EQ(spelled_out.interval_rem(), validated.interval_rem());
}

}  // namespace
}  // namespace limiter
