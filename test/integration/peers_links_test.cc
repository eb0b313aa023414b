// Peers (server/peers.h), in this process on a node with a manual clock, against real
// limiterd peers on loopback: a link to a peer not talked to for the idle time is closed at
// the next exchange with another peer (the peer sees its connection go, long before its own
// idle timeout would close it), a link in use stays, a forgotten peer is reached again on a
// new link, and links dropped under threads still using them lose no exchange.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "server/node.h"
#include "server/peers.h"
#include "test/integration/admin_page.h"
#include "test/integration/node_process.h"
#include "test/support/policies.h"
#include "test/support/wait.h"

namespace limiter {
namespace {

using testing::AdminMetric;
using testing::RunningNode;
using testing::StartNode;

const char* kPolicies = R"(
policies:
  - {name: api, algorithm: gcra, limit: 100, window: 1m, burst: 20, class: contract}
)";

constexpr int64_t kIdleMs = 60'000;

// Waits (up to 20 s) until the node's open connections read `want`; the last reading.
int64_t AwaitConnections(const RunningNode& node, int64_t want) {
  int64_t open = -1;
  testing::WaitUntil([&] {
    open = AdminMetric(node.admin, "limiter_connections_open");
    return open == want;
  });
  return open;
}

class PeersLinks : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string policies = testing::WriteTempFile("peers_links_policies.yaml", kPolicies);
    // The peers close idle connections only after an hour: whatever closes one here is Peers.
    const std::string config = testing::WriteTempFile(
        "peers_links_node.yaml", "policies: " + policies + "\nthreads: 1\nidle_timeout: 1h\n");
    b = StartNode({"--config", config});
    c = StartNode({"--config", config});
    ASSERT_FALSE(b.listen.empty());
    ASSERT_FALSE(c.listen.empty());

    policies_ = testing::Policies(kPolicies, "peers_links.yaml");
    NodeOptions o;
    o.name = "a";
    o.self = "127.0.0.1:1";
    node_ = std::make_unique<Node>(policies_, clock, o);
    Result<std::unique_ptr<Peers>> made = Peers::Make(*node_, TlsOptions{}, 5'000, kIdleMs);
    ASSERT_TRUE(made.ok()) << made.error();
    peers_ = std::move(made).value();
  }

  RunningNode b, c;          // the peers
  ManualClock clock{1'000};  // node a's
  PolicySet policies_;
  std::unique_ptr<Node> node_;  // a: the node whose Peers these are
  std::unique_ptr<Peers> peers_;
};

TEST_F(PeersLinks, APeerIdleForTheIdleTimeIsClosedAtTheNextExchangeAndReachedAgainAfter) {
  Peers& peers = *peers_;
  ASSERT_TRUE(peers.AskMembers(b.listen).ok());
  EXPECT_EQ(AwaitConnections(b, 1), 1);

  // Half the idle time on: talking to c keeps b's link (not idle long enough).
  clock.Advance(kIdleMs / 2);
  ASSERT_TRUE(peers.AskMembers(c.listen).ok());
  EXPECT_EQ(peers.links(), 2u);
  EXPECT_EQ(AwaitConnections(c, 1), 1);
  EXPECT_EQ(AdminMetric(b.admin, "limiter_connections_open"), 1);

  // b idle for the whole idle time now, c for half: the next exchange with c closes b's link.
  clock.Advance(kIdleMs / 2);
  ASSERT_TRUE(peers.AskMembers(c.listen).ok());
  EXPECT_EQ(peers.links(), 1u);
  EXPECT_EQ(AwaitConnections(b, 0), 0) << "b still has the idle link's connection open";
  EXPECT_EQ(AdminMetric(c.admin, "limiter_connections_open"), 1);

  // b forgotten is b reachable: a new link, one connection again.
  ASSERT_TRUE(peers.AskMembers(b.listen).ok());
  EXPECT_EQ(peers.links(), 2u);
  EXPECT_EQ(AwaitConnections(b, 1), 1);
  EXPECT_EQ(AdminMetric(b.admin, "limiter_connections_total"), 2);
}

// Four threads talk to b and c at once, each moving the clock past the idle time every tenth
// exchange: links are dropped while other threads are in the middle of exchanges on them.
// Every exchange is answered, and once all is quiet each peer holds one connection from a at
// most (a dropped link's connection closes when its last user lets go).
TEST_F(PeersLinks, LinksDroppedWhileOtherThreadsUseThemLoseNoExchange) {
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        if (i % 10 == 0) clock.Advance(kIdleMs);
        const std::string& peer = (t + i) % 2 == 0 ? b.listen : c.listen;
        Result<std::pair<std::vector<std::string>, uint64_t>> r = peers_->AskMembers(peer);
        if (!r.ok()) {
          ADD_FAILURE() << peer << ": " << r.error();
          failed.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_LE(peers_->links(), 2u);
  for (const RunningNode* peer : {&b, &c}) {
    int64_t open = -1;
    testing::WaitUntil([&] {
      open = AdminMetric(peer->admin, "limiter_connections_open");
      return open >= 0 && open <= 1;
    });
    EXPECT_GE(open, 0) << peer->listen;
    EXPECT_LE(open, 1) << peer->listen << " keeps connections of dropped links";
    // How often its link was dropped and made again (which drops happen is the threads' race).
    std::cout << peer->listen << ": " << AdminMetric(peer->admin, "limiter_connections_total")
              << " connections from a over the run\n";
  }
}

}  // namespace
}  // namespace limiter
