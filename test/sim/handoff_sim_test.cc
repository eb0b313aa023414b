// The hand-off under a ring change, in simulated time: real Nodes and gateways of the real
// ClientCore under steady load, one node leaving and coming back while gateways hold leases
// and a hot key is split, and a leaving node that dies before it hands anything over.
//
// What is measured is what the nodes charged: every unit a gateway admitted from the store or
// from a lease was charged at some owner first, so over the run each key's store and lease
// admissions must stay within B + L*T/W. With the hand-off, a ring change adds nothing to
// that; without it (the dead node), a key may get one more burst, the crash promise.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "test/sim/sim_cluster.h"

namespace limiter {
namespace {

using client::Decision;
using client::Source;
using sim::SimCluster;

const char* kPolicies = R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 40, window: 1s, burst: 40, class: contract,
     lease: {size: 4, ttl: 1s}}
  - {name: login, algorithm: token_bucket, limit: 10, window: 1m, burst: 10, class: security,
     mode: strict}
  - {name: hot, algorithm: token_bucket, limit: 400, window: 1s, burst: 400, class: contract,
     mode: strict}
)";

const std::vector<std::string> kAll = {"a:1", "b:1", "c:1"};
const std::vector<std::string> kWithoutB = {"a:1", "c:1"};

NodeOptions Member(std::vector<std::string> members, uint64_t generation) {
  NodeOptions o;
  o.members = std::move(members);
  o.generation = generation;
  o.handoff_deadline_ms = 3000;
  o.hot.split_above = 1000;  // "hot" (2000 checks/s) gets split; the others never get near
  o.hot.sample_every = 1;
  o.hot.split_valid_ms = 500;
  return o;
}

class HandoffSim : public ::testing::Test {
 protected:
  HandoffSim() : cluster_(kPolicies) {
    for (const std::string& a : kAll) cluster_.AddNode(a, Member(kAll, 1));
    for (int g = 0; g < 4; ++g) {
      ClientCoreOptions o;
      o.generation = 1;
      o.gateways = 4;
      o.deadline_us = 5000;
      gateways_.push_back(&cluster_.AddGateway(kAll, o));
    }
  }

  Node& node(const std::string& address) { return cluster_.node(address); }

  // Hands `from`'s queued jobs to the receivers at once (the network is the integration
  // tests' business); the keys it could deliver.
  int64_t RunHandoff(const std::string& from) { return cluster_.network().RunHandoffs(from); }

  // Runs the simulation to `us` after its start.
  void RunTo(int64_t us) { cluster_.sched().RunUntil(t0_ + us); }

  // Every 2 ms of simulated time, each gateway asks for one key of each policy (8 keys each,
  // one hot key), far above the rates; ticks every node once a second.
  void StartLoad(int64_t until_us) {
    t0_ = cluster_.sched().NowUs();
    until_us_ = t0_ + until_us;
    for (size_t g = 0; g < gateways_.size(); ++g) Next(g, 0);
    Tick();
  }
  void Next(size_t g, int i) {
    if (cluster_.sched().NowUs() >= until_us_) return;
    const std::string key = "k" + std::to_string(i % 8);
    Ask(g, "api", key);
    Ask(g, "login", key);
    Ask(g, "hot", "the-hot-one");
    cluster_.sched().After(2000, [this, g, i] { Next(g, i + 1); });
  }
  void Ask(size_t g, const std::string& policy, const std::string& key) {
    // The request's strings live in the closure until it is decided.
    auto p = std::make_shared<std::pair<std::string, std::string>>(policy, key);
    gateways_[g]->DecideAsync({.policy = p->first, .key = p->second}, [this, p](Decision d) {
      if (!d.allowed) return;
      (d.source == Source::kFallback ? fallbacks_ : charged_)[p->first + "/" + p->second] += 1;
    });
  }
  void Tick() {
    if (cluster_.sched().NowUs() >= until_us_) return;
    for (const std::string& a : kAll) node(a).Tick();
    cluster_.sched().After(1'000'000, [this] { Tick(); });
  }

  // The most any key was charged beyond B + L*T/W over the run of T seconds; `bursts` gets
  // the most such excess as a share of the key's B.
  int64_t WorstExcess(double seconds, double* bursts = nullptr) {
    int64_t worst = INT64_MIN;
    for (const auto& [name, admitted] : charged_) {
      const std::string policy = name.substr(0, name.find('/'));
      const Policy* p = cluster_.policies().Find(policy);
      const double bound = static_cast<double>(p->rate.burst()) +
                           static_cast<double>(p->rate.limit()) * seconds * 1000.0 /
                               static_cast<double>(p->rate.window_ms());
      worst = std::max(worst, admitted - static_cast<int64_t>(bound));
      if (bursts) {
        *bursts = std::max(*bursts, (static_cast<double>(admitted) - bound) /
                                        static_cast<double>(p->rate.burst()));
      }
      if (admitted > bound)
        std::printf("%s: %lld over %.0f\n", name.c_str(), static_cast<long long>(admitted), bound);
    }
    return worst;
  }

