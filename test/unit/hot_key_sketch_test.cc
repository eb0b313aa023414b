#include "common/hot_key_sketch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "test/unit/test_seed.h"

namespace limiter {
namespace {

using testing::SeedTrace;
using testing::TestSeed;

// Draws keys 0..n-1 with probability proportional to 1/(k+1)^s.
class Zipf {
 public:
  Zipf(size_t n, double s) {
    double total = 0;
    for (size_t k = 0; k < n; ++k) cdf_.push_back(total += 1.0 / std::pow(double(k + 1), s));
    for (double& c : cdf_) c /= total;
  }
  size_t operator()(std::mt19937_64& rng) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

TEST(HotKeySketch, TheTrueTopTenAreInTheReportedTopTwentyOnZipfStreams) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  for (double s : {0.8, 1.0, 1.2}) {
    SCOPED_TRACE("zipf s=" + std::to_string(s));
    // Shuffle which keys are popular, so the order of first sight tells nothing.
    std::vector<size_t> name(100'000);
    for (size_t i = 0; i < name.size(); ++i) name[i] = i;
    std::shuffle(name.begin(), name.end(), rng);
    Zipf zipf(name.size(), s);
    HotKeySketch sketch(256);
    std::map<size_t, uint64_t> truth;
    for (int i = 0; i < 500'000; ++i) {
      const size_t key = name[zipf(rng)];
      ++truth[key];
      sketch.Add(0, std::to_string(key), key * 0x9e3779b97f4a7c15ULL + 1, 1, false);
    }
    std::vector<std::pair<uint64_t, size_t>> by_count;
    for (const auto& [key, count] : truth) by_count.emplace_back(count, key);
    std::sort(by_count.rbegin(), by_count.rend());
    sketch.Roll();
    // The guarantee: every key with more than N/capacity operations has a counter.
    const auto all = sketch.Top(256);
    for (const auto& [count, key] : by_count) {
      if (count <= 500'000 / 256) break;
      const std::string name = std::to_string(key);
      EXPECT_TRUE(std::any_of(all.begin(), all.end(), [&](const auto& e) { return e.key == name; }))
          << key << " (" << count << " ops) has no counter";
    }
    const auto top = sketch.Top(20);
    ASSERT_EQ(top.size(), 20u);
    // On the skews of real key popularity the top ten are reported in the top twenty. (A
    // flatter stream's tenth key has fewer than N/capacity operations: no promise there.)
    for (int i = 0; i < 10 && s >= 1.0; ++i) {
      const std::string want = std::to_string(by_count[static_cast<size_t>(i)].second);
      EXPECT_TRUE(std::any_of(top.begin(), top.end(), [&](const auto& e) { return e.key == want; }))
          << "true #" << i + 1 << " (" << want << ", " << by_count[static_cast<size_t>(i)].first
          << " ops) is not in the reported top 20";
    }
    // Counts are overestimates by at most their error.
    for (const auto& e : top) {
      const uint64_t real = truth[std::stoul(e.key)];
      EXPECT_GE(e.last, real);
      EXPECT_LE(e.last - e.error, real);
    }
  }
}

TEST(HotKeySketch, AKeyThatCoolsDownSinksOut) {
  HotKeySketch sketch(4);
  for (int i = 0; i < 1000; ++i) sketch.Add(0, "hot", 1, 1, i % 4 == 0);
  sketch.Roll();
  auto top = sketch.Top(1);
  ASSERT_EQ(top.size(), 1u);
  EXPECT_EQ(top[0].key, "hot");
  EXPECT_EQ(top[0].last, 1000u);
  EXPECT_EQ(top[0].denied_last, 250u);
  // Two quiet epochs later it weighs nothing, and other keys take its place.
  sketch.Roll();
  sketch.Roll();
  for (int k = 0; k < 8; ++k) {
    for (int i = 0; i < 10; ++i) sketch.Add(1, "k" + std::to_string(k), 100 + k, 1, false);
  }
  sketch.Roll();
  top = sketch.Top(4);
  EXPECT_TRUE(std::none_of(top.begin(), top.end(), [](const auto& e) { return e.key == "hot"; }));
  EXPECT_EQ(sketch.size(), 4u);  // never more counters than its capacity
}

}  // namespace
}  // namespace limiter
