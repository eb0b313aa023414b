#include "common/replay.h"

#include <gtest/gtest.h>

#include <map>

#include "test/support/build_paths.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

std::vector<TraceRow> SeedTrace() {
  Result<std::vector<TraceRow>> r = LoadTraceFile(testing::SourcePath("examples/traces/seed.csv"));
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? std::move(r).value() : std::vector<TraceRow>{};
}

std::map<std::string, int64_t> ByLabel(const ReplayResult& r) {
  std::map<std::string, int64_t> m;
  for (const auto& l : r.by_label) m[l.label] = l.accepted;
  return m;
}

struct Expected {
  Algorithm algorithm;
  int64_t steady, edge, overload, total, worst;
};

// The table printed by the first seed's program, at 10 per 1000 ms; GCRA and the leaky
// bucket are the token bucket in other clothes (the seed's exercise 1).
TEST(Replay, ReproducesTheSeedTable) {
  const std::vector<TraceRow> trace = SeedTrace();
  ASSERT_EQ(trace.size(), 80u);
  const Rate rate(10, 1000, 10);
  const Expected expected[] = {
      {Algorithm::kFixedWindow, 10, 20, 20, 50, 20},
      {Algorithm::kSlidingLog, 10, 10, 20, 40, 10},
      {Algorithm::kSlidingWindow, 10, 11, 20, 41, 11},
      {Algorithm::kTokenBucket, 10, 11, 29, 50, 19},
      {Algorithm::kGcra, 10, 11, 29, 50, 19},
      {Algorithm::kLeakyBucket, 10, 11, 29, 50, 19},
  };
  for (const Expected& e : expected) {
    SCOPED_TRACE(std::string(AlgorithmName(e.algorithm)));
    const ReplayResult r = Replay(trace, e.algorithm, rate);
    EXPECT_EQ(r.offered, 80);
    EXPECT_EQ(r.accepted, e.total);
    EXPECT_EQ(r.worst_window, e.worst);
    const auto by_label = ByLabel(r);
    EXPECT_EQ(by_label.at("steady"), e.steady);
    EXPECT_EQ(by_label.at("edge"), e.edge);
    EXPECT_EQ(by_label.at("overload"), e.overload);
  }
  const ReplayResult burst20 = Replay(trace, Algorithm::kTokenBucket, Rate(10, 1000, 20));
  EXPECT_EQ(ByLabel(burst20).at("edge"), 21);
  EXPECT_EQ(burst20.worst_window, 21);
}

TEST(Replay, KeysHaveTheirOwnLimitersAndCostsComeFromThePolicy) {
  const PolicySet policies = testing::Policies(R"(
policies:
  - {name: p, algorithm: fixed_window, limit: 20, window: 1s, class: contract,
     costs: {report: 20}}
)",
                                               "p.yaml");
  ASSERT_FALSE(policies.policies().empty());
  Result<std::vector<TraceRow>> trace = ParseTrace(
      "t_ms,key,cost,label\n"
      "0,a,,report\n"   // 20 from the policy
      "1,a,,read\n"     // 1: denied, a is spent
      "2,b,5,report\n"  // the row's own cost wins
      "3,b,,read\n",
      "t.csv");
  ASSERT_TRUE(trace.ok()) << trace.error();
  const Policy& p = policies.policies()[0];
  const ReplayResult r = Replay(*trace, p.algorithm, p.rate, &p);
  EXPECT_EQ(r.accepted, 3);
  EXPECT_EQ(r.offered_cost, 20 + 1 + 5 + 1);
  EXPECT_EQ(r.accepted_cost, 20 + 5 + 1);
  EXPECT_EQ(r.worst_window, 20);
  EXPECT_EQ(r.worst_key, "a");
  const ReplayResult plain = Replay(*trace, p.algorithm, p.rate);
  EXPECT_EQ(plain.accepted, 4);  // every empty cost is 1 without the policy
}

}  // namespace
}  // namespace limiter