  SimCluster cluster_;
  std::vector<ClientCore*> gateways_;
  std::map<std::string, int64_t> charged_, fallbacks_;
  int64_t until_us_ = 0;
  int64_t t0_ = 0;  // the simulation's start
};

TEST_F(HandoffSim, ALeaveAndARejoinUnderLoadWithLeasesAndASplitKeyAddNoBurst) {
  const int64_t end_us = 6'000'000;
  StartLoad(end_us);
  RunTo(1'500'000);
  ASSERT_GT(node("a:1").store().split_count() + node("b:1").store().split_count() +
                node("c:1").store().split_count(),
            0)
      << "the hot key did not split";
  // b leaves: the others adopt the list without it, b hands everything over while the
  // gateways go on spending the leases they hold.
  ASSERT_TRUE(node("a:1").ownership().SetMembers(kWithoutB, 2).ok());
  ASSERT_TRUE(node("c:1").ownership().SetMembers(kWithoutB, 2).ok());
  node("b:1").Leave(2);
  cluster_.sched().RunFor(3'000);  // leases in flight, ops answered WrongOwner or Moving
  const int64_t moved = RunHandoff("b:1");
  EXPECT_GT(moved, 0);
  EXPECT_EQ(node("b:1").store().keys(), 0);
  RunTo(3'000'000);
  // b comes back as a new process with the join gate, and joins.
  NodeOptions again = Member(kAll, 1);
  again.join_gate = true;
  cluster_.AddNode("b:1", again);
  ASSERT_TRUE(node("b:1").ownership().Join(kWithoutB, kAll, 3).ok());
  ASSERT_TRUE(node("a:1").ownership().SetMembers(kAll, 3).ok());
  ASSERT_TRUE(node("c:1").ownership().SetMembers(kAll, 3).ok());
  cluster_.sched().RunFor(2'000);
  EXPECT_GT(RunHandoff("a:1") + RunHandoff("c:1"), 0);
  EXPECT_EQ(node("b:1").ownership().waiting_slots(), 0);
  RunTo(end_us + 100'000);
  int64_t lost = 0;
  for (const std::string& a : kAll) lost += node(a).handoff().counters().keys_lost.load();
  EXPECT_EQ(lost, 0);
  EXPECT_LE(WorstExcess(end_us / 1e6), 0) << "a ring change gave some key more than its promise";
}

TEST_F(HandoffSim, ALeavingNodeThatDiesBeforeHandingOverCostsAtMostOneBurst) {
  const int64_t end_us = 8'000'000;
  StartLoad(end_us);
  RunTo(1'500'000);
  // b announced its leave, then died: nothing arrives, the others wait out the deadline.
  ASSERT_TRUE(node("a:1").ownership().SetMembers(kWithoutB, 2).ok());
  ASSERT_TRUE(node("c:1").ownership().SetMembers(kWithoutB, 2).ok());
  cluster_.network().endpoint("b:1").refuses = true;  // its process is gone: its sends fail
  node("b:1").Leave(2);
  RunHandoff("b:1");
  RunTo(end_us + 100'000);
  EXPECT_GT(node("a:1").ownership().counters().waits_expired.load() +
                node("c:1").ownership().counters().waits_expired.load(),
            0);
  double bursts = 0;
  const int64_t worst = WorstExcess(end_us / 1e6, &bursts);
  EXPECT_GT(worst, 0) << "no key got its extra burst: the test would not see a lost hand-off";
  EXPECT_LE(bursts, 1.0) << "more than one burst per crash";
}

}  // namespace
}  // namespace limiter

namespace limiter {
namespace {

// A gateway that sent a leaving node nothing while it drained still has the old list; when
// the node's port then refuses it, it asks another member for the list and follows it.
TEST(HandoffGateway, AGatewayMeetingAClosedPortAsksAnotherMemberForTheList) {
  SimCluster cluster(kPolicies);
  cluster.AddNode("a:1", Member(kWithoutB, 2));
  cluster.AddNode("b:1", Member(kAll, 1));
  cluster.AddNode("c:1", Member(kWithoutB, 2));
  cluster.network().endpoint("b:1").refuses = true;  // b has left and exited
  ClientCoreOptions o;
  o.generation = 1;
  o.deadline_us = 5000;
  ClientCore& gateway = cluster.AddGateway(kAll, o);
  std::string key;
  const Ring old_ring(kAll);
  for (int i = 0; key.empty(); ++i) {
    if (old_ring.Owner("k" + std::to_string(i)) == "b:1") key = "k" + std::to_string(i);
  }
  const Decision first = cluster.Decide(gateway, {.policy = "login", .key = key});
  EXPECT_EQ(first.source, Source::kFallback);  // b refused: the class decided (deny)
  EXPECT_FALSE(first.allowed);
  cluster.sched().RunFor(50'000);  // the list asked for, answered, and its ring built
  EXPECT_EQ(gateway.generation(), 2u);
  const Decision then = cluster.Decide(gateway, {.policy = "login", .key = key});
  EXPECT_EQ(then.source, Source::kStore);
  EXPECT_TRUE(then.allowed);
}

}  // namespace
}  // namespace limiter
