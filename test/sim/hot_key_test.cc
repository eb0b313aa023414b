// Hot keys over simulated time: a 3-node cluster of real Nodes, gateways of the real client
// core, one key at 30x the rate of the others. It is split, its load spreads over the nodes,
// it merges back when it cools, and no interval ever exceeds B + L*t/W for it.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "client/client_core.h"
#include "common/promise_check.h"
#include "protocol/ring.h"
#include "protocol/rules.h"
#include "sim/network.h"
#include "sim/scheduler.h"
#include "test/support/policies.h"
#include "test/unit/test_seed.h"

namespace limiter {
namespace {

using sim::SimClock;
using sim::SimNetwork;
using sim::SimScheduler;

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
  const PolicySet policies = testing::Policies(kPolicies, "hot.yaml");
  SimScheduler sched;
  SimClock clock(sched);
  SimNetwork network(sched);
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
    nodes.push_back(std::make_unique<Node>(policies, clock, o));
    network.AddNode(m, *nodes.back()).latency_us = 100;
  }
  // Each node ticks once a second, in a fixed order.
  std::function<void()> tick = [&] {
    for (auto& n : nodes) n->Tick();
    sched.After(1'000'000, tick);
  };
  sched.After(1'000'000, tick);
  std::vector<std::unique_ptr<ClientCore>> gateways;
  for (int g = 0; g < 4; ++g) {
    gateways.push_back(std::make_unique<ClientCore>(policies, members, sched, network.Gateway(),
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
        for (const HotKeys::HotKey& k : n->hot_keys().Top()) {
          if (k.key == "hot" && k.split_k == 4) split_seen_at = t;
        }
      }
    }
  }
  sched.RunFor(3'000'000);

