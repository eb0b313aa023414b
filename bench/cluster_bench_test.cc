// The CI smoke runs of both cluster scenarios: 3 s at a reduced rate on a local 3-node
// cluster, checking the report's fields and that no key went over its promise.
#include "bench/cluster_bench.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/fleet_report.h"
#include "bench/node_load.h"
#include "test/support/build_paths.h"

namespace limiter::bench {
namespace {

const std::string kBenchPolicies = testing::SourcePath("bench/policies.yaml");
const std::string kClusterPolicies = testing::SourcePath("bench/cluster_policies.yaml");

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
  const std::string dir =
      ::testing::TempDir() + "/cluster_smoke_" + GetParam() + "_" + std::to_string(::getpid());
  ClusterBenchOptions o;
  o.scenario = GetParam();
  o.limiterd = testing::LimiterdBin();
  o.policies = kClusterPolicies;
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
  for (const char* field : {"offered_rps",
                            "achieved_rps",
                            "decisions_per_s",
                            "store_ops_per_s",
                            "store_ops_per_request",
                            "p50_us",
                            "p99_us",
                            "p999_us",
                            "max_us",
                            "keys_checked",
                            "keys_over_promise",
                            "fallbacks_by_class",
                            "node_usage",
                            "per_second",
                            "worst_window",
                            "store_ops_floor",
                            "store_ops_to_floor",
                            "keys_over_allowance",
                            "keys_over_promise_real_time",
                            "keys_over_real_time_bound",
                            "loop_lag_max_us",
                            "cost"}) {
    EXPECT_TRUE(r.contains(field)) << field;
  }
  EXPECT_NEAR(r["offered_rps"].get<double>(), 3000, 30);
  EXPECT_EQ(r["errors"].get<uint64_t>(), 0u) << r.value("first_error", "");
  EXPECT_GT(r["keys_checked"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["keys_over_promise"].get<uint64_t>(), 0u) << r["worst_window"].dump();
  EXPECT_GT(r["store_ops_per_s"].get<double>(), 0);
  EXPECT_EQ(r["node_usage"].size(), 3u);
  // The floor is a floor; a deadline missed on a loaded machine (a lease answered late and
  // kept, its request decided by fallback) can save the client an op the floor counts.
  EXPECT_GE(r["store_ops_to_floor"].get<double>(), 0.98);
  EXPECT_EQ(r["keys_over_real_time_bound"].get<uint64_t>(), 0u) << r["worst_real_time"].dump();
  EXPECT_EQ(r["keys_over_allowance"].get<uint64_t>(), 0u) << r["worst_with_fallback"].dump();
  EXPECT_GT(r["cost"]["gateway_us_per_decision"].get<double>(), 0);
  EXPECT_GT(r["cost"]["node_us_per_store_op"].get<double>(), 0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/report.md"));
  EXPECT_GT(std::filesystem::file_size(dir + "/chart.png"), 0u);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(o.json_file);
}

INSTANTIATE_TEST_SUITE_P(BothScenarios, ClusterSmokeTest, ::testing::Values("50k", "500k"));

// Two parts of one run, at once against one cluster, merged: every count the seed decides is
// the single run's (the arrivals, and at this rate every decision: nothing is near a limit).
// Store ops and latencies depend on real time, so they are compared loosely.
TEST(ClusterPartsTest, TwoPartsMergeIntoTheSingleRun) {
  const std::string dir = ::testing::TempDir() + "/cluster_parts_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto options = [&](const std::vector<std::string>& cluster) {
    ClusterBenchOptions o;
    o.cluster = cluster;
    o.policies = kClusterPolicies;
    o.duration_s = 2;
    o.warmup_s = 1;
    o.rate = 400;
    o.gateways = 8;
    o.loops = 2;
    o.deadline_us = 500'000;
    o.seed = 11;
    return o;
  };
  auto start = [&]() {
    LocalNodeOptions node;
    node.program = testing::LimiterdBin();
    node.policies = kClusterPolicies;
    Result<std::vector<LocalNode>> nodes = StartLocalCluster(3, node);
    EXPECT_TRUE(nodes.ok()) << nodes.error();
    return nodes.ok() ? std::move(nodes).value() : std::vector<LocalNode>{};
  };
  auto addresses = [](const std::vector<LocalNode>& nodes) {
    std::vector<std::string> a;
    for (const LocalNode& n : nodes) a.push_back(n.address);
    return a;
  };
  nlohmann::json single, merged;
  {
    const std::vector<LocalNode> nodes = start();
    ClusterBenchOptions o = options(addresses(nodes));
    o.json_file = dir + "/single.json";
    std::ostringstream out, err;
    ASSERT_EQ(RunClusterBench(o, out, err), 0) << err.str();
    single = nlohmann::json::parse(std::ifstream(o.json_file));
  }
  {
    const std::vector<LocalNode> nodes = start();
    std::vector<std::thread> parts;
    std::string errors[2];
    for (int i = 0; i < 2; ++i) {
      parts.emplace_back([&, i] {
        ClusterBenchOptions o = options(addresses(nodes));
        o.part = i;
        o.parts = 2;
        o.json_file = dir + "/part" + std::to_string(i) + ".json";
        std::ostringstream out, err;
        if (RunClusterBench(o, out, err) != 0) errors[i] = err.str() + out.str();
      });
    }
    for (std::thread& t : parts) t.join();
    ASSERT_EQ(errors[0] + errors[1], "");
  }
  // A part is not a report: merge makes one.
  const nlohmann::json part0 = nlohmann::json::parse(std::ifstream(dir + "/part0.json"));
  EXPECT_EQ(part0["parts_included"], nlohmann::json::array({0}));
  MergeOptions m;
  m.parts = {dir + "/part1.json", dir + "/part0.json"};
  m.policies = kClusterPolicies;
  m.json_file = dir + "/merged.json";
  m.report_dir = dir + "/merged";
  std::ostringstream out, err;
  ASSERT_EQ(RunMerge(m, out, err), 0) << err.str();
  merged = nlohmann::json::parse(std::ifstream(m.json_file));
  EXPECT_EQ(merged["parts_included"], nlohmann::json::array({0, 1}));
  for (const char* count : {"issued", "decided", "allowed", "denied", "errors", "keys_checked",
                            "keys_over_promise", "keys_with_fallback"}) {
    EXPECT_EQ(merged[count], single[count]) << count;
  }
  EXPECT_EQ(merged["allowed"], merged["issued"]) << "nothing near a limit at this rate";
  // The arrivals of each second are the seed's. How many seconds the series has is not: a
  // decision that finishes after the last second of arrivals adds a second with none.
  auto offered = [](const nlohmann::json& report, size_t i) -> int64_t {
    const nlohmann::json& seconds = report["per_second"];
    return i < seconds.size() ? seconds[i]["offered"].get<int64_t>() : 0;
  };
  const size_t seconds = std::max(merged["per_second"].size(), single["per_second"].size());
  EXPECT_GE(seconds, 3u);
  for (size_t i = 0; i < seconds; ++i) EXPECT_EQ(offered(merged, i), offered(single, i)) << i;
  const double ops = merged["store_ops"].get<double>(),
               single_ops = single["store_ops"].get<double>();
  EXPECT_NEAR(ops, single_ops, 0.05 * single_ops) << "store ops follow the same arrivals";
  EXPECT_TRUE(std::filesystem::exists(dir + "/merged/report.md"));

  // The parts must belong together, and none may come twice.
  m.parts = {dir + "/part0.json", dir + "/part0.json"};
  std::ostringstream out2, err2;
  EXPECT_EQ(RunMerge(m, out2, err2), 1);
  EXPECT_NE(err2.str().find("part 0 is given twice"), std::string::npos) << err2.str();
  m.parts = {dir + "/single.json"};
  std::ostringstream out3, err3;
  EXPECT_EQ(RunMerge(m, out3, err3), 1);
  EXPECT_NE(err3.str().find("not a partial report"), std::string::npos) << err3.str();
  std::filesystem::resize_file(dir + "/part1.json.records", 10);
  m.parts = {dir + "/part1.json"};
  std::ostringstream out4, err4;
  EXPECT_EQ(RunMerge(m, out4, err4), 1);
  EXPECT_NE(err4.str().find("part1.json.records: expected"), std::string::npos) << err4.str();
  std::filesystem::remove_all(dir);
}

// A partial report is input from another machine: every way it can be wrong is an error
// naming the file, never a crash.
TEST(ClusterPartsTest, ACorruptPartialReportIsOneClearError) {
  const std::string dir = ::testing::TempDir() + "/bad_parts_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  RunTotals run;
  run.scenario = "50k";
  run.gateways = 4;
  run.parts = 2;
  run.parts_included = {1};
  run.duration_s = 1;
  DecisionRecord r;
  r.intended_us = 10;
  r.done_us = 20;
  r.allowed = 1;
  run.records = {r, r};
  const std::string good = dir + "/good.json";
  ASSERT_TRUE(WritePartial(run, good).ok());
  ASSERT_TRUE(ReadPartial(good).ok()) << ReadPartial(good).error();
  auto rewrite = [&](const std::string& name, auto edit) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(good));
    edit(j);
    const std::string path = dir + "/" + name + ".json";
    std::ofstream(path) << j.dump();
    std::filesystem::copy_file(good + ".records", path + ".records",
                               std::filesystem::copy_options::overwrite_existing);
    return path;
  };
  const std::pair<std::string, std::string> cases[] = {
      {rewrite("huge", [](nlohmann::json& j) { j["records"] = uint64_t{1} << 62; }), "expected"},
      {rewrite("negative", [](nlohmann::json& j) { j["records"] = -1; }), "huge"},
      {rewrite("noparts", [](nlohmann::json& j) { j["parts_included"] = nlohmann::json::array(); }),
       "names no part"},
      {rewrite("range", [](nlohmann::json& j) { j["parts_included"] = {2}; }), "distinct parts"},
      {rewrite("twice",
               [](nlohmann::json& j) {
                 j["parts"] = 3;
                 j["parts_included"] = {1, 1};
               }),
       "distinct parts"},
      {rewrite("bucket",
               [](nlohmann::json& j) {
                 j["latency"]["buckets"] = {{100000, 1}};
               }),
       "bucket"},
      {rewrite("shape", [](nlohmann::json& j) { j["seconds"] = "many"; }), "bad.json"},
      {rewrite("scenario", [](nlohmann::json& j) { j["scenario"] = "9m"; }), "unknown scenario"},
  };
  for (const auto& [path, message] : cases) {
    Result<RunTotals> read = ReadPartial(path);
    ASSERT_FALSE(read.ok()) << path;
    if (message != "bad.json" && message != "huge") {
      EXPECT_NE(read.error().find(message), std::string::npos) << read.error();
    }
    EXPECT_NE(read.error().find(dir), std::string::npos) << read.error();
  }
  // A decision that names a key the scenario has not.
  {
    std::fstream f(good + ".records", std::ios::in | std::ios::out | std::ios::binary);
    DecisionRecord bad = r;
    bad.index = 999'999'999;
    f.write(reinterpret_cast<const char*>(&bad), sizeof(bad));
  }
  Result<RunTotals> read = ReadPartial(good);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.error().find("decision 0: key rank 999999999"), std::string::npos) << read.error();
  std::filesystem::remove_all(dir);
}

