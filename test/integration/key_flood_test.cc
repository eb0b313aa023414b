// A flood of new keys on one policy against a real limiterd: the other policies' new keys
// are still admitted (each policy has its reserve of the node's key units, store.h), and the
// flooded policy's refusals show in STATS and /metrics.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "protocol/node_connection.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"
#include "test/integration/admin_page.h"
#include "test/integration/node_process.h"
#include "test/unit/test_seed.h"

namespace limiter {
namespace {

using testing::RunningNode;
using testing::StartNode;
using testing::WriteTempFile;

// Keys live for an hour: one check moves a GCRA key's arrival time an hour ahead, a fixed
// window lasts an hour, so nothing expires during the test.
const char* kPolicies = R"(
policies:
  - {name: cheap, algorithm: gcra, limit: 1, window: 1h, class: billing}
  - {name: login, algorithm: fixed_window, limit: 5, window: 1h, class: security}
)";

constexpr int kMaxKeys = 2000;        // two policies: a reserve of 500 each, 1000 nobody's
constexpr int kFloodAdmitted = 1500;  // cheap's reserve and the unreserved half
constexpr int kFloodKeys = 20'000;
constexpr int kFloodConnections = 4;
constexpr int kPerFrame = 100;

class KeyFlood : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = StartNode({"--policies", WriteTempFile("key_flood_policies.yaml", kPolicies),
                       "--threads", "2", "--max-keys", std::to_string(kMaxKeys)});
    ASSERT_FALSE(node_.listen.empty());
  }

  std::unique_ptr<NodeConnection> Connect() {
    Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(node_.listen, 20'000);
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  int64_t Stat(const std::string& name) {
    auto c = Connect();
    if (!c) return -1;
    RequestBuilder b;
    b.Stats(1);
    EXPECT_TRUE(c->Send(b.Finish()).ok());
    Result<const wire::Reply*> r = c->Receive();
    EXPECT_TRUE(r.ok()) << r.error();
    if (!r.ok()) return -1;
    for (const wire::Stat* s : *(*r)->ops()->Get(0)->stats()) {
      if (s->name()->str() == name) return s->value();
    }
    return -1;
  }

  std::string Metrics() {
    const std::optional<std::string> page = testing::AdminGet(node_.admin, "/metrics");
    EXPECT_TRUE(page);
    return page.value_or("");
  }

  RunningNode node_;
};

// Statuses of one frame of new-key checks, counted.
struct Outcomes {
  std::atomic<int> ok{0};
  std::atomic<int> allowed{0};
  std::atomic<int> exhausted{0};
  std::atomic<int> other{0};  // any other status, or a failed round trip
};

void SendChecks(NodeConnection& c, const std::string& policy, const std::vector<std::string>& keys,
                Outcomes& out) {
  RequestBuilder b;
  for (size_t i = 0; i < keys.size(); ++i) b.Check(i, policy, keys[i]);
  if (!c.Send(b.Finish()).ok()) {
    out.other += static_cast<int>(keys.size());
    return;
  }
  Result<const wire::Reply*> r = c.Receive();
  if (!r.ok() || (*r)->ops() == nullptr || (*r)->ops()->size() != keys.size()) {
    out.other += static_cast<int>(keys.size());
    return;
  }
  for (const wire::OpReply* op : *(*r)->ops()) {
    if (op->status() == wire::Status::Ok) {
      ++out.ok;
      out.allowed += op->allowed();
    } else if (op->status() == wire::Status::KeysExhausted) {
      ++out.exhausted;
    } else {
      ++out.other;
    }
  }
}

TEST_F(KeyFlood, AFloodOfNewKeysOnOnePolicyLeavesAnotherPolicysNewKeysAdmitted) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  Outcomes flood, login;
  std::atomic<int> flooders_done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kFloodConnections; ++t) {
    threads.emplace_back([&, t] {
      auto c = Connect();
      std::mt19937_64 rng(seed + static_cast<uint64_t>(t));
      std::vector<std::string> keys;
      for (int sent = 0; c && sent < kFloodKeys / kFloodConnections; sent += kPerFrame) {
        keys.clear();
        for (int i = 0; i < kPerFrame; ++i) keys.push_back(std::to_string(rng()));  // new keys
        SendChecks(*c, "cheap", keys, flood);
      }
      if (!c) flood.other += kFloodKeys / kFloodConnections;
      ++flooders_done;
    });
  }
  // Meanwhile, and after: new login keys one at a time, well within login's reserve.
  int login_keys = 0;
  auto c = Connect();
  ASSERT_TRUE(c);
  while (flooders_done.load() < kFloodConnections && login_keys < 300) {
    SendChecks(*c, "login", {"during-" + std::to_string(login_keys++)}, login);
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 50; ++i, ++login_keys) {
    SendChecks(*c, "login", {"after-" + std::to_string(i)}, login);
  }

  EXPECT_EQ(login.ok.load(), login_keys);
  EXPECT_EQ(login.allowed.load(), login_keys);
  EXPECT_EQ(login.exhausted.load(), 0);
  EXPECT_EQ(login.other.load(), 0);
  EXPECT_EQ(flood.other.load(), 0);
  EXPECT_EQ(flood.ok.load(), kFloodAdmitted);
  EXPECT_EQ(flood.allowed.load(), kFloodAdmitted);
  EXPECT_EQ(flood.exhausted.load(), kFloodKeys - kFloodAdmitted);

  EXPECT_EQ(Stat("keys.cheap"), kFloodAdmitted);
  EXPECT_EQ(Stat("key_refusals.cheap"), kFloodKeys - kFloodAdmitted);
  EXPECT_EQ(Stat("keys.login"), login_keys);
  EXPECT_EQ(Stat("key_refusals.login"), 0);
  const std::string metrics = Metrics();
  for (const std::string& line :
       {"limiter_policy_key_refusals_total{policy=\"cheap\"} " +
            std::to_string(kFloodKeys - kFloodAdmitted) + "\n",
        std::string("limiter_policy_key_refusals_total{policy=\"login\"} 0\n"),
        "limiter_policy_keys{policy=\"cheap\"} " + std::to_string(kFloodAdmitted) + "\n",
        "limiter_policy_keys{policy=\"login\"} " + std::to_string(login_keys) + "\n",
        std::string("limiter_policy_key_reserve{policy=\"login\"} 500\n")}) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line << metrics;
  }
}

}  // namespace
}  // namespace limiter
