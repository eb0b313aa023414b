// The README's rotation procedure, exactly, on a real 3-node cluster, then a rolling restart of
// every node: no key starts fresh. The gateway secret and the peer secret both rotate (two
// lines, the gateways move, one line); the key-id seed, a value of its own, does not, so
// every restarted node still takes its peers' hand-offs and finds its keys by the same ids.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "limiter/client/client.h"
#include "protocol/node_access.h"
#include "protocol/node_connection.h"
#include "test/integration/admin_page.h"
#include "test/integration/node_process.h"
#include "test/support/wait.h"

namespace limiter {
namespace {

using testing::AdminMetric;
using testing::RunningNode;
using testing::WriteTempFile;

const std::string kOld = "rotation-old-secret-0123456789abc";
const std::string kNew = "rotation-new-secret-0123456789abc";
const std::string kOldPeer = "rotation-old-peer-0123456789abcde";
const std::string kNewPeer = "rotation-new-peer-0123456789abcde";
const char* kPolicies = R"(
policies:
  - {name: login, algorithm: gcra, limit: 5, window: 1h, class: security, mode: strict}
)";

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class RotationThenRollingRestart : public ::testing::Test {
 protected:
  void SetUp() override {
    policies_ = WriteTempFile("rotation_policies.yaml", kPolicies);
    secret_ = WriteTempFile("rotation_secret", kOld + "\n");
    peer_ = WriteTempFile("rotation_peer_secret", kOldPeer + "\n");
    seed_ = WriteTempFile("rotation_key_seed", "rotation-key-seed-0123456789abcdef\n");
    gateway_secret_ = WriteTempFile("rotation_gateway_secret", kOld + "\n");
    for (int i = 0; i < 3; ++i) {
      addresses_.push_back("127.0.0.1:" + std::to_string(testing::PickFreePort()));
      members_ += (members_.empty() ? "" : ",") + addresses_.back();
    }
    for (const std::string& a : addresses_) nodes_.push_back(Start(a));
    for (const RunningNode& n : nodes_) testing::WaitReady(n);
  }

  RunningNode Start(const std::string& address) {
    RunningNode n = testing::Launch({"--listen",
                                     address,
                                     "--admin",
                                     "127.0.0.1:0",
                                     "--members",
                                     members_,
                                     "--self",
                                     address,
                                     "--policies",
                                     policies_,
                                     "--threads",
                                     "1",
                                     "--generation",
                                     "1",
                                     "--secret-file",
                                     secret_,
                                     "--peer-secret-file",
                                     peer_,
                                     "--key-seed-file",
                                     seed_,
                                     "--secret-reload-ms",
                                     "50",
                                     "--handoff-deadline-ms",
                                     "5000"});
    EXPECT_FALSE(n.listen.empty()) << address << " did not start";
    return n;
  }

  std::unique_ptr<client::Client> Gateway() {
    client::Options o;
    o.members = addresses_;
    o.members_generation = 1;
    o.policy_file = policies_;
    o.secret_file = gateway_secret_;
    o.deadline = std::chrono::milliseconds(500);
    Result<std::unique_ptr<client::Client>> created = client::Client::Create(o);
    EXPECT_TRUE(created.ok()) << created.error();
    return created.ok() ? std::move(created).value() : nullptr;
  }

  // Whether a connection to `address` proving `secret` as a gateway (or, with `peer`, the
  // peer secret) is accepted.
  static bool Opens(const std::string& address, const std::string& secret, bool peer) {
    NodeAccess a;
    if (peer) {
      a.peer_secret = secret;
      a.peer_name = "127.0.0.1:1";
    } else {
      a.secret = secret;
    }
    return NodeConnection::Connect(address, 2000, a).ok();
  }
  // Waits (bounded) until every node has re-read its secret files: `accepted` opens a
  // connection as a gateway and `peer_accepted` as a peer, and `refused` (if any) no longer.
  void Settle(const std::string& accepted, const std::string& peer_accepted,
              const std::string& refused) {
    for (const std::string& a : addresses_) {
      testing::WaitUntil([&] {
        return Opens(a, accepted, false) && Opens(a, peer_accepted, true) &&
               (refused.empty() || !Opens(a, refused, false));
      });
      EXPECT_TRUE(Opens(a, accepted, false)) << a;
      EXPECT_TRUE(Opens(a, peer_accepted, true)) << a;
      if (!refused.empty()) {
        EXPECT_FALSE(Opens(a, refused, false)) << a;
      }
    }
  }

  std::string policies_, secret_, peer_, seed_, gateway_secret_, members_;
  std::vector<std::string> addresses_;
  std::vector<RunningNode> nodes_;
};

TEST_F(RotationThenRollingRestart, NoKeyStartsFresh) {
  std::vector<std::string> keys;
  for (int i = 0; i < 30; ++i) keys.push_back("user-" + std::to_string(i));
  {
    auto gateway = Gateway();
    ASSERT_NE(gateway, nullptr);
    for (const std::string& k : keys) {
      int allowed = 0;
      for (int i = 0; i < 5; ++i) allowed += gateway->Decide({"login", k}).allowed;
      ASSERT_EQ(allowed, 5) << k;
      ASSERT_FALSE(gateway->Decide({"login", k}).allowed) << k;
    }
  }
  // (1) The nodes' files hold OLD and NEW; (2) the gateways move to NEW; (3) the nodes'
  // files hold NEW alone. The peer secret rotates the same way.
  Write(secret_, kOld + "\n" + kNew + "\n");
  Write(peer_, kOldPeer + "\n" + kNewPeer + "\n");
  Settle(kNew, kNewPeer, "");
  Write(gateway_secret_, kNew + "\n");
  auto gateway = Gateway();
  ASSERT_NE(gateway, nullptr);
  EXPECT_FALSE(gateway->Decide({"login", keys[0]}).allowed);
  Write(secret_, kNew + "\n");
  Write(peer_, kNewPeer + "\n");
  Settle(kNew, kNewPeer, kOld);
  // A rolling restart: each node leaves (handing its keys to the others over the peer
  // secret), starts again and is handed the keys it owns.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].process->Signal(SIGTERM);
    const std::optional<int> status = nodes_[i].process->Wait(30'000);
    ASSERT_TRUE(status.has_value()) << addresses_[i] << " did not exit";
    EXPECT_EQ(*status, 0);
    nodes_[i] = Start(addresses_[i]);
    testing::WaitReady(nodes_[i]);
  }
  for (const RunningNode& n : nodes_) {
    EXPECT_EQ(AdminMetric(n.admin, "limiter_handoff_batches_refused_total"), 0) << n.listen;
    EXPECT_EQ(AdminMetric(n.admin, "limiter_handoff_keys_lost_total"), 0) << n.listen;
  }
  int fresh = 0;
  for (const std::string& k : keys) fresh += gateway->Decide({"login", k}).allowed;
  EXPECT_EQ(fresh, 0) << "keys that started fresh after the rotation and the restarts";
}

}  // namespace
}  // namespace limiter