// Parts that cannot be one run are refused with the reason, whatever order they come in.
TEST(ClusterPartsTest, MergeRefusesPartsThatAreNotOneRun) {
  const std::string dir = ::testing::TempDir() + "/foreign_parts_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto part = [&](int i, uint64_t seed, int64_t t0_wall_us) {
    RunTotals run;
    run.scenario = "50k";
    run.seed = seed;
    run.gateways = 4;
    run.parts = 2;
    run.parts_included = {i};
    run.duration_s = 1;
    run.t0_wall_us = t0_wall_us;
    const std::string path = dir + "/p" + std::to_string(i) + "-" + std::to_string(seed) + "-" +
                             std::to_string(t0_wall_us) + ".json";
    EXPECT_TRUE(WritePartial(run, path).ok());
    return path;
  };
  auto merge = [&](std::vector<std::string> parts, const std::string& policies) {
    MergeOptions m;
    m.parts = std::move(parts);
    m.policies = policies;
    std::ostringstream out, err;
    const int code = RunMerge(m, out, err);
    return std::make_pair(code, err.str());
  };
  const int64_t t0 = 1'700'000'000'000'000;
  auto [code, err] = merge({part(0, 1, t0), part(1, 2, t0)}, kClusterPolicies);
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("is a part of another run"), std::string::npos) << err;
  std::tie(code, err) =
      merge({part(0, 1, t0), part(1, 1, t0 + 2 * 3'600'000'000)}, kClusterPolicies);
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("more than an hour apart"), std::string::npos) << err;
  std::tie(code, err) = merge({part(0, 1, t0), part(1, 1, t0 + 1000)}, kBenchPolicies);
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("has no policy 'api_key'"), std::string::npos) << err;
  std::tie(code, err) = merge({part(0, 1, t0), part(1, 1, t0 + 1000)}, kClusterPolicies);
  EXPECT_EQ(code, 0) << err;
  std::filesystem::remove_all(dir);
}

