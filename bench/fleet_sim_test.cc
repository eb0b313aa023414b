// Short runs of `limiter-bench sim`: the report repeats exactly under a seed, the promise
// holds with and without faults, and bad options are refused with their reason.
#include "bench/fleet_sim.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test/support/build_paths.h"

namespace limiter::bench {
namespace {

const std::string kClusterPolicies = testing::SourcePath("bench/cluster_policies.yaml");

using Json = nlohmann::json;

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class FleetSimRun : public ::testing::Test {
 protected:
  FleetSimRun() {
    dir_ = std::filesystem::temp_directory_path() /
           ("fleet-sim-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  ~FleetSimRun() override { std::filesystem::remove_all(dir_); }

  // A small fleet: 8 gateways at 4,000 requests/s for 2 simulated seconds after 1.
  FleetSimOptions Small(uint64_t seed, const std::string& name) {
    FleetSimOptions o;
    o.policies = kClusterPolicies;
    o.rate = 4000;
    o.gateways = 8;
    o.duration_s = 2;
    o.warmup_s = 1;
    o.seed = seed;
    o.quiet = true;
    o.json_file = (dir_ / (name + ".json")).string();
    return o;
  }

  Json Run(const FleetSimOptions& o, int expect = 0) {
    std::ostringstream out, err;
    EXPECT_EQ(RunFleetSim(o, out, err), expect) << err.str();
    if (expect != 0) {
      last_error_ = err.str();
      return Json();
    }
    return Json::parse(Slurp(o.json_file));
  }

  std::filesystem::path dir_;
  std::string last_error_;
};

TEST_F(FleetSimRun, TheSameSeedGivesTheSameReportByteForByte) {
  FleetSimOptions a = Small(7, "a");
  a.faults = "kill node 2 at 1500ms, restart at 2s; hot tenant 3 at 1s, rate 2000";
  a.report_dir = (dir_ / "ra").string();
  FleetSimOptions b = a;
  b.json_file = (dir_ / "b.json").string();
  b.report_dir = (dir_ / "rb").string();
  Run(a);
  Run(b);
  EXPECT_EQ(Slurp(a.json_file), Slurp(b.json_file));
  EXPECT_EQ(Slurp(a.report_dir + "/report.md"), Slurp(b.report_dir + "/report.md"));
  EXPECT_FALSE(Slurp(a.json_file).empty());
  FleetSimOptions c = Small(8, "c");
  c.faults = a.faults;
  Run(c);
  EXPECT_NE(Slurp(a.json_file), Slurp(c.json_file)) << "the seed draws the arrivals";
}

TEST_F(FleetSimRun, WithoutFaultsEveryDecisionIsInTimeAndWithinThePromise) {
  const Json r = Run(Small(3, "plain"));
  EXPECT_EQ(r["mode"], "sim");
  EXPECT_GE(r["achieved_ratio"].get<double>(), 0.999);
  EXPECT_EQ(r["errors"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["by_source"]["fallback"].get<uint64_t>(), 0u);
  EXPECT_GT(r["keys_checked"].get<uint64_t>(), 1000u);
  EXPECT_EQ(r["keys_over_promise"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["keys_over_real_time_bound"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["keys_with_fallback"].get<uint64_t>(), 0u);
  // The floor is a floor, and leases come close to it.
  const double ratio = r["store_ops_to_floor"].get<double>();
  EXPECT_GE(ratio, 1.0);
  EXPECT_LE(ratio, 1.25);
  EXPECT_EQ(r["node_load"].size(), 3u);
  for (const Json& n : r["node_load"]) EXPECT_GT(n["ops"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["per_second"].size(), 3u);  // 3 s of arrivals
}

TEST_F(FleetSimRun, AKilledNodeCostsEachKeyItsClassAllowanceAndSecurityKeysNothing) {
  FleetSimOptions o = Small(5, "kill");
  o.faults = "kill node 1 at 1500ms, restart at 2500ms";
  const Json r = Run(o);
  EXPECT_GT(r["by_source"]["fallback"].get<uint64_t>(), 0u);
  EXPECT_GT(r["fallbacks_by_class"]["security"].get<uint64_t>(), 0u);
  EXPECT_GT(r["keys_with_fallback"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["keys_over_promise"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["keys_over_allowance"].get<uint64_t>(), 0u);
  if (!r["worst_with_fallback"].is_null()) {
    EXPECT_TRUE(r["worst_with_fallback"]["within_allowance"].get<bool>());
  }
}

TEST_F(FleetSimRun, AddedNodeAndPartitionAndSlowNodeKeepThePromise) {
  FleetSimOptions o = Small(9, "mixed");
  o.faults =
      "add node at 1500ms; partition gateways 1-4 from node 2 at 1200ms, heal at 1800ms; "
      "slow node 3 by 50 at 2s, until 2500ms";
  const Json r = Run(o);
  EXPECT_EQ(r["nodes"].get<int>(), 4);
  EXPECT_EQ(r["node_load"].size(), 4u);
  EXPECT_GT(r["node_load"][3]["ops"].get<uint64_t>(), 0u) << "the new node serves its keys";
  EXPECT_GT(r["deadline_misses"].get<uint64_t>(), 0u) << "the partition's frames vanished";
  EXPECT_EQ(r["keys_over_promise"].get<uint64_t>(), 0u);
  EXPECT_EQ(r["keys_over_allowance"].get<uint64_t>(), 0u);
  EXPECT_FALSE(r.contains("setup_errors")) << r["setup_errors"].dump();
}

TEST_F(FleetSimRun, BadOptionsAreRefusedWithTheirReason) {
  FleetSimOptions o = Small(1, "bad");
  o.scenario = "5k";
  Run(o, 2);
  EXPECT_NE(last_error_.find("unknown scenario '5k'"), std::string::npos) << last_error_;
  o = Small(1, "bad");
  o.faults = "kill node 9 at 1s";
  Run(o, 2);
  EXPECT_NE(last_error_.find("node 9 does not exist"), std::string::npos) << last_error_;
  o = Small(1, "bad");
  o.faults = "explode at 1s";
  Run(o, 2);
  EXPECT_NE(last_error_.find("unknown fault"), std::string::npos) << last_error_;
  o = Small(1, "bad");
  o.policies = (dir_ / "missing.yaml").string();
  Run(o, 1);
  EXPECT_NE(last_error_.find("missing.yaml"), std::string::npos) << last_error_;
}

}  // namespace
}  // namespace limiter::bench
