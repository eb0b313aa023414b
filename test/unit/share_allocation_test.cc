// Region shares of a global limit (common/share_allocation.h): the allocation (worked examples,
// ties, zero demand, one region, 64 regions, L below the number of regions, exact sums, and a
// seeded property test of max-min fairness), the share's Rate, and a key's state moved from
// one share to another.
#include "common/share_allocation.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <random>

namespace limiter {
namespace {

std::vector<int64_t> Shares(int64_t limit, std::vector<int64_t> demands, int64_t floor = 0,
                            int64_t quantum = 1) {
  return AllocateShares(limit, demands, floor, quantum);
}

int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), 0LL); }

TEST(AllocateShares, TheWorkedExamples) {
  EXPECT_EQ(Shares(120, {1000, 50, 10}, 6), (std::vector<int64_t>{60, 50, 10}));
  const std::vector<int64_t> even = Shares(100, {30, 30, 30}, 5);
  EXPECT_EQ(Sum(even), 100);
  for (int64_t s : even) EXPECT_GE(s, 30);
  EXPECT_EQ(even, (std::vector<int64_t>{34, 33, 33}));  // the remainder to the first
}

TEST(AllocateShares, TiesSplitEvenlyAndTheRemainderGoesByIndex) {
  EXPECT_EQ(Shares(100, {80, 80}), (std::vector<int64_t>{50, 50}));
  EXPECT_EQ(Shares(101, {80, 80}), (std::vector<int64_t>{51, 50}));
  EXPECT_EQ(Shares(101, {80, 90}), (std::vector<int64_t>{50, 51}));  // to the larger want
  EXPECT_EQ(Shares(10, {5, 5, 5, 5}), (std::vector<int64_t>{3, 3, 2, 2}));
}

TEST(AllocateShares, ZeroDemandGetsItsFloorAndSpareIsSpread) {
  EXPECT_EQ(Shares(100, {0, 0, 0}), (std::vector<int64_t>{34, 33, 33}));
  EXPECT_EQ(Shares(100, {0, 500}, 5), (std::vector<int64_t>{5, 95}));
  EXPECT_EQ(Shares(100, {0, 500}, 0), (std::vector<int64_t>{1, 99}));  // the quantum
  // Floors that cannot all fit are cut to an equal split.
  EXPECT_EQ(Shares(100, {0, 0, 900}, 40), (std::vector<int64_t>{33, 33, 34}));
}

TEST(AllocateShares, OneRegionHasItAll) {
  EXPECT_EQ(Shares(77, {3}), (std::vector<int64_t>{77}));
  EXPECT_EQ(Shares(77, {1000}), (std::vector<int64_t>{77}));
  EXPECT_TRUE(Shares(77, {}).empty());
  EXPECT_EQ(Shares(0, {5, 5}), (std::vector<int64_t>{0, 0}));
}

TEST(AllocateShares, SixtyFourRegionsShareMaxMinFair) {
  std::vector<int64_t> demands;
  for (int i = 0; i < 64; ++i) demands.push_back(i * 5);
  const std::vector<int64_t> s = Shares(5000, demands, 1);
  EXPECT_EQ(Sum(s), 5000);
  // Total demand 10,080 > 5,000: the small ones are met, the large ones cut to one level.
  int64_t level = 0;
  for (int i = 0; i < 64; ++i) {
    if (s[static_cast<size_t>(i)] < demands[static_cast<size_t>(i)]) {
      if (level == 0) level = s[static_cast<size_t>(i)];
      EXPECT_LE(std::abs(s[static_cast<size_t>(i)] - level), 1) << i;
    }
  }
  EXPECT_GT(level, 0);
  EXPECT_EQ(s[1], 5);  // met
}

TEST(AllocateShares, BelowAQuantumPerRegionTheHungriestGetOne) {
  const std::vector<int64_t> s = Shares(5, {1, 9, 3, 7, 0, 2, 8, 4});
  EXPECT_EQ(Sum(s), 5);
  EXPECT_EQ(s, (std::vector<int64_t>{0, 1, 1, 1, 0, 0, 1, 1}));
}

TEST(AllocateShares, SharesAreZeroOrAtLeastAQuantum) {
  // L = 1000 per second with B = 10: a share under 100 could not hold one token.
  EXPECT_EQ(ShareQuantum(Algorithm::kTokenBucket, Rate(1000, 1000, 10)), 100);
  EXPECT_EQ(ShareQuantum(Algorithm::kFixedWindow, Rate(1000, 1000, 10)), 1);
  EXPECT_EQ(Shares(1000, {1000, 5, 5}, 0, 100), (std::vector<int64_t>{800, 100, 100}));
  // Room for two quanta among three: the hungriest, then the lowest index; the rest to the first.
  EXPECT_EQ(Shares(250, {5, 900, 5}, 0, 100), (std::vector<int64_t>{100, 150, 0}));
}

