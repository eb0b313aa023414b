// Routing under change, over simulated time with real nodes: member lists that only move
// forward (a stale node cannot take a gateway back to an old ring), an owner that cannot
// answer on the retry falls back by class, probes of a returning node spread out, and billing
// debts are paid back a few at a time.
#include "client/routing.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "test/sim/sim_cluster.h"
#include "test/support/node_harness.h"

namespace limiter {
namespace {

using client::Decision;
using client::Source;
using sim::SimCluster;

const char* kPolicies = R"(
policies:
  - {name: login, algorithm: fixed_window, limit: 5, window: 1m, class: security,
     fallback: {limit: 2, window: 1m}}
  - {name: otp, algorithm: fixed_window, limit: 5, window: 1m, class: security}
  - {name: plain, algorithm: token_bucket, limit: 100, window: 1s, class: contract,
     lease: {size: 10}}
  - {name: usage, algorithm: token_bucket, limit: 100000, window: 400d, class: billing}
)";

NodeOptions Member(std::vector<std::string> members, uint64_t generation) {
  NodeOptions o;
  o.members = std::move(members);
  o.generation = generation;
  return o;
}

// What INSPECT says the key has left on the node.
int64_t Available(Node& node, const std::string& policy, const std::string& key) {
  RequestBuilder b;
  b.Inspect(1, policy, key);
  testing::NodeHarness::Caller caller(node);
  const wire::OpReply& op = caller.One(b);
  return op.results() ? op.results()->Get(0)->remaining() : -1;
}

// A key that `a` says `owner_a` owns and `b` says `owner_b` owns.
std::string KeyOwnedBy(const Ring& a, const std::string& owner_a, const Ring& b,
                       const std::string& owner_b) {
  for (int i = 0;; ++i) {
    const std::string k = "key-" + std::to_string(i);
    if (a.Owner(k) == owner_a && b.Owner(k) == owner_b) return k;
  }
}

TEST(Routing, ANewerMemberListFromANodeIsAdopted) {
  SimCluster c(kPolicies);
  c.AddNode("n0:1", Member({"n0:1", "n1:1"}, 7));
  c.AddNode("n1:1", Member({"n0:1", "n1:1"}, 7));
  ClientCore& g = c.AddGateway({"n0:1"});  // started with a partial list, generation 0
  const Ring full({"n0:1", "n1:1"});
  const std::string key = KeyOwnedBy(full, "n1:1", full, "n1:1");
  const Decision d = c.Decide(g, {"login", key});
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.source, Source::kStore);  // redirected to the owner the node named
  c.sched().RunFor(1000);               // the ring is built off the I/O thread
  EXPECT_EQ(g.ring()->version(), full.version());
  EXPECT_EQ(g.generation(), 7u);
  EXPECT_EQ(g.counters().rings_adopted, 1u);
  EXPECT_EQ(g.counters().wrong_owner, 1u);
  EXPECT_EQ(c.Decide(g, {"login", key}).source, Source::kStore);
  EXPECT_EQ(g.counters().wrong_owner, 1u);  // straight to n1 now
}

// A scheduler that runs nothing by itself: what was offloaded waits until the test runs it.
class HeldScheduler final : public Scheduler {
 public:
  int64_t NowUs() const override { return 0; }
  void Post(std::function<void()>) override {}
  uint64_t After(int64_t, std::function<void()>) override { return 0; }
  void Cancel(uint64_t) override {}
  void Offload(std::function<void()> fn) override { offloaded.push_back(std::move(fn)); }
  std::vector<std::function<void()>> offloaded;
};

