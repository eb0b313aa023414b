#include "common/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "test/unit/test_seed.h"

namespace limiter {
namespace {

using testing::SeedTrace;
using testing::TestSeed;

TEST(Histogram, ExactBelow32) {
  for (uint64_t v = 0; v < 32; ++v) {
    const int b = Histogram::BucketOf(v);
    EXPECT_EQ(b, static_cast<int>(v));
    EXPECT_EQ(Histogram::BucketLow(b), v);
    EXPECT_EQ(Histogram::BucketHigh(b), v);
  }
  Histogram h;
  for (uint64_t v : {0, 7, 7, 31}) h.Record(v);
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.Quantile(0.25), 0u);
  EXPECT_EQ(s.Quantile(0.5), 7u);
  EXPECT_EQ(s.Quantile(0.75), 7u);
  EXPECT_EQ(s.Quantile(1.0), 31u);
}

TEST(Histogram, BucketsAreContiguousMonotoneAndNarrow) {
  EXPECT_EQ(Histogram::BucketLow(0), 0u);
  for (int b = 0; b + 1 < Histogram::kBuckets; ++b) {
    SCOPED_TRACE(b);
    const uint64_t low = Histogram::BucketLow(b);
    const uint64_t high = Histogram::BucketHigh(b);
    ASSERT_LE(low, high);
    ASSERT_EQ(high + 1, Histogram::BucketLow(b + 1));
    ASSERT_EQ(Histogram::BucketOf(low), b);
    ASSERT_EQ(Histogram::BucketOf(high), b);
    // Under 6.25% error: a bucket is at most 1/16 of its lower end wide.
    if (b >= Histogram::kLinear) {
      ASSERT_LE((high - low + 1) * 16, low);
    }
  }
  const int last = Histogram::kBuckets - 1;
  EXPECT_EQ(Histogram::BucketHigh(last), UINT64_MAX);
  EXPECT_EQ(Histogram::BucketOf(uint64_t{1} << Histogram::kMaxBits), last);
  EXPECT_EQ(Histogram::BucketOf(UINT64_MAX), last);
  EXPECT_EQ(Histogram::BucketOf((uint64_t{1} << Histogram::kMaxBits) - 1), last);
}

TEST(Histogram, QuantileWithin6Point25PercentOnAUniformRange) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> uniform(1, 10'000'000);
  Histogram h;
  std::vector<uint64_t> values(100'000);
  for (uint64_t& v : values) {
    v = uniform(rng);
    h.Record(v);
  }
  std::sort(values.begin(), values.end());
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.count, values.size());
  EXPECT_EQ(s.max, values.back());
  for (double q : {0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0}) {
    SCOPED_TRACE(q);
    const size_t rank = std::max<size_t>(1, static_cast<size_t>(q * values.size() + 0.5));
    const uint64_t exact = values[rank - 1];
    const uint64_t estimate = s.Quantile(q);
    // The upper end of the bucket holding the exact value, so never below it.
    EXPECT_GE(estimate, exact);
    EXPECT_LE(static_cast<double>(estimate - exact), 0.0625 * static_cast<double>(exact));
  }
}

TEST(Histogram, MergeEqualsRecordingEverythingInOne) {
  const uint64_t seed = TestSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937_64 rng(seed);
  Histogram a, b, all;
  for (int i = 0; i < 10'000; ++i) {
    const uint64_t v = rng() >> (rng() % 64);  // every magnitude, past 2^40 too
    (i % 3 == 0 ? a : b).Record(v);
    all.Record(v);
  }
  Histogram::Snapshot merged = a.Read();
  merged.Merge(b.Read());
  const Histogram::Snapshot expected = all.Read();
  EXPECT_EQ(merged.counts, expected.counts);
  EXPECT_EQ(merged.count, expected.count);
  EXPECT_EQ(merged.sum, expected.sum);
  EXPECT_EQ(merged.max, expected.max);
  for (double q : {0.0, 0.5, 0.99, 1.0}) EXPECT_EQ(merged.Quantile(q), expected.Quantile(q));

  Histogram::Snapshot empty;
  EXPECT_EQ(empty.Quantile(0.5), 0u);
  empty.Merge(expected);
  EXPECT_EQ(empty.counts, expected.counts);
}

TEST(Histogram, ASnapshotRecordsAsTheHistogramDoes) {
  Histogram h;
  Histogram::Snapshot s;
  for (uint64_t v : {0ull, 1ull, 31ull, 32ull, 1000ull, 123456789ull}) {
    h.Record(v);
    s.Record(v);
  }
  const Histogram::Snapshot read = h.Read();
  EXPECT_EQ(s.counts, read.counts);
  EXPECT_EQ(s.count, read.count);
  EXPECT_EQ(s.sum, read.sum);
  EXPECT_EQ(s.max, read.max);
}

}  // namespace
}  // namespace limiter