// For random inputs: the sum is L exactly; every share is 0 or at least a quantum; and the
// result is max-min fair: a region short of its want has, to within one unit, no less than
// any region given more than it wanted.
TEST(AllocateShares, PropertySumsQuantaAndFairness) {
  const uint64_t seed = std::random_device{}();
  std::printf("AllocateShares property seed: %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int run = 0; run < 20000; ++run) {
    const size_t n = 1 + rng() % 64;
    const int64_t limit = static_cast<int64_t>(rng() % (run % 3 == 0 ? 50 : 1'000'000));
    const int64_t quantum = 1 + static_cast<int64_t>(rng() % (run % 5 == 0 ? 40 : 2));
    const int64_t floor = static_cast<int64_t>(rng() % 100);
    std::vector<int64_t> demands(n);
    for (int64_t& d : demands) d = static_cast<int64_t>(rng() % (rng() % 2 ? 100 : 2'000'000));
    const std::vector<int64_t> s = AllocateShares(limit, demands, floor, quantum);
    ASSERT_EQ(s.size(), n);
    ASSERT_EQ(Sum(s), limit) << "seed " << seed << " run " << run;
    ASSERT_EQ(s, AllocateShares(limit, demands, floor, quantum));  // a pure function
    const bool everyone = limit / quantum >= static_cast<int64_t>(n);
    const int64_t floor_fit = everyone ? std::min(floor, limit / static_cast<int64_t>(n)) : 0;
    for (size_t r = 0; r < n; ++r) {
      // Below one quantum in all, the one region that has it all holds less.
      ASSERT_TRUE(s[r] == 0 || s[r] >= quantum || s[r] == limit)
          << "seed " << seed << " run " << run;
      if (!everyone) continue;
      const int64_t want = std::max({demands[r], floor_fit, quantum});
      if (s[r] >= want) continue;
      for (size_t o = 0; o < n; ++o) {
        const int64_t want_o = std::max({demands[o], floor_fit, quantum});
        ASSERT_TRUE(s[o] <= s[r] + 1 || s[o] <= want_o)
            << "seed " << seed << " run " << run << ": region " << r << " has " << s[r] << " of "
            << want << " wanted while " << o << " has " << s[o] << " of " << want_o;
      }
    }
  }
}

TEST(ShareRate, TheBurstIsCutInTheSameProportionAndNoShareIsNothing) {
  const Rate policy(120, 1000, 60);
  const std::optional<Rate> r = ShareRate(Algorithm::kTokenBucket, policy, 50);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->limit(), 50);
  EXPECT_EQ(r->burst(), 25);
  EXPECT_EQ(r->window_ms(), 1000);
  EXPECT_FALSE(ShareRate(Algorithm::kTokenBucket, policy, 0).has_value());
  EXPECT_FALSE(ShareRate(Algorithm::kGcra, policy, 1).has_value());  // under the quantum (2)
  EXPECT_EQ(ShareRate(Algorithm::kFixedWindow, policy, 1)->limit(), 1);
  // The bursts of shares summing to L sum to at most B.
  int64_t bursts = 0;
  for (int64_t share : Shares(120, {1000, 50, 10}, 6)) {
    bursts += ShareRate(Algorithm::kGcra, policy, share)->burst();
  }
  EXPECT_LE(bursts, 60);
}

int Admits(KeyLimiter k, const Rate& rate, int64_t now, int n) {
  int admitted = 0;
  for (int i = 0; i < n; ++i) admitted += k.Decide(rate, now, 1).allowed;
  return admitted;
}

TEST(Reshaped, ABucketKeepsWhatItCouldAdmitCutToTheNewBurstNeverMore) {
  for (Algorithm a : {Algorithm::kTokenBucket, Algorithm::kGcra}) {
    const Rate big(60, 1000, 60), small(10, 1000, 10);
    const KeyLimiter fresh(a);
    // Lowered: a full bucket keeps 10 of its 60.
    EXPECT_EQ(Admits(Reshaped(fresh, big, small, 5'000), small, 5'000, 20), 10) << int(a);
    // Raised: a full small bucket does not become a full big one at once.
    EXPECT_EQ(Admits(Reshaped(fresh, small, big, 5'000), big, 5'000, 80), 10) << int(a);
    // Half spent under the big share, then lowered: it may admit min(30, 10).
    KeyLimiter k(a);
    for (int i = 0; i < 30; ++i) ASSERT_TRUE(k.Decide(big, 7'000, 1).allowed);
    EXPECT_EQ(Admits(Reshaped(k, big, small, 7'000), small, 7'000, 20), 10) << int(a);
    // Emptied under the small one, then raised: nothing at once, then the big refill rate.
    KeyLimiter e(a);
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(e.Decide(small, 9'000, 1).allowed);
    const KeyLimiter raised = Reshaped(e, small, big, 9'000);
    EXPECT_EQ(Admits(raised, big, 9'000, 5), 0) << int(a);
    EXPECT_EQ(Admits(raised, big, 9'500, 100), 30) << int(a);  // 60/s for 0.5 s
  }
}

TEST(Reshaped, AWindowKeepsItsCount) {
  const Rate big(60, 1000, 60), small(10, 1000, 10);
  KeyLimiter k(Algorithm::kFixedWindow);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(k.Decide(big, 100, 1).allowed);
  EXPECT_EQ(Admits(Reshaped(k, big, small, 200), small, 200, 10), 2);
  for (Algorithm a : {Algorithm::kSlidingLog, Algorithm::kLeakyBucket, Algorithm::kFixedWindow,
                      Algorithm::kSlidingWindow}) {
    EXPECT_FALSE(GlobalScopeError(a).ok()) << AlgorithmName(a);
  }
  EXPECT_TRUE(GlobalScopeError(Algorithm::kGcra).ok());
  EXPECT_TRUE(GlobalScopeError(Algorithm::kTokenBucket).ok());
}

}  // namespace
}  // namespace limiter
