// `limiter-bench hotkey` end to end on a local 3-node cluster: a short run of both halves
// (splitting off, then on), checking what the report says rather than how fast it was.
#include "bench/hot_key_bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "test/support/build_paths.h"

namespace limiter::bench {
namespace {

const std::string kBenchPolicies = testing::SourcePath("bench/policies.yaml");

HotKeyBenchOptions Short() {
  HotKeyBenchOptions o;
  o.limiterd = testing::LimiterdBin();
  o.policies = kBenchPolicies;
  o.connections = 1;
  o.batch = 32;
  o.depth = 2;
  o.duration_s = 1;
  o.split_k = 4;
  o.split_above = 2'000;  // low enough for a sanitizer build on a shared machine
  o.json = true;
  return o;
}

TEST(HotKeyBenchTest, ReportsBothRunsAndTheSplitRunSeesTheSplit) {
  std::ostringstream out, err;
  ASSERT_EQ(RunHotKeyBench(Short(), out, err), 0) << err.str();
  const nlohmann::json report = nlohmann::json::parse(out.str());
  for (const char* run : {"unsplit", "split"}) {
    SCOPED_TRACE(run);
    const nlohmann::json& r = report.at(run);
    EXPECT_GT(r.at("checks_per_s").get<double>(), 0);
    EXPECT_EQ(r.at("errors").get<uint64_t>(), 0u);
    const std::vector<double> shares = r.at("node_shares").get<std::vector<double>>();
    ASSERT_EQ(shares.size(), 3u);
    EXPECT_NEAR(std::accumulate(shares.begin(), shares.end(), 0.0), 1.0, 1e-9);
    EXPECT_EQ(r.at("node_cpus").size(), 3u);
  }
  EXPECT_FALSE(report.at("unsplit").at("hot_key_split").get<bool>());
  EXPECT_TRUE(report.at("split").at("hot_key_split").get<bool>());
  // Unsplit, the hot key (30 of every 60 draws) is all on its owner.
  EXPECT_GE(report.at("unsplit").at("busiest_node_share").get<double>(), 0.45);
  EXPECT_EQ(report.at("split_k").get<int>(), 4);
}

TEST(HotKeyBenchTest, ANodeThatCannotStartIsOneErrorLine) {
  HotKeyBenchOptions o = Short();
  o.limiterd = "/nonexistent/limiterd";
  std::ostringstream out, err;
  EXPECT_EQ(RunHotKeyBench(o, out, err), 1);
  const std::string error = err.str();
  EXPECT_EQ(error.rfind("limiter-bench hotkey: ", 0), 0u) << error;
  EXPECT_NE(error.find("/nonexistent/limiterd"), std::string::npos) << error;
  EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 1) << error;
  EXPECT_TRUE(out.str().empty());
}

}  // namespace
}  // namespace limiter::bench
