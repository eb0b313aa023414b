// Peers (server/peers.h), in this process on a node with a manual clock, against real
// limiterd peers on loopback: a link to a peer not talked to for the idle time is closed at
// the next exchange with another peer (the peer sees its connection go, long before its own
// idle timeout would close it), a link in use stays, and a forgotten peer is reached again on
// a new link.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/policy_file.h"
#include "server/node.h"
#include "server/peers.h"
#include "test/integration/admin_page.h"
#include "test/integration/node_process.h"

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
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       std::chrono::steady_clock::now() < until;) {
    open = AdminMetric(node.admin, "limiter_connections_open");
    if (open == want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return open;
}

TEST(PeersLinks, APeerIdleForTheIdleTimeIsClosedAtTheNextExchangeAndReachedAgainAfter) {
  const std::string policies = testing::WriteTempFile("peers_links_policies.yaml", kPolicies);
  // The peers close idle connections only after an hour: whatever closes one here is Peers.
  const std::string config = testing::WriteTempFile(
      "peers_links_node.yaml", "policies: " + policies + "\nthreads: 1\nidle_timeout: 1h\n");
  RunningNode b = StartNode({"--config", config});
  RunningNode c = StartNode({"--config", config});
  ASSERT_FALSE(b.listen.empty());
  ASSERT_FALSE(c.listen.empty());

  Result<PolicySet> parsed = ParsePolicies(kPolicies, "peers_links.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  ManualClock clock(1'000);
  NodeOptions o;
  o.name = "a";
  o.self = "127.0.0.1:1";
  Node a(*parsed, clock, o);
  Result<std::unique_ptr<Peers>> made = Peers::Make(a, TlsOptions{}, 5'000, kIdleMs);
  ASSERT_TRUE(made.ok()) << made.error();
  Peers& peers = **made;

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

}  // namespace
}  // namespace limiter
