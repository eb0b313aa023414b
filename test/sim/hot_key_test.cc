// Hot keys over simulated time: a 3-node cluster of real Nodes, gateways of the real client
// core, one key at 30x the rate of the others. It is split, its load spreads over the nodes,
// it merges back when it cools, and no interval ever exceeds B + L*t/W for it.
#include <gtest/gtest.h>

#include <random>

#include "client/client_core.h"
#include "common/promise_check.h"
#include "common/policy_file.h"
#include "test/sim/sim.h"
#include "test/unit/test_seed.h"

namespace limiter {
namespace {

using sim::SimClock;
using sim::SimScheduler;
using sim::SimTransport;

// CHECK per request (strict), so the node sees every request and the key gets hot.
const char* kPolicies = R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 1000, window: 1s, class: contract,
     mode: strict}
)";

TEST(HotKeys, AHotKeySplitsSpreadsOverTheNodesAndMergesBackWithinItsPromise) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  Result<PolicySet> policies = ParsePolicies(kPolicies, "hot.yaml");
  ASSERT_TRUE(policies.ok()) << policies.error();
  SimScheduler sched;
  SimClock clock(sched);
  SimTransport transport(sched);
  const std::vector<std::string> members = {"n0:1", "n1:1", "n2:1"};
  std::vector<std::unique_ptr<Node>> nodes;
  for (const std::string& m : members) {
    NodeOptions o;
    o.members = members;
    o.self = m;
    o.hot.sample_every = 1;
    o.hot.split_above = 1500;  // ops/s
    o.hot.split_k = 4;
    o.hot.merge_below = 400;
    nodes.push_back(std::make_unique<Node>(*policies, clock, o));
    transport.AddNode(m, nodes.back().get(), 100);
  }
  // Each node ticks once a second, in a fixed order.
  std::function<void()> tick = [&] {
    for (auto& n : nodes) n->Tick();
    sched.After(1'000'000, tick);
  };
  sched.After(1'000'000, tick);
  std::vector<std::unique_ptr<ClientCore>> gateways;
  for (int g = 0; g < 4; ++g) {
    gateways.push_back(std::make_unique<ClientCore>(*policies, members, sched, transport,
                                                    ClientCoreOptions{}));
  }

  // 10 s with the hot key at 3000/s (30x the ten others at 100/s), then 12 s at 50/s.
  std::vector<int64_t> hot_admitted_ms;
  int64_t split_seen_at = 0, requests = 0;
  const int64_t start = sched.NowUs();
  auto offer = [&](const std::string& key, int64_t from_us, int64_t to_us, int64_t rate) {
    for (int64_t t = from_us; t < to_us; t += 1'000'000 / rate) {
      sched.After(t - sched.NowUs(), [&, key] {
        ++requests;
        ClientCore& gw = *gateways[std::uniform_int_distribution<size_t>(0, 3)(rng)];
        gw.DecideAsync({"api", key}, [&, key](client::Decision d) {
          ASSERT_TRUE(d.error.empty()) << d.error;
          if (key == "hot" && d.allowed) hot_admitted_ms.push_back(sched.NowUs() / 1000);
        });
      });
    }
  };
  offer("hot", start, start + 10'000'000, 3000);
  offer("hot", start + 10'000'000, start + 22'000'000, 50);
  for (int k = 0; k < 10; ++k) offer("key" + std::to_string(k), start, start + 22'000'000, 100);
  for (int64_t t = start; t < start + 22'000'000; t += 100'000) {
    sched.RunUntil(t);
    if (!split_seen_at) {
      for (auto& n : nodes) {
        for (const Node::HotKey& k : n->HotKeys()) {
          if (k.key == "hot" && k.split_k == 4) split_seen_at = t;
        }
      }
    }
  }
  sched.RunFor(3'000'000);

  // It was split, early, and its sub-buckets were on at least two nodes.
  ASSERT_NE(split_seen_at, 0) << "the hot key was never split";
  EXPECT_LE(split_seen_at - start, 3'000'000);
  EXPECT_GE(transport.sub_bucket_ops().size(), 2u);
  uint64_t redirects = 0;
  for (auto& gw : gateways) redirects += gw->counters().split_redirects;
  EXPECT_GE(redirects, 1u);
  // It merged back once cool: no split is left, and the key is served by its owner again.
  for (auto& n : nodes) EXPECT_FALSE(n->store().has_splits());
  // Through the split and the merge, no interval admitted more than B + L*t/W.
  ASSERT_GT(hot_admitted_ms.size(), 1000u);
  const WorstWindow worst = FindWorstWindow(UnitAdmissionsAtMs(hot_admitted_ms),
                                           {1000, 1'000'000, 1000, /*resolution_us=*/0});
  EXPECT_FALSE(worst.over) << worst.admitted << " in " << worst.interval_us << " us";
  // And the split kept the key useful: over its 10 hot seconds it got at least 80% of L.
  const int64_t hot_phase_end_ms = (start + 10'000'000) / 1000;
  const auto in_hot_phase =
      std::count_if(hot_admitted_ms.begin(), hot_admitted_ms.end(),
                    [&](int64_t t) { return t < hot_phase_end_ms; });
  EXPECT_GE(in_hot_phase, 8'000);
  RecordProperty("split_after_ms", std::to_string((split_seen_at - start) / 1000));
  RecordProperty("admitted_in_hot_phase", std::to_string(in_hot_phase));
  RecordProperty("worst_interval_admitted", std::to_string(worst.admitted));
  for (const auto& [node, ops] : transport.sub_bucket_ops()) {
    RecordProperty("sub_bucket_ops_" + node, std::to_string(ops));
  }
}

}  // namespace
}  // namespace limiter
