// The I1 checker: the worst interval of a key's admissions against B + L*t/W.
#include "common/promise_check.h"

#include <gtest/gtest.h>

#include <vector>

namespace limiter {
namespace {

// 10 per second, burst 5, in microseconds.
constexpr PromiseBound kTen{10, 1'000'000, 5};

Admission At(int64_t us, int64_t cost = 1) { return {us, us, cost}; }

TEST(PromiseCheckTest, AnEmptyKeyIsNotOver) { EXPECT_FALSE(FindWorstWindow({}, kTen).over); }

TEST(PromiseCheckTest, ABurstUpToBIsKept) {
  const std::vector<Admission> a(5, At(1000));
  const WorstWindow w = FindWorstWindow(a, kTen);
  EXPECT_FALSE(w.over);
  EXPECT_EQ(w.admitted, 5);
  EXPECT_EQ(w.interval_us, 0);
}

TEST(PromiseCheckTest, OneMoreThanTheBurstAtOnceIsOver) {
  const std::vector<Admission> a(6, At(1000));
  const WorstWindow w = FindWorstWindow(a, kTen);
  EXPECT_TRUE(w.over);
  EXPECT_EQ(w.admitted, 6);
}

TEST(PromiseCheckTest, TheRefillRateIsKeptExactly) {
  // The burst at t=0, then one every 100 ms: exactly B + L*t/W at every admission.
  std::vector<Admission> a(5, At(0));
  for (int i = 1; i <= 50; ++i) a.push_back(At(i * 100'000));
  EXPECT_FALSE(FindWorstWindow(a, kTen).over);
  // One of them a microsecond early is one too many.
  a[20].start_us = a[20].end_us = a[20].end_us - 1;
  EXPECT_TRUE(FindWorstWindow(a, kTen).over);
}

TEST(PromiseCheckTest, CostsCount) {
  EXPECT_FALSE(FindWorstWindow(std::vector<Admission>{At(0, 5)}, kTen).over);
  EXPECT_TRUE(FindWorstWindow(std::vector<Admission>{At(0, 6)}, kTen).over);
}

TEST(PromiseCheckTest, AnAdmissionMayHaveBeenChargedAnywhereInItsSpan) {
  // Six admissions decided at one instant, but the requests arrived 100 ms apart: the node
  // may have charged them at their arrivals, which the bucket allows.
  std::vector<Admission> a;
  for (int i = 0; i < 6; ++i) a.push_back({i * 100'000, 600'000, 1});
  EXPECT_FALSE(FindWorstWindow(a, kTen).over);
}

TEST(PromiseCheckTest, TheChargingClocksResolutionIsAllowedForNoMore) {
  // The burst, then the refill's next unit 99.5 ms later in microseconds: a node deciding in
  // whole milliseconds may have seen those as 100 ms apart.
  std::vector<Admission> a(5, At(1000));
  a.push_back(At(100'500));
  PromiseBound ms = kTen;
  ms.resolution_us = 1000;
  EXPECT_TRUE(FindWorstWindow(a, kTen).over);
  EXPECT_FALSE(FindWorstWindow(a, ms).over);
  // 98.5 ms apart is more than the resolution explains.
  a.back() = At(99'500);
  EXPECT_TRUE(FindWorstWindow(a, ms).over);
}

TEST(PromiseCheckTest, FindsTheWorstWindowInsideALongRun) {
  // Well within the rate for a second, then 8 at once: 3 over the burst.
  std::vector<Admission> a;
  for (int i = 0; i < 5; ++i) a.push_back(At(i * 200'000));
  for (int i = 0; i < 8; ++i) a.push_back(At(2'000'000));
  const WorstWindow w = FindWorstWindow(a, kTen);
  EXPECT_TRUE(w.over);
  EXPECT_EQ(w.admitted, 8);
  EXPECT_EQ(w.interval_us, 0);
  EXPECT_DOUBLE_EQ(w.allowed, 5);
}

}  // namespace
}  // namespace limiter