TEST(Routing, ANewRingIsBuiltOffTheSchedulersThread) {
  HeldScheduler s;
  Routing routing({"n0:1"}, 1, s, {}, 1);
  EXPECT_TRUE(routing.Offer({"n0:1", "n1:1"}, 2));
  // Building 2^18 slots waits for the offloaded task; decisions meanwhile use the old ring.
  EXPECT_EQ(routing.membership()->generation, 1u);
  EXPECT_EQ(routing.OwnerOf("any"), "n0:1");
  ASSERT_EQ(s.offloaded.size(), 1u);
  EXPECT_FALSE(routing.Offer({"n0:1", "n1:1"}, 2));  // being built already
  EXPECT_FALSE(routing.Offer({"n0:1", "n2:1"}, 1));  // older
  s.offloaded.front()();
  EXPECT_EQ(routing.membership()->generation, 2u);
  EXPECT_EQ(routing.membership()->ring->version(), Ring({"n0:1", "n1:1"}).version());
  EXPECT_EQ(routing.adopted(), 1u);
  // The same list again, newer: only its generation moves, nothing to build.
  EXPECT_TRUE(routing.Offer({"n1:1", "n0:1"}, 3));
  EXPECT_EQ(s.offloaded.size(), 1u);
  EXPECT_EQ(routing.membership()->generation, 3u);
}

TEST(Routing, AStaleNodeCannotTakeTheRingBack) {
  SimCluster c(kPolicies);
  c.AddNode("n0:1", Member({"n0:1", "n2:1"}, 3));  // an old list: n2 has left since
  c.AddNode("n1:1", Member({"n0:1", "n1:1"}, 5));
  ClientCoreOptions o;
  o.generation = 5;
  ClientCore& g = c.AddGateway({"n0:1", "n1:1"}, o);
  const Ring ours({"n0:1", "n1:1"});
  const std::string key = KeyOwnedBy(ours, "n0:1", Ring({"n0:1", "n2:1"}), "n2:1");
  for (int i = 0; i < 5; ++i) {
    const Decision d = c.Decide(g, {"login", key});
    EXPECT_EQ(d.source, Source::kFallback);  // the owner cannot answer: the class decides
    c.sched().RunFor(1000);
    EXPECT_EQ(g.ring()->version(), ours.version()) << "adopted a stale list";
    EXPECT_EQ(g.generation(), 5u);
  }
  EXPECT_EQ(c.network().sent("login"), 5u);  // never sent on to n2
  EXPECT_EQ(g.counters().rings_adopted, 0u);
}

TEST(Routing, AnEqualGenerationIsFollowedOnceButNotAdopted) {
  SimCluster c(kPolicies);
  c.AddNode("n0:1", Member({"n0:1", "n1:1"}, 0));
  c.AddNode("n1:1", Member({"n0:1", "n1:1"}, 0));
  ClientCore& g = c.AddGateway({"n0:1"});
  const Ring full({"n0:1", "n1:1"});
  const std::string key = KeyOwnedBy(full, "n1:1", full, "n1:1");
  EXPECT_EQ(c.Decide(g, {"login", key}).source, Source::kStore);
  c.sched().RunFor(1000);
  EXPECT_EQ(g.ring()->version(), Ring({"n0:1"}).version());
  EXPECT_EQ(g.counters().rings_adopted, 0u);
}

TEST(Routing, AWrongOwnerOnTheRetryFallsBackByClass) {
  // Mid-change: n0 says n1 owns the key, and n1 (with another list of the same generation)
  // says n2 does. The decision follows its class's fallback instead of being denied.
  SimCluster c(kPolicies);
  c.AddNode("n0:1", Member({"n0:1", "n1:1"}, 1));
  c.AddNode("n1:1", Member({"n1:1", "n2:1"}, 1));
  ClientCore& g = c.AddGateway({"n0:1"});
  const std::string key =
      KeyOwnedBy(Ring({"n0:1", "n1:1"}), "n1:1", Ring({"n1:1", "n2:1"}), "n2:1");
  const Decision contract = c.Decide(g, {"plain", key});
  EXPECT_TRUE(contract.allowed);
  EXPECT_EQ(contract.source, Source::kFallback);
  EXPECT_TRUE(contract.error.empty()) << contract.error;
  const Decision login = c.Decide(g, {"login", key});
  EXPECT_TRUE(login.allowed);  // its strict local limit: 2 per minute
  EXPECT_EQ(login.source, Source::kFallback);
  const Decision otp = c.Decide(g, {"otp", key});
  EXPECT_FALSE(otp.allowed);  // no local limit: deny while no owner answers
  EXPECT_EQ(otp.source, Source::kFallback);
  EXPECT_GE(g.counters().fallback_by_class[0], 2u);
  EXPECT_GE(g.counters().fallback_by_class[1], 1u);
}

