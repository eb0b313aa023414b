#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "test/support/build_paths.h"
#include "test/support/ctl_runner.h"

namespace limiter::ctl {
namespace {

using Outcome = testing::CtlOutcome;
using testing::RunCtl;

const std::string kSeed = limiter::testing::SourcePath("examples/traces/seed.csv");
const std::string kPolicies = limiter::testing::SourcePath("examples/policies.yaml");

TEST(CtlReplay, PrintsTheSeedTable) {
  const Outcome o = RunCtl(
      {"replay", "--trace", kSeed, "--algorithm", "all", "--limit", "10", "--window", "1000"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out, "trace:   " + kSeed +
                       "\n"
                       "offered: 80 requests  steady=10  edge=30  overload=40\n"
                       "limit:   10 per 1000 ms, burst 10\n"
                       "\n"
                       "algorithm         steady  edge  overload  total  worst 1s\n"
                       "fixed_window          10    20        20     50        20\n"
                       "sliding_log           10    10        20     40        10\n"
                       "sliding_window        10    11        20     41        11\n"
                       "token_bucket          10    11        29     50        19\n"
                       "gcra                  10    11        29     50        19\n"
                       "leaky_bucket          10    11        29     50        19\n");
}

TEST(CtlReplay, JsonHasOneObjectPerAlgorithm) {
  const Outcome o = RunCtl({"replay", "--trace", kSeed, "--algorithm", "token_bucket", "--limit",
                            "10", "--window", "1s", "--burst", "20", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["algorithm"], "token_bucket");
  EXPECT_EQ(j["offered"], 80);
  EXPECT_EQ(j["accepted"], 60);
  EXPECT_EQ(j["worst_window"], 21);
  EXPECT_EQ(j["by_label"]["edge"], 21);

  const Outcome all = RunCtl({"replay", "--trace", kSeed, "--algorithm", "all", "--limit", "10",
                              "--window", "1000", "--json"});
  ASSERT_EQ(all.status, 0) << all.err;
  std::istringstream lines(all.out);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    const auto obj = nlohmann::json::parse(line);
    for (const char* field : {"algorithm", "offered", "accepted", "worst_window", "by_label"}) {
      EXPECT_TRUE(obj.contains(field)) << field;
    }
    ++count;
  }
  EXPECT_EQ(count, 6);
}

TEST(CtlReplay, TakesTheRateFromAPolicy) {
  const Outcome o = RunCtl(
      {"replay", "--trace", kSeed, "--policy-file", kPolicies, "--policy", "api_key", "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["algorithm"], "token_bucket");
  EXPECT_EQ(j["limit"], 100);
  EXPECT_EQ(j["burst"], 200);
  EXPECT_EQ(j["accepted"], 80);  // 100/s with a burst of 200 admits the whole seed trace
}

TEST(CtlReplay, BadUsageAndBadInputGetClearErrors) {
  Outcome o = RunCtl(
      {"replay", "--trace", kSeed, "--algorithm", "nope", "--limit", "10", "--window", "1000"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err,
            "limiterctl replay: --algorithm: unknown algorithm 'nope' (known: fixed_window, "
            "sliding_log, sliding_window, token_bucket, gcra, leaky_bucket, all)\n");

  o = RunCtl({"replay", "--trace", kSeed, "--algorithm", "gcra", "--limit", "10"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err,
            "limiterctl replay: replay needs --limit and --window (or --policy-file and "
            "--policy)\n");

  o = RunCtl({"replay", "--trace", kSeed, "--algorithm", "gcra", "--limit", "0", "--window", "1s"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "limiterctl replay: limit must be a positive integer, got 0\n");

  o = RunCtl(
      {"replay", "--trace", kSeed, "--algorithm", "gcra", "--limit", "5", "--window", "soon"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err,
            "limiterctl replay: --window: expected milliseconds or a duration like 1s, got "
            "'soon'\n");

  o = RunCtl({"replay", "--trace", kSeed, "--limit", "5", "--window", "1s", "--policy-file",
              kPolicies, "--policy", "tenant"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err,
            "limiterctl replay: use either --limit/--window/--burst or --policy-file/--policy, "
            "not both\n");

  o = RunCtl({"replay", "--trace", kSeed, "--policy-file", kPolicies, "--policy", "nobody"});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "limiterctl replay: " + kPolicies + ": no policy named 'nobody'\n");

  o = RunCtl({"replay", "--trace", "/nonexistent.csv", "--algorithm", "gcra", "--limit", "5",
              "--window", "1s"});
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err, "limiterctl replay: /nonexistent.csv: cannot open the trace file\n");

  const std::string bad =
      ::testing::TempDir() + "/" + std::to_string(::getpid()) + "_bad_trace.csv";
  std::ofstream(bad) << "t_ms,key,cost,label\n5,a\n4,a\n";
  o = RunCtl({"replay", "--trace", bad, "--algorithm", "gcra", "--limit", "5", "--window", "1s"});
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err,
            "limiterctl replay: " + bad +
                ":3: t_ms 4 is earlier than the previous row's 5 (t_ms must be non-decreasing)\n");

  const std::string bad_policy =
      ::testing::TempDir() + "/" + std::to_string(::getpid()) + "_bad_policies.yaml";
  std::ofstream(bad_policy) << "policies:\n  - {name: a, limit: -1, window: 1s, class: contract}\n";
  o = RunCtl({"replay", "--trace", kSeed, "--policy-file", bad_policy, "--policy", "a"});
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err, "limiterctl replay: " + bad_policy +
                       ":2:22: policy 'a', field 'limit': must be a positive integer, got -1\n");

  const std::string empty =
      ::testing::TempDir() + "/" + std::to_string(::getpid()) + "_empty_trace.csv";
  std::ofstream(empty) << "t_ms,key\n";
  o = RunCtl({"replay", "--trace", empty, "--algorithm", "gcra", "--limit", "5", "--window", "1s"});
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.err, "limiterctl replay: " + empty + ": the trace has a header but no rows\n");

  o = RunCtl({"replay"});
  EXPECT_NE(o.status, 0);
  EXPECT_NE(o.err.find("--trace is required"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace limiter::ctl
