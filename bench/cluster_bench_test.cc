// The CI smoke runs of both cluster scenarios: 3 s at a reduced rate on a local 3-node
// cluster, checking the report's fields and that no key went over its promise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cluster_bench.h"
#include "bench/node_load.h"

namespace limiter::bench {
namespace {

TEST(CpuBudgetTest, LimitsAProcessAndCleansUp) {
  EXPECT_FALSE(CpuBudget::Apply(1, 0).ok());  // a budget must be positive
  if (::access("/sys/fs/cgroup/cpu", W_OK) != 0) GTEST_SKIP() << "no writable cgroup v1 'cpu'";
  Result<std::unique_ptr<Subprocess>> sleeper = Subprocess::Start({"/bin/sleep", "30"});
  ASSERT_TRUE(sleeper.ok()) << sleeper.error();
  const int pid = (*sleeper)->pid();
  auto cgroup_of = [pid] {
    std::ifstream f("/proc/" + std::to_string(pid) + "/cgroup");
    std::string all, line;
    while (std::getline(f, line)) all += line + "\n";
    return all;
  };
  const std::string dir =
      "/sys/fs/cgroup/cpu/limiter-bench-" + std::to_string(::getpid()) + "-" + std::to_string(pid);
  // 0.05 CPUs needs a period over 5 ms: the kernel takes no quota under 1 ms.
  for (double cores : {0.25, 0.05}) {
    {
      Result<std::unique_ptr<CpuBudget>> budget = CpuBudget::Apply(pid, cores);
      ASSERT_TRUE(budget.ok()) << budget.error();
      EXPECT_NE(cgroup_of().find("limiter-bench-"), std::string::npos) << cgroup_of();
      int64_t quota = 0, period = 0;
      std::ifstream(dir + "/cpu.cfs_quota_us") >> quota;
      std::ifstream(dir + "/cpu.cfs_period_us") >> period;
      ASSERT_GT(period, 0);
      EXPECT_NEAR(static_cast<double>(quota) / static_cast<double>(period), cores, 0.001)
          << quota << " us every " << period << " us";
    }
    EXPECT_EQ(cgroup_of().find("limiter-bench-"), std::string::npos) << cgroup_of();
    EXPECT_FALSE(std::filesystem::exists(dir));
  }
}

class ClusterSmokeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ClusterSmokeTest, RunsAtReducedRateAndKeepsEveryPromise) {
  const std::string dir = ::testing::TempDir() + "/cluster_smoke_" + GetParam() + "_" +
                          std::to_string(::getpid());
  ClusterBenchOptions o;
  o.scenario = GetParam();
  o.limiterd = LIMITERD_BIN;
  o.policies = LIMITER_CLUSTER_POLICIES;
  o.duration_s = 3;
  o.warmup_s = 1;
  o.rate = 3000;
  // A sanitizer build on a shared machine: a generous deadline, so that what is checked is
  // the harness and the promise, not this machine's latency.
  o.deadline_us = 200'000;
  o.json_file = dir + ".json";
  o.report_dir = dir;
  std::ostringstream out, err;
  ASSERT_EQ(RunClusterBench(o, out, err), 0) << err.str() << out.str();
  EXPECT_NE(out.str().find("offered"), std::string::npos) << "no progress line:\n" << out.str();

  std::ifstream f(o.json_file);
  const nlohmann::json r = nlohmann::json::parse(f);
  for (const char* field : {"offered_rps", "achieved_rps", "decisions_per_s", "store_ops_per_s",
                            "store_ops_per_request", "p50_us", "p99_us", "p999_us", "max_us",
                            "keys_checked", "keys_over_promise", "fallbacks_by_class",
                            "node_usage", "per_second", "worst_window"}) {
    EXPECT_TRUE(r.contains(field)) << field;
  }
  EXPECT_NEAR(r["offered_rps"].get<double>(), 3000, 30);
  EXPECT_EQ(r["errors"].get<uint64_t>(), 0u) << r.value("first_error", "");
  EXPECT_GT(r["keys_checked"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["keys_over_promise"].get<uint64_t>(), 0u) << r["worst_window"].dump();
  EXPECT_GT(r["store_ops_per_s"].get<double>(), 0);
  EXPECT_EQ(r["node_usage"].size(), 3u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/report.md"));
  EXPECT_GT(std::filesystem::file_size(dir + "/chart.png"), 0u);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(o.json_file);
}

INSTANTIATE_TEST_SUITE_P(BothScenarios, ClusterSmokeTest, ::testing::Values("50k", "500k"));

TEST(ClusterBenchErrorTest, AnUnknownScenarioIsOneErrorLine) {
  ClusterBenchOptions o;
  o.scenario = "5m";
  o.policies = LIMITER_CLUSTER_POLICIES;
  std::ostringstream out, err;
  EXPECT_EQ(RunClusterBench(o, out, err), 2);
  EXPECT_EQ(err.str(), "limiter-bench cluster: unknown scenario '5m' (known: 50k, 500k)\n");
}

TEST(ClusterBenchErrorTest, AnUnknownSpreadIsOneErrorLine) {
  ClusterBenchOptions o;
  o.spread = "sideways";
  o.policies = LIMITER_CLUSTER_POLICIES;
  std::ostringstream out, err;
  EXPECT_EQ(RunClusterBench(o, out, err), 2);
  EXPECT_EQ(err.str(),
            "limiter-bench cluster: --spread must be even, random or sticky, got 'sideways'\n");
}

TEST(ClusterBenchErrorTest, AReportFolderThatCannotBeMadeIsOneErrorLine) {
  ClusterBenchOptions o;
  o.policies = LIMITER_CLUSTER_POLICIES;
  o.report_dir = "/proc/no-such-folder/report";
  std::ostringstream out, err;
  EXPECT_EQ(RunClusterBench(o, out, err), 1);
  EXPECT_NE(err.str().find("cannot create /proc/no-such-folder/report"), std::string::npos)
      << err.str();
}

TEST(ClusterBenchErrorTest, APolicyFileWithoutTheScenariosPoliciesIsRefused) {
  ClusterBenchOptions o;
  o.policies = LIMITER_BENCH_POLICIES;
  std::ostringstream out, err;
  EXPECT_EQ(RunClusterBench(o, out, err), 2);
  EXPECT_NE(err.str().find("has no policy 'api_key'"), std::string::npos) << err.str();
}

}  // namespace
}  // namespace limiter::bench
