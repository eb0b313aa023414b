// Durable policies with a real limiterd: a limit lowered across a restart keeps its heaviest
// users denied (their stored states are clamped to the new limit, never dropped to fresh).
// Every wait is bounded; the processes started are stopped by their owners' destructors.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "test/integration/node_process.h"
#include "test/support/build_paths.h"

namespace limiter {
namespace {

struct CheckOutcome {
  int status = -1;      // limiterctl's exit status; -1: it did not finish in time
  nlohmann::json json;  // allowed, denied, errors
  std::string error;    // the first error limiterctl printed, if any
};

// `n` CHECKs of `cost` 1 on one key by the limiterctl binary, bounded: a node that never
// answers costs the test `timeout_ms`, not a hang.
CheckOutcome CtlCheck(const std::string& server, const std::string& policy,
                      const std::string& key, int n, int timeout_ms = 30'000) {
  CheckOutcome o;
  const std::string command = "'" + testing::LimiterctlBin() + "' check --server " + server +
                              " --policy " + policy + " --key " + key + " -n " +
                              std::to_string(n) + " --json 2>&1";
  Result<std::unique_ptr<Subprocess>> p = Subprocess::Start({"/bin/sh", "-c", command});
  if (!p.ok()) {
    o.error = p.error();
    return o;
  }
  for (;;) {
    Result<std::string> line = (*p)->ReadLine(timeout_ms);
    if (!line.ok()) break;
    if (!line->empty() && line->front() == '{') {
      o.json = nlohmann::json::parse(*line);
    } else if (o.error.empty()) {
      o.error = *line;
    }
  }
  const std::optional<int> status = (*p)->Wait(timeout_ms);
  if (!status) {
    (*p)->Signal(SIGKILL);
    (*p)->Wait(10'000);
    o.error = "limiterctl check did not finish within " + std::to_string(timeout_ms) + " ms";
    return o;
  }
  o.status = *status;
  return o;
}

// Stops a node with SIGTERM; its exit status, -1 if it did not exit within `timeout_ms`.
int Stop(testing::RunningNode& node, int timeout_ms = 30'000) {
  node.process->Signal(SIGTERM);
  const std::optional<int> status = node.process->Wait(timeout_ms);
  if (!status) {
    node.process->Signal(SIGKILL);
    node.process->Wait(10'000);
  }
  return status.value_or(-1);
}

std::string Policies(int64_t limit) {
  const std::string l = std::to_string(limit);
  return "policies:\n"
         "  - {name: window, algorithm: fixed_window, limit: " + l +
         ", window: 1h, class: contract, durable: true}\n"
         "  - {name: counter, algorithm: sliding_window, limit: " + l +
         ", window: 1h, class: contract, durable: true}\n"
         "  - {name: log, algorithm: sliding_log, limit: " + l +
         ", window: 1h, class: contract, durable: true}\n"
         "  - {name: bucket, algorithm: token_bucket, limit: " + l + ", window: 1h, burst: " + l +
         ", class: contract, durable: true}\n"
         "  - {name: gcra, algorithm: gcra, limit: " + l + ", window: 1h, burst: " + l +
         ", class: contract, durable: true}\n"
         "  - {name: meter, algorithm: leaky_bucket, limit: " + l + ", window: 1h, burst: " + l +
         ", class: contract, durable: true}\n";
}

class DurableProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/limiter_" + std::to_string(::getpid()) + "_durable_process";
    std::filesystem::remove_all(dir_);
    policies_ = testing::WriteTempFile("durable_process_policies.yaml", "");
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    std::filesystem::remove(policies_);
  }
  testing::RunningNode Start(const std::string& policies_text) {
    std::ofstream(policies_, std::ios::trunc) << policies_text;
    return testing::Launch({"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--policies",
                            policies_, "--threads", "2", "--data-dir", dir_});
  }
  std::string dir_, policies_;
};

// limit: 100 -> 20 across a restart. Each policy's key spent all of its 100 (a fixed window's
// count of 100, an empty bucket, a GCRA TAT an hour ahead...): exhausted under the old limit,
// it must be exhausted under the new one; the issue was that such records (a count over 20)
// were dropped and the keys started fresh (20 more admitted at once).
TEST_F(DurableProcess, ALimitLoweredAcrossARestartKeepsTheHeaviestKeysDenied) {
  const char* kNames[] = {"window", "counter", "log", "bucket", "gcra", "meter"};
  {
    testing::RunningNode node = Start(Policies(100));
    ASSERT_FALSE(node.listen.empty());
    for (const char* policy : kNames) {
      const CheckOutcome spent = CtlCheck(node.listen, policy, "heavy", 101);
      ASSERT_EQ(spent.status, 0) << policy << ": " << spent.error;
      EXPECT_EQ(spent.json["allowed"], 100) << policy;
    }
    ASSERT_EQ(Stop(node), 0) << "a clean stop";
  }
  testing::RunningNode node = Start(Policies(20));
  ASSERT_FALSE(node.listen.empty());
  for (const char* policy : kNames) {
    const CheckOutcome after = CtlCheck(node.listen, policy, "heavy", 5);
    ASSERT_EQ(after.status, 0) << policy << ": " << after.error;
    EXPECT_EQ(after.json["allowed"], 0) << policy << ": the key was refreshed by the restart";
    const CheckOutcome light = CtlCheck(node.listen, policy, "light", 5);
    ASSERT_EQ(light.status, 0) << policy << ": " << light.error;
    EXPECT_EQ(light.json["allowed"], 5) << policy << ": a key never used has the new limit";
  }
  EXPECT_EQ(Stop(node), 0);
}

}  // namespace
}  // namespace limiter
