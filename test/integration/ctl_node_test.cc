// limiterctl check, inspect and stats against a real node.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test/integration/node_process.h"
#include "test/support/ctl_runner.h"

namespace limiter {
namespace {

using Outcome = testing::CtlOutcome;

Outcome Ctl(std::vector<std::string> args) { return testing::RunCtl(std::move(args)); }

class CtlNode : public ::testing::Test {
 protected:
  void SetUp() override {
    policies_ = testing::WriteTempFile("ctl_policies.yaml", R"(
policies:
  - {name: tenant, algorithm: gcra, limit: 50, window: 1h, class: contract}
  - {name: api_key, algorithm: token_bucket, limit: 100, window: 1h, class: contract,
     parent: tenant, costs: {report: 20}}
  - {name: login, algorithm: fixed_window, limit: 5, window: 1h, class: security}
  - {name: api, algorithm: token_bucket, limit: 50, window: 1h, class: contract,
     lease: {size: 10}}
)");
    node_ = testing::StartNode({"--policies", policies_});
    ASSERT_FALSE(node_.listen.empty());
  }
  std::string policies_;
  testing::RunningNode node_;
};

TEST_F(CtlNode, ClusterViewsOfOneNode) {
  ASSERT_EQ(Ctl({"check", "--server", node_.listen, "--policy", "login", "--key", "eve", "-n", "8"})
                .status,
            0);
  Outcome o = Ctl({"hotkeys", "--cluster", node_.listen, "--once", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_TRUE(j["errors"].empty());
  EXPECT_TRUE(j["hot_keys"].is_array());  // filled once the node has ticked

  o = Ctl({"ring", "--cluster", node_.listen, "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["nodes"].size(), 1u);
  EXPECT_EQ(j["nodes"][0]["slots"], 262144);
  EXPECT_EQ(j["nodes"][0]["state"], "standalone");

  o = Ctl({"stats", "--cluster", node_.listen, "--interval", "0.1", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["nodes"][0]["keys"], 1);
  EXPECT_EQ(j["nodes"][0]["ops_per_s"], 0);

  o = Ctl({"inspect", "--cluster", node_.listen, "--policy", "login", "eve", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["split_k"], 0);
  ASSERT_EQ(j["buckets"].size(), 1u);
  EXPECT_EQ(j["buckets"][0]["state"]["count"], 5);

  // Text tables fit 80 columns.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"hotkeys", "--cluster", node_.listen, "--once"},
           {"ring", "--cluster", node_.listen},
           {"stats", "--cluster", node_.listen, "--interval", "0.1"},
           {"inspect", "--cluster", node_.listen, "--policy", "login", "eve"}}) {
    o = Ctl(args);
    ASSERT_EQ(o.status, 0) << o.err;
    std::istringstream lines(o.out);
    for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 80u) << line;
  }

  // Unreachable nodes are reported, not fatal, unless all of them are.
  o = Ctl({"hotkeys", "--cluster", node_.listen + ",127.0.0.1:1", "--once", "--json"});
  EXPECT_EQ(o.status, 0);
  j = nlohmann::json::parse(o.out);
  ASSERT_EQ(j["errors"].size(), 1u);
  EXPECT_EQ(j["errors"][0]["node"], "127.0.0.1:1");
  o = Ctl({"stats", "--cluster", "127.0.0.1:1", "--interval", "0.1"});
  EXPECT_EQ(o.status, 1);
  o = Ctl({"ring", "--cluster", "nohost"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err,
            "limiterctl ring: --cluster: member 'nohost' is not HOST:PORT with a port 1-65535\n");
  o = Ctl({"inspect", "--policy", "login", "eve"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "limiterctl inspect: give --server HOST:PORT or --cluster HOST:PORT,...\n");
}

TEST_F(CtlNode, CheckThroughTheClientLibrary) {
  // A long deadline: on a loaded machine (sanitizers, tests in parallel) a check past the
  // default 2 ms would take the security fallback, which is not what this test is about.
  Outcome o = Ctl({"check", "--cluster", node_.listen, "--policy-file", policies_, "--policy",
                   "login", "--key", "k", "-n", "10", "--deadline-ms", "5000", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["allowed"], 5);
  EXPECT_EQ(j["denied"], 5);
  EXPECT_EQ(j["errors"], 0);
  EXPECT_EQ(j["by_source"]["store"], 10);  // a security limit: one CHECK per request

  // Leases of 10 from two threads: every one of the 50 units is admitted, none twice. The
  // deadline is long so that a loaded machine cannot turn a slow lease into a fallback.
  o = Ctl({"check", "--cluster", node_.listen, "--policy-file", policies_, "--policy", "api",
           "--key", "k", "-n", "100", "--concurrency", "2", "--deadline-ms", "5000", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["allowed"], 50) << o.out;
  EXPECT_EQ(j["by_source"]["fallback"], 0) << o.out;
  EXPECT_GT(j["by_source"]["lease"], 0);
  o = Ctl({"check", "--cluster", node_.listen, "--policy-file", policies_, "--policy", "api",
           "--key", "k", "--deadline-ms", "0"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "limiterctl check: --deadline-ms must be between 0.001 and 60000\n");

  o = Ctl({"check", "--cluster", node_.listen, "--policy", "api", "--key", "k"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "limiterctl check: --cluster needs --policy-file (the file the nodes load)\n");
  o = Ctl({"check", "--cluster", "nohost", "--policy-file", policies_, "--policy", "api", "--key",
           "k"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err,
            "limiterctl check: --cluster: member 'nohost' is not HOST:PORT with a port 1-65535\n");
  o = Ctl({"check", "--policy", "api", "--key", "k"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "limiterctl check: give --server HOST:PORT or --cluster HOST:PORT,...\n");
}

TEST_F(CtlNode, CheckCountsAcrossConnections) {
  const Outcome o = Ctl({"check", "--server", node_.listen, "--policy", "login", "--key", "alice",
                         "-n", "1000", "--concurrency", "4", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["allowed"], 5);
  EXPECT_EQ(j["denied"], 995);
  EXPECT_EQ(j["errors"], 0);

  const Outcome report = Ctl({"check", "--server", node_.listen, "--policy", "api_key", "--key",
                              "k", "--tenant", "acme", "--op", "report", "-n", "10"});
  ASSERT_EQ(report.status, 0) << report.err;
  // Each policy charges its own cost for an operation: 20 from the key (100 / 20 = 5),
  // 1 from the tenant, which lists no cost for reports.
  EXPECT_EQ(report.out, "allowed 5  denied 5  errors 0\n");
}

TEST_F(CtlNode, CheckReportsErrorsAndExitsOne) {
  Outcome o = Ctl({"check", "--server", node_.listen, "--policy", "api_key", "--key", "k", "-n",
                   "3", "--json"});
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(nlohmann::json::parse(o.out)["errors"], 3);
  EXPECT_EQ(o.err,
            "limiterctl check: BadRequest: limits[0]: policy 'api_key' nests under 'tenant'; the "
            "request needs a tenant\n");
  o = Ctl({"check", "--server", "127.0.0.1:1", "--policy", "login", "--key", "k"});
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err, "limiterctl check: connect to 127.0.0.1:1: Connection refused\n");
  o = Ctl({"check", "--server", node_.listen, "--policy", "login", "--key", "k", "--cost", "0"});
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err, "limiterctl check: BadRequest: cost must be between 1 and 1000000000, got 0\n");
}

TEST_F(CtlNode, InspectAndStatsShowWhatTheyName) {
  ASSERT_EQ(Ctl({"check", "--server", node_.listen, "--policy", "login", "--key", "bob", "-n", "2"})
                .status,
            0);
  Outcome o = Ctl({"inspect", "--server", node_.listen, "--policy", "login", "bob", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["algorithm"], "fixed_window");
  EXPECT_EQ(j["tracked"], true);
  EXPECT_EQ(j["remaining"], 3);
  EXPECT_EQ(j["state"]["count"], 2);

  o = Ctl({"inspect", "--server", node_.listen, "--policy", "nope", "bob"});
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err, "limiterctl inspect: UnknownPolicy: limits[0].policy: no policy named 'nope'\n");

  o = Ctl({"stats", "--server", node_.listen, "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["stats"]["keys"], 1);
  EXPECT_EQ(j["stats"]["ops_check_allowed"], 2);
  EXPECT_EQ(j["stats"]["ops_inspect_ok"], 1);
  EXPECT_GT(j["stats"]["resident_bytes"], 0);
}

}  // namespace
}  // namespace limiter
