// The billing journal with real processes on loopback: a gateway whose owner node is down
// admits billing requests (they fail open and are owed), is killed with SIGKILL, and, started
// again with the same journal once a node is up (at another address: the ring routes the
// debts there now), pays every admitted unit to it. A second gateway on a journal in use is
// refused. No timing assertions: each step waits, bounded, for what it needs.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "limiter/client/client.h"
#include "test/integration/node_process.h"
#include "test/support/build_paths.h"
#include "test/support/ctl_runner.h"

namespace limiter {
namespace {

const char* kPolicies = R"(
policies:
  - {name: usage, algorithm: token_bucket, limit: 100000, window: 400d, class: billing}
)";
constexpr int64_t kLimit = 100'000;

std::unique_ptr<Subprocess> StartGateway(std::vector<std::string> args) {
  args.insert(args.begin(), testing::BillingGatewayBin());
  Result<std::unique_ptr<Subprocess>> p = Subprocess::Start(args);
  EXPECT_TRUE(p.ok()) << p.error();
  return p.ok() ? std::move(p).value() : nullptr;
}

TEST(BillingJournalProcess, AGatewayKilledWithSigkillPaysWhatItAdmittedOnceRestarted) {
  const std::string policies = testing::WriteTempFile("billing_policies.yaml", kPolicies);
  const std::string journal = testing::WriteTempFile("billing.journal", "");
  std::filesystem::remove(journal);
  const std::string nowhere = "127.0.0.1:" + std::to_string(testing::PickFreePort());
  constexpr int kKeys = 3, kEach = 10, kCost = 2;

  // 1. The owner is down: every request is admitted by the fallback and owed.
  std::unique_ptr<Subprocess> first =
      StartGateway({"--policies", policies, "--members", nowhere, "--journal", journal, "--policy",
                    "usage", "--keys", std::to_string(kKeys), "--each", std::to_string(kEach),
                    "--cost", std::to_string(kCost)});
  ASSERT_NE(first, nullptr);
  Result<std::string> line = first->ReadLine(60'000);
  ASSERT_TRUE(line.ok()) << line.error();
  ASSERT_EQ(*line, "admitted " + std::to_string(kKeys * kEach * kCost));

  // A second gateway on the same journal is refused while the first holds it.
  client::Options o;
  o.members = {nowhere};
  o.policy_file = policies;
  o.billing_journal = journal;
  Result<std::unique_ptr<client::Client>> held = client::Client::Create(o);
  EXPECT_FALSE(held.ok());
  EXPECT_NE(held.error().find("billing journal " + journal + ": in use by another gateway (pid " +
                              std::to_string(first->pid()) + ")"),
            std::string::npos)
      << held.error();

  // 2. Killed: nothing runs after the last decision (no destructor, no sync).
  first->Signal(SIGKILL);
  ASSERT_EQ(first->Wait(20'000), 128 + SIGKILL);

  // 3. A node comes up, at another address; the gateway starts again on the same journal.
  testing::RunningNode node = testing::StartNode({"--policies", policies});
  ASSERT_FALSE(node.listen.empty());
  std::unique_ptr<Subprocess> second = StartGateway(
      {"--policies", policies, "--members", node.listen, "--journal", journal, "--until-paid"});
  ASSERT_NE(second, nullptr);
  line = second->ReadLine(60'000);
  ASSERT_TRUE(line.ok()) << line.error();
  EXPECT_EQ(*line, "admitted 0");
  line = second->ReadLine(90'000);
  ASSERT_TRUE(line.ok()) << line.error();
  EXPECT_EQ(*line, "paid " + std::to_string(kKeys * kEach * kCost) + " dropped 0");
  EXPECT_EQ(second->Wait(20'000), 0);

  // 4. The node was charged every admitted unit, on each key (its refill over 400 days is a
  // small fraction of one unit during the test).
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = "acct-" + std::to_string(k);
    const testing::CtlOutcome out =
        testing::RunCtl({"inspect", "--server", node.listen, "--policy", "usage", key, "--json"});
    ASSERT_EQ(out.status, 0) << out.err;
    const nlohmann::json j = nlohmann::json::parse(out.out);
    EXPECT_EQ(j["remaining"], kLimit - kEach * kCost) << key << ": " << out.out;
  }

  // 5. Paid off: a third start replays nothing.
  std::unique_ptr<Subprocess> third = StartGateway(
      {"--policies", policies, "--members", node.listen, "--journal", journal, "--until-paid"});
  ASSERT_NE(third, nullptr);
  line = third->ReadLine(60'000);
  ASSERT_TRUE(line.ok()) << line.error();
  line = third->ReadLine(60'000);
  ASSERT_TRUE(line.ok()) << line.error();
  EXPECT_EQ(*line, "paid 0 dropped 0");
  EXPECT_EQ(third->Wait(20'000), 0);
  for (const char* suffix : {"", ".lock"}) std::filesystem::remove(journal + suffix);
  std::filesystem::remove(policies);
}

// A journal that is not one: the gateway refuses to start, naming the file and what is
// wrong, and leaves the file as it was.
TEST(BillingJournalProcess, AMalformedJournalStopsTheGatewayWithAClearError) {
  const std::string policies = testing::WriteTempFile("billing_policies.yaml", kPolicies);
  const std::string journal = testing::WriteTempFile("bad.journal", "not a journal at all\n");
  client::Options o;
  o.members = {"127.0.0.1:1"};
  o.policy_file = policies;
  o.billing_journal = journal;
  Result<std::unique_ptr<client::Client>> created = client::Client::Create(o);
  EXPECT_FALSE(created.ok());
  EXPECT_EQ(created.error(), "billing journal " + journal +
                                 ": not a billing journal (it does not start with \"LIMBJRNL\")");
  for (const std::string& path : {journal, journal + ".lock", policies}) {
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace limiter
