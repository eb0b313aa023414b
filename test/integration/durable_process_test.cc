// Durable policies with a real limiterd: a limit lowered across a restart keeps its heaviest
// users denied (their stored states are clamped to the new limit, never dropped to fresh);
// a data dir on a disk that fills up (a small tmpfs the test mounts: CI runs it as root; the
// test fails, saying so, when it cannot mount) makes durable CHECKs fail with StoreError, not
// hang, the node serves them again by itself once space is back, and SIGTERM stops it within
// its deadline. Every wait is bounded; the processes started are stopped by their owners'
// destructors, and the mount goes in TearDown.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "test/integration/node_process.h"
#include "test/support/build_paths.h"
#include "test/support/wait.h"

namespace limiter {
namespace {

struct CheckOutcome {
  int status = -1;      // limiterctl's exit status; -1: it did not finish in time
  nlohmann::json json;  // allowed, denied, errors
  std::string error;    // the first error limiterctl printed, if any
};

// Runs the limiterctl binary with `args`, bounded: a node that never answers costs the test
// `timeout_ms`, not a hang. Its JSON line, and the first other line it printed.
CheckOutcome Ctl(const std::string& args, int timeout_ms) {
  CheckOutcome o;
  const std::string command = "'" + testing::LimiterctlBin() + "' " + args + " --json 2>&1";
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

// `n` CHECKs of cost 1 on one key.
CheckOutcome CtlCheck(const std::string& server, const std::string& policy, const std::string& key,
                      int n, int timeout_ms = 30'000) {
  return Ctl("check --server " + server + " --policy " + policy + " --key " + key + " -n " +
                 std::to_string(n),
             timeout_ms);
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

// One durable policy of each algorithm, named after it, at `limit` per hour (burst = limit).
std::string Policies(int64_t limit) {
  const std::string l = std::to_string(limit);
  std::string text = "policies:\n";
  for (const char* a :
       {"fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra", "leaky_bucket"}) {
    const std::string name = a;
    const bool bucket = name == "token_bucket" || name == "gcra" || name == "leaky_bucket";
    text += "  - {name: " + name + ", algorithm: " + name + ", limit: " + l + ", window: 1h" +
            (bucket ? ", burst: " + l : std::string()) + ", class: contract, durable: true}\n";
  }
  return text;
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
  const char* kNames[] = {"fixed_window", "sliding_window", "sliding_log",
                          "token_bucket", "gcra",           "leaky_bucket"};
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

// Fills the file system of `path` with one file until a write fails (ENOSPC).
bool Fill(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  static char block[1 << 16] = {1};
  while (std::fwrite(block, 1, sizeof(block), f) == sizeof(block)) {
  }
  std::fclose(f);
  return true;
}

class DurableFullDiskProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    mount_ = ::testing::TempDir() + "/limiter_" + std::to_string(::getpid()) + "_full_disk";
    std::filesystem::create_directories(mount_);
    if (::mount("tmpfs", mount_.c_str(), "tmpfs", 0, "size=24m") != 0) {
      const int err = errno;
      std::filesystem::remove(mount_);
      FAIL() << "this test mounts a tmpfs on " << mount_ << " and cannot: " << std::strerror(err)
             << " (it needs root, or CAP_SYS_ADMIN; CI runs it as root)";
    }
    mounted_ = true;
    policies_ = testing::WriteTempFile(
        "full_disk_policies.yaml",
        "policies:\n  - {name: quota, algorithm: fixed_window, limit: 1000000, window: 1h, "
        "class: billing, durable: true}\n");
  }
  void TearDown() override {
    if (node_.process) Stop(node_);
    node_ = {};
    if (mounted_ && ::umount(mount_.c_str()) != 0) ::umount2(mount_.c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove_all(mount_, ec);
    std::filesystem::remove(policies_, ec);
  }
  std::string mount_, policies_;
  bool mounted_ = false;
  testing::RunningNode node_;
};

TEST_F(DurableFullDiskProcess, DurableChecksFailWithStoreErrorAndComeBackWithoutARestart) {
  node_ = testing::Launch({"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--policies",
                           policies_, "--threads", "2", "--data-dir", mount_ + "/db"});
  ASSERT_FALSE(node_.listen.empty());
  const CheckOutcome before = CtlCheck(node_.listen, "quota", "before", 10);
  ASSERT_EQ(before.status, 0) << before.error;
  EXPECT_EQ(before.json["allowed"], 10);

  const std::string filler = mount_ + "/filler";
  ASSERT_TRUE(Fill(filler));
  // Durable CHECKs on new keys until they are refused with StoreError; every run finishes
  // (no reply that waits for ever). The batch in flight when the disk fills ends its
  // connection (limiterctl says so); the ones after it get StoreError.
  std::string refused;
  for (int i = 0; i < 400 && refused.empty(); ++i) {
    const CheckOutcome o = CtlCheck(node_.listen, "quota", "k" + std::to_string(i), 50);
    ASSERT_NE(o.status, -1) << "run " << i << ": " << o.error;
    if (o.status != 0 && o.error.find("StoreError") != std::string::npos) refused = o.error;
  }
  ASSERT_FALSE(refused.empty()) << "no durable CHECK was refused on a full disk";
  EXPECT_NE(refused.find("cannot write ("), std::string::npos) << refused;
  CheckOutcome stats = Ctl("stats --server " + node_.listen, 30'000);
  ASSERT_EQ(stats.status, 0) << stats.error;
  EXPECT_EQ(stats.json["stats"].value("durable_failing", -1), 1) << stats.json.dump();

  // Space again: CHECKs succeed without a restart (polled, bounded).
  std::filesystem::remove(filler);
  bool ran = true;  // limiterctl ran at every try
  const bool served = testing::WaitUntil(
      [&] {
        const CheckOutcome o = CtlCheck(node_.listen, "quota", "after", 5);
        ran = o.status != -1;
        EXPECT_TRUE(ran) << o.error;
        return !ran || (o.status == 0 && o.json["allowed"] == 5);
      },
      std::chrono::seconds(60), std::chrono::milliseconds(50));
  ASSERT_TRUE(ran);
  EXPECT_TRUE(served) << "durable CHECKs still fail 60 s after space came back";
  stats = Ctl("stats --server " + node_.listen, 30'000);
  ASSERT_EQ(stats.status, 0) << stats.error;
  EXPECT_EQ(stats.json["stats"].value("durable_failing", -1), 0) << stats.json.dump();
  EXPECT_GE(stats.json["stats"].value("durable_resumes", 0), 1) << stats.json.dump();

  // Full again, then SIGTERM: it exits (cleanly) within the deadline, it does not hang.
  ASSERT_TRUE(Fill(filler));
  for (int i = 0; i < 400; ++i) {
    const CheckOutcome o = CtlCheck(node_.listen, "quota", "again" + std::to_string(i), 50);
    ASSERT_NE(o.status, -1) << o.error;
    if (o.status != 0) break;
  }
  EXPECT_EQ(Stop(node_, 30'000), 0) << "SIGTERM on a full disk: no clean exit within 30 s";
  node_ = {};
}

}  // namespace
}  // namespace limiter