TEST(Routing, AnOwnerThatDoesNotKnowThePolicyFallsBackByClass) {
  // A policy file rolling out: the node has not got `plain` yet.
  SimCluster c(kPolicies);
  c.AddNodeWithPolicies(R"(
policies:
  - {name: login, algorithm: fixed_window, limit: 5, window: 1m, class: security}
)",
                        "n0:1");
  ClientCore& g = c.AddGateway({"n0:1"});
  const Decision d = c.Decide(g, {"plain", "k"});
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.source, Source::kFallback);
  EXPECT_TRUE(d.error.empty()) << d.error;
}

TEST(Routing, ProbesOfAReturningNodeAreSpreadOut) {
  // Twenty gateways see the node refuse at the same moment; their first probes (after
  // 100 ms +-50%) must not all come at once.
  SimCluster c(kPolicies);
  c.AddNode("n0:1");
  c.network().endpoint("n0:1").refuses = true;
  std::vector<ClientCore*> gateways;
  for (int i = 0; i < 20; ++i) gateways.push_back(&c.AddGateway({"n0:1"}));
  // All refused at the same instant: all marked down together.
  const int64_t start = c.sched().NowUs();
  int answered = 0;
  for (ClientCore* g : gateways) {
    g->DecideAsync({"login", "k"}, [&](Decision d) { answered += d.source == Source::kFallback; });
  }
  std::vector<int64_t> probes;
  c.network().on_send = [&](int64_t now, const std::string&, const OpSpec& op) {
    if (op.kind == OpKind::kStats) probes.push_back(now - start);
  };
  c.sched().RunFor(149'999);  // a second probe comes 100 ms after the first at the soonest
  EXPECT_EQ(answered, 20);
  ASSERT_EQ(probes.size(), 20u);
  const std::set<int64_t> distinct(probes.begin(), probes.end());
  EXPECT_GE(distinct.size(), 15u) << "gateways probe together";
  for (int64_t t : probes) {
    EXPECT_GE(t, 50'000);
    EXPECT_LT(t, 150'000);
  }
}

TEST(Routing, BillingDebtsArePaidBackAFewAtATime) {
  SimCluster c(kPolicies);
  Node& node = c.AddNode("n0:1");
  c.network().endpoint("n0:1").refuses = true;
  ClientCoreOptions o;
  o.reconcile_in_flight = 4;
  ClientCore& g = c.AddGateway({"n0:1"}, o);
  for (int i = 0; i < 200; ++i) {
    EXPECT_TRUE(c.Decide(g, {"usage", "acct-" + std::to_string(i), "", "", 3}).allowed);
  }
  c.network().endpoint("n0:1").refuses = false;
  uint64_t leases = 0;
  c.network().on_send = [&](int64_t, const std::string&, const OpSpec& op) {
    leases += op.kind == OpKind::kLease;
  };
  c.sched().RunFor(3'000'000);  // probed back, then the debts are leased
  EXPECT_EQ(leases, 200u);
  EXPECT_LE(c.network().max_in_flight("n0:1"), 4);
  EXPECT_EQ(g.counters().nodes_down, 0u);
  EXPECT_EQ(g.counters().deadline_misses, 0u);
  // Every debt was paid: each account has 3 units fewer than a fresh one.
  for (int i : {0, 7, 199}) {
    EXPECT_EQ(Available(node, "usage", "acct-" + std::to_string(i)), 100'000 - 3) << i;
  }
}

}  // namespace
}  // namespace limiter