  // It was split, early, and its sub-buckets were on at least two nodes.
  ASSERT_NE(split_seen_at, 0) << "the hot key was never split";
  EXPECT_LE(split_seen_at - start, 3'000'000);
  EXPECT_GE(network.sub_bucket_ops().size(), 2u);
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
  const auto in_hot_phase = std::count_if(hot_admitted_ms.begin(), hot_admitted_ms.end(),
                                          [&](int64_t t) { return t < hot_phase_end_ms; });
  EXPECT_GE(in_hot_phase, 8'000);
  RecordProperty("split_after_ms", std::to_string((split_seen_at - start) / 1000));
  RecordProperty("admitted_in_hot_phase", std::to_string(in_hot_phase));
  RecordProperty("worst_interval_admitted", std::to_string(worst.admitted));
  for (const auto& [node, ops] : network.sub_bucket_ops()) {
    RecordProperty("sub_bucket_ops_" + node, std::to_string(ops));
  }
}

// A split key never answers a caller with an error, and a key well within its limit is never
// denied, while its split starts, renews, merges back, splits again in a new epoch, and its
// owner restarts between two ops (losing the split its gateways still hold a view of). The
// views that go out of date get SplitChanged from the sub-bucket, refresh from the owner and
// try once more; what the split still cannot answer falls back by class (here: allowed).
//
// With slow links (200 us each way against a 2 ms deadline) a new sub-bucket's first denial
// (it starts drained) leaves less than a round trip after the wait for its first unit: the
// try after the wait gets what is left, and misses the deadline and falls back by class, or
// answers; it is not denied.
struct SplitCase {
  const char* name;
  const char* mode;     // and its options
  int64_t split_above;  // ops/s on the node: a lease op carries many requests
  int64_t merge_below;
  int64_t latency_us = 100;  // each way, gateway to node
};
class SplitNeverErrs : public ::testing::TestWithParam<SplitCase> {};

TEST_P(SplitNeverErrs, WhileTheSplitStartsRenewsMergesAndItsOwnerRestarts) {
  const std::string yaml = std::string(R"(
policies:
  - {name: api, algorithm: gcra, limit: 1000000, window: 1s, class: contract, mode: )") +
                           GetParam().mode + "}\n";
  const PolicySet policies = testing::Policies(yaml, "hot.yaml");
  SimScheduler sched;
  SimClock clock(sched);
  SimNetwork network(sched);
  const std::vector<std::string> members = {"n0:1", "n1:1", "n2:1"};
  // A key one of whose four sub-buckets lives on its own owner (the restart loses that one's
  // split record) and another elsewhere.
  const Ring ring(members);
  std::string key;
  for (int i = 0; key.empty(); ++i) {
    const std::string name = "scorching" + std::to_string(i);
    std::set<std::string> owners;
    bool on_owner = false;
    for (uint16_t s = 0; s < 4; ++s) {
      const std::string owner = ring.Owner(protocol::SubBucketRoutingKey(name, s));
      owners.insert(owner);
      on_owner |= owner == ring.Owner(name);
    }
    if (on_owner && owners.size() >= 2) key = name;
  }
  const std::string owner = ring.Owner(key);
  auto options_for = [&](const std::string& m) {
    NodeOptions o;
    o.members = members;
    o.self = m;
    o.hot.sample_every = 1;
    o.hot.split_above = GetParam().split_above;
    o.hot.split_k = 4;
    o.hot.merge_below = GetParam().merge_below;
    return o;
  };
  std::vector<std::unique_ptr<Node>> nodes;  // a restarted node's old self stays, unused
  std::map<std::string, Node*> live;
  for (const std::string& m : members) {
    nodes.push_back(std::make_unique<Node>(policies, clock, options_for(m)));
    live[m] = nodes.back().get();
    network.AddNode(m, *nodes.back()).latency_us = GetParam().latency_us;
  }
  std::function<void()> tick = [&] {
    for (auto& [m, n] : live) n->Tick();
    sched.After(1'000'000, tick);
  };
  sched.After(1'000'000, tick);
  std::vector<std::unique_ptr<ClientCore>> gateways;
  for (int g = 0; g < 4; ++g) {
    ClientCoreOptions o;
    o.seed = static_cast<uint64_t>(g + 1);
    gateways.push_back(
        std::make_unique<ClientCore>(policies, members, sched, network.Gateway(), o));
  }

  // Hot (3000/s) for 6 s: split. Cool (50/s) for 8 s: merged back. Hot again: split in a new
  // epoch; at 17 s the key's owner restarts, its gateways holding views of the old split.
  int64_t requests = 0, decided = 0, allowed = 0;
  std::string first_error;
  const int64_t start = sched.NowUs();
  auto offer = [&](int64_t from_us, int64_t to_us, int64_t rate) {
    for (int64_t t = from_us; t < to_us; t += 1'000'000 / rate) {
      sched.After(t - sched.NowUs(), [&, t] {
        ++requests;
        ClientCore& gw = *gateways[static_cast<size_t>(t / 7) % gateways.size()];
        gw.DecideAsync({"api", key}, [&](const client::Decision& d) {
          ++decided;
          allowed += d.allowed;
          if (!d.error.empty() && first_error.empty()) first_error = d.error;
        });
      });
    }
  };
  offer(start, start + 6'000'000, 3000);
  offer(start + 6'000'000, start + 14'000'000, 50);
  offer(start + 14'000'000, start + 22'000'000, 3000);
  std::set<uint32_t> epochs;
  bool merged = false;
  auto split_now = [&]() -> std::optional<uint32_t> {
    Node& n = *live[owner];
    const KeyId id = protocol::LimitId(policies.policies()[0], key, {});
    const size_t stripe = n.store().StripeOf(id);
    Store::StripeLock lock(n.store(), {&stripe, 1});
    const Store::Split* split = n.store().FindSplit(id);
    if (split == nullptr) return std::nullopt;
    return split->epoch;
  };
  for (int64_t t = start; t < start + 22'000'000; t += 100'000) {
    sched.RunUntil(t);
    if (std::optional<uint32_t> e = split_now()) {
      epochs.insert(*e);
    } else if (!epochs.empty() && t > start + 6'000'000) {
      merged = true;
    }
    if (t == start + 17'000'000) {
      ASSERT_GE(epochs.size(), 2u) << "split again before the restart";
      nodes.push_back(std::make_unique<Node>(policies, clock, options_for(owner)));
      live[owner] = nodes.back().get();
      network.AddNode(owner, *nodes.back()).latency_us = GetParam().latency_us;
    }
  }
  sched.RunFor(1'000'000);

  EXPECT_TRUE(merged) << "the key never merged back";
  EXPECT_GE(epochs.size(), 2u) << "the key was not split again";
  EXPECT_EQ(decided, requests);
  EXPECT_EQ(first_error, "");
  EXPECT_EQ(allowed, requests) << "a key far within its limit was denied";
  client::Counters total;
  for (auto& gw : gateways) {
    const client::Counters c = gw->counters();
    total.split_redirects += c.split_redirects;
    total.split_changed += c.split_changed;
    total.split_fallbacks += c.split_fallbacks;
    total.split_waits += c.split_waits;
  }
  EXPECT_GE(total.split_redirects, 2u);
  EXPECT_GE(total.split_changed, 1u) << "the restart left no view out of date";
  RecordProperty("requests", std::to_string(requests));
  RecordProperty("split_changed", std::to_string(total.split_changed));
  RecordProperty("split_fallbacks", std::to_string(total.split_fallbacks));
  RecordProperty("split_waits", std::to_string(total.split_waits));
}

INSTANTIATE_TEST_SUITE_P(Modes, SplitNeverErrs,
                         ::testing::Values(SplitCase{"strict", "strict", 1500, 400},
                                           SplitCase{"lease", "lease, lease: {size: 10}", 300, 60},
                                           SplitCase{"strict_slow_links", "strict", 1500, 400, 200},
                                           SplitCase{"lease_slow_links", "lease, lease: {size: 10}",
                                                     300, 60, 200}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace limiter