TEST(ClusterBenchErrorTest, APartNeedsAPartialReportFile) {
  ClusterBenchOptions o;
  o.policies = kClusterPolicies;
  o.part = 1;
  o.parts = 2;
  std::ostringstream out, err;
  EXPECT_EQ(RunClusterBench(o, out, err), 2);
  EXPECT_NE(err.str().find("give --json FILE"), std::string::npos) << err.str();
  EXPECT_FALSE(ParsePart("2/2").has_value());
  EXPECT_FALSE(ParsePart("1").has_value());
  EXPECT_FALSE(ParsePart("a/2").has_value());
  EXPECT_EQ(ParsePart("1/4"), std::make_pair(1, 4));
}

TEST(ClusterBenchErrorTest, AnUnknownScenarioIsOneErrorLine) {
  ClusterBenchOptions o;
  o.scenario = "5m";
  o.policies = kClusterPolicies;
  std::ostringstream out, err;
  EXPECT_EQ(RunClusterBench(o, out, err), 2);
  EXPECT_EQ(err.str(), "limiter-bench cluster: unknown scenario '5m' (known: 50k, 500k)\n");
}

TEST(ClusterBenchErrorTest, AnUnknownSpreadIsOneErrorLine) {
  ClusterBenchOptions o;
  o.spread = "sideways";
  o.policies = kClusterPolicies;
  std::ostringstream out, err;
  EXPECT_EQ(RunClusterBench(o, out, err), 2);
  EXPECT_EQ(err.str(),
            "limiter-bench cluster: --spread must be even, random or sticky, got 'sideways'\n");
}

TEST(ClusterBenchErrorTest, AReportFolderThatCannotBeMadeIsOneErrorLine) {
  ClusterBenchOptions o;
  o.policies = kClusterPolicies;
  o.report_dir = "/proc/no-such-folder/report";
  std::ostringstream out, err;
  EXPECT_EQ(RunClusterBench(o, out, err), 1);
  EXPECT_NE(err.str().find("cannot create /proc/no-such-folder/report"), std::string::npos)
      << err.str();
}

TEST(ClusterBenchErrorTest, APolicyFileWithoutTheScenariosPoliciesIsRefused) {
  ClusterBenchOptions o;
  o.policies = kBenchPolicies;
  std::ostringstream out, err;
  EXPECT_EQ(RunClusterBench(o, out, err), 2);
  EXPECT_NE(err.str().find("has no policy 'api_key'"), std::string::npos) << err.str();
}

}  // namespace
}  // namespace limiter::bench
