// Regions on real Nodes in one process (server/region_shares.h): three regions of one node
// each, on manual clocks, their demand reports carried between them by the test at every
// rebalance tick. The worked example's shares, a demand that moves, the overshoot across
// regions, a region cut off, a region never heard from, and reports that are refused.
// REGIONS_DEBUG=1 prints every region's share, pending raise and demand second by second.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "protocol/key_id.h"
#include "protocol/request_builder.h"
#include "protocol/rules.h"
#include "protocol/wire.h"
#include "server/node.h"
#include "test/support/node_harness.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

// L = 120 per second; the burst is kept small so that the admissions follow the shares.
const char* kPolicies = R"(
policies:
  - {name: partner, algorithm: gcra, limit: 120, window: 1s, burst: 12, class: contract,
     scope: global}
  - {name: local, algorithm: token_bucket, limit: 5, window: 1s, class: contract}
)";

class Regions : public ::testing::Test {
 protected:
  Regions() {
    for (const char* name : {"ap", "eu", "us"}) Add(name);
  }

  static std::string Address(const std::string& region) { return region + "-node:1"; }

  void Add(const std::string& name) {
    NodeOptions o;
    o.name = name;
    o.regions.region = name;
    o.regions.rebalance_interval_ms = 2000;
    for (const char* other : {"ap", "eu", "us"}) {
      if (other != name) o.regions.others.push_back({other, {Address(other)}, ""});
    }
    EXPECT_TRUE(RegionShares::Check(policies_, o.regions).ok());
    const int64_t clock_ms = 1'000'000 + 7'777 * static_cast<int64_t>(regions_.size() + 1);
    regions_[name] = std::make_unique<testing::NodeHarness>(policies_, o, clock_ms);
  }
  Node& node(const std::string& name) { return regions_.at(name)->node(); }

  const wire::Reply& Send(const std::string& to, std::span<const uint8_t> body) {
    return regions_.at(to)->Send(body);
  }
  // n checks of `key` in `region`: how many were admitted.
  int Admitted(const std::string& region, const std::string& key, int n) {
    int admitted = 0;
    RequestBuilder b;
    for (int i = 0; i < n; ++i) {
      b.Check(1, "partner", key);
      const wire::Reply& r = Send(region, b.Finish());
      b.Clear();
      EXPECT_EQ(r.ops()->Get(0)->status(), wire::Status::Ok) << r.ops()->Get(0)->error()->str();
      admitted += r.ops()->Get(0)->allowed();
    }
    return admitted;
  }
  // One rebalance tick: every region measures, then its reports reach the other regions
  // unless one of the two is `cut` (the reports are dropped).
  void Tick(const std::set<std::string>& cut = {}) {
    for (auto& [name, r] : regions_) r->node().regions()->Measure(r->clock().NowMs());
    for (auto& [name, r] : regions_) {
      auto reports = r->node().regions()->Reports(Address(name), r->node().policy_table().digest(),
                                                  KeyIdSeedDigest());
      for (const auto& [region, to, body] : reports) {
        if (one_way_.count({name, region})) {  // lost on the way, and the sender knows it
          r->node().regions()->NoteSent(region, false, r->clock().NowMs());
          continue;
        }
        if (cut.count(name) || cut.count(region)) continue;
        const wire::Reply& reply = Send(region, body);
        EXPECT_EQ(reply.ops()->Get(0)->status(), wire::Status::Ok)
            << reply.ops()->Get(0)->error()->str();
      }
    }
  }
  void Rebalance() {
    for (auto& [name, r] : regions_) r->node().regions()->Rebalance(r->clock().NowMs());
  }
  void Advance(int64_t ms) {
    for (auto& [name, r] : regions_) r->clock().Advance(ms);
  }
  // This region's share of `key` and its demand as it sees them.
  int64_t Share(const std::string& region, const std::string& key) {
    return View(region, key).front().share;
  }
  std::vector<RegionShares::View> View(const std::string& region, const std::string& key) {
    const Policy& p = *policies_.Find("partner");
    const KeyId id = protocol::LimitId(p, key, {});
    return node(region).regions()->ViewOf(0, &id, regions_.at(region)->clock().NowMs());
  }

  // Drives demand of `per_second` requests/s in each region for `seconds`, 10 steps a second,
  // ticking every 2 s (on the same boundaries in every region, as the wall clock aligns them).
  // Returns the admissions per second summed over the regions, second by second.
  std::vector<int> Drive(const std::map<std::string, int>& per_second, int seconds,
                         const std::string& key, const std::set<std::string>& cut = {}) {
    std::vector<int> fleet;
    for (int s = 0; s < seconds; ++s) {
      int admitted = 0;
      for (int step = 0; step < 10; ++step) {
        for (const auto& [region, rate] : per_second) admitted += Admitted(region, key, rate / 10);
        Advance(100);
        ++steps_;
        if (steps_ % 20 == 0) Tick(cut);
        if (steps_ % 20 == 10) Rebalance();  // half an interval after the tick
      }
      fleet.push_back(admitted);
      if (getenv("REGIONS_DEBUG")) {
        std::printf("t=%d:", s);
        for (const char* r : {"ap", "eu", "us"}) {
          const auto v = View(r, key);
          std::printf(" %s share %lld pending %lld demand %lld;", r, (long long)v[0].share,
                      (long long)v[0].pending_share, (long long)v[0].demand);
        }
        std::printf(" fleet %d\n", admitted);
      }
    }
    std::printf("fleet admissions per second:");
    for (int a : fleet) std::printf(" %d", a);
    std::printf("\n");
    return fleet;
  }

  const PolicySet policies_ = testing::Policies(kPolicies, "regions.yaml");
  std::map<std::string, std::unique_ptr<testing::NodeHarness>> regions_;
  int64_t steps_ = 0;
  std::set<std::pair<std::string, std::string>> one_way_;  // (from, to) reports that fail
};

TEST_F(Regions, TheSharesFollowDemandAndTheFleetStaysWithinTheLimit) {
  // The worked example: 1000, 50 and 10 per second at L = 120 give 60, 50 and 10.
  const std::vector<int> fleet = Drive({{"us", 1000}, {"eu", 50}, {"ap", 10}}, 14, "acme");
  EXPECT_EQ(Share("us", "acme"), 60);
  EXPECT_EQ(Share("eu", "acme"), 50);
  EXPECT_EQ(Share("ap", "acme"), 10);
  // Every region sees the same shares in the others' reports.
  const std::vector<RegionShares::View> seen = View("ap", "acme");
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].region, "ap");
  EXPECT_EQ(seen[1].region, "eu");
  EXPECT_EQ(seen[1].share, 50);
  EXPECT_EQ(seen[2].share, 60);
  EXPECT_GE(seen[2].demand, 900);
  // Across regions, no second admits more than L plus the bursts the regions started with
  // (their floors' bursts: before any exchange each region admits on its floor).
  for (size_t s = 0; s < fleet.size(); ++s) EXPECT_LE(fleet[s], 120 + 12) << "second " << s;
  // Once the shares settled, the fleet admits what they allow: 60 + 50 + 10.
  EXPECT_GE(fleet.back(), 110);

  // The demand moves: eu now wants 1000, us 50. Shares converge within 3 intervals (6 s)
  // after the demand windows see it, and the fleet never passes the limit meanwhile.
  const std::vector<int> moved = Drive({{"us", 50}, {"eu", 1000}, {"ap", 10}}, 10, "acme");
  for (size_t s = 0; s < moved.size(); ++s) EXPECT_LE(moved[s], 120 + 12) << "second " << s;
  EXPECT_EQ(Share("eu", "acme"), 60);
  EXPECT_EQ(Share("us", "acme"), 50);
  EXPECT_EQ(Share("ap", "acme"), 10);
}

TEST_F(Regions, ARegionCutOffKeepsItsLastShareNeverMore) {
  Drive({{"us", 1000}, {"eu", 50}, {"ap", 10}}, 12, "acme");
  ASSERT_EQ(Share("ap", "acme"), 10);
  // ap is cut off, and its demand jumps: it must not raise its share; nor may the others
  // take more than their last shares while they cannot hear it.
  const std::vector<int> cut = Drive({{"us", 1000}, {"eu", 50}, {"ap", 1000}}, 30, "acme", {"ap"});
  EXPECT_EQ(Share("ap", "acme"), 10);
  EXPECT_LE(Share("us", "acme"), 60);
  for (size_t s = 0; s < cut.size(); ++s) EXPECT_LE(cut[s], 120 + 12) << "second " << s;
  // Back: the shares rebalance over the three demands, and the fleet stays within L.
  const std::vector<int> back = Drive({{"us", 1000}, {"eu", 50}, {"ap", 1000}}, 12, "acme");
  for (size_t s = 0; s < back.size(); ++s) EXPECT_LE(back[s], 120 + 12) << "second " << s;
  // All three want more than an equal split now: 40 each.
  EXPECT_EQ(Share("eu", "acme"), 40);
  EXPECT_EQ(Share("us", "acme"), 40);
  EXPECT_EQ(Share("ap", "acme"), 40);
}

TEST_F(Regions, ALinkCutOneWayStopsTheRaisesOnBothSides) {
  Drive({{"us", 50}, {"eu", 10}, {"ap", 1000}}, 12, "acme");
  ASSERT_EQ(Share("us", "acme"), 50);
  ASSERT_EQ(Share("ap", "acme"), 60);
  // us's reports stop reaching ap (ap's still reach us), and us's demand jumps. From what it
  // hears us would take 55, but ap, not hearing it, keeps 60: 125 in all. us knows its
  // reports were lost, so it raises nothing; ap hears nothing from us and raises nothing.
  one_way_ = {{"us", "ap"}};
  const std::vector<int> fleet = Drive({{"us", 1000}, {"eu", 10}, {"ap", 1000}}, 12, "acme");
  EXPECT_EQ(Share("us", "acme"), 50) << "us raised while its reports were lost";
  EXPECT_LE(Share("us", "acme") + Share("eu", "acme") + Share("ap", "acme"), 120);
  for (size_t s = 0; s < fleet.size(); ++s) EXPECT_LE(fleet[s], 120 + 12) << "second " << s;
  one_way_.clear();
  Drive({{"us", 1000}, {"eu", 10}, {"ap", 1000}}, 12, "acme");
  EXPECT_EQ(Share("us", "acme"), 55);
  EXPECT_EQ(Share("ap", "acme"), 55);
}

TEST_F(Regions, BeforeHearingFromEveryRegionAKeyGetsItsFloor) {
  // Nothing exchanged yet: the floor, 5% of 120 = 6, raised to the smallest share a GCRA with
  // B = 12 can hold (L / B = 10), whose burst is 1.
  EXPECT_EQ(Share("us", "new"), 10);
  EXPECT_EQ(Admitted("us", "new", 50), 1);
  Tick();  // still nothing heard before this tick's reports
  Advance(2000);
  EXPECT_EQ(Admitted("us", "new", 50), 1);  // still the floor's burst
}

TEST_F(Regions, ReportsFromStrangersOrAnotherPolicyFileAreRefusedWithTheReason) {
  const uint64_t settings = node("us").regions()->settings();
  const auto report = [&](const std::string& region, uint64_t digest, uint64_t with = 0) {
    flatbuffers::FlatBufferBuilder fbb;
    const auto r =
        wire::CreateRegionReport(fbb, fbb.CreateString(region), fbb.CreateString("x:1"), digest,
                                 KeyIdSeedDigest(), 0, 0, with == 0 ? settings : with);
    const wire::Reply& reply = Send(
        "us",
        FinishPeerRequest(fbb, wire::OpType::Regions, wire::CreatePeer(fbb, 0, 0, 0, 0, 0, r)));
    const wire::OpReply* op = reply.ops()->Get(0);
    return op->error() ? op->error()->str() : std::string();
  };
  EXPECT_NE(report("mars", node("us").policy_table().digest()).find("not another region"),
            std::string::npos);
  EXPECT_NE(report("us", node("us").policy_table().digest()).find("not another region"),
            std::string::npos);
  EXPECT_NE(report("eu", 12345).find("policy file differs"), std::string::npos);
  EXPECT_NE(report("eu", node("us").policy_table().digest(), 777).find("region settings differ"),
            std::string::npos);
  EXPECT_EQ(report("eu", node("us").policy_table().digest()), "");
  EXPECT_EQ(node("us").regions()->counters().reports_refused.load(), 4);
  // A region whose nodes have another floor (or interval, or list of regions) computes other
  // shares: refused.
  NodeOptions other;
  other.regions.region = "eu";
  other.regions.floor = 0.4;
  other.regions.others = {{"us", {"us-node:1"}, ""}, {"ap", {"ap-node:1"}, ""}};
  EXPECT_NE(RegionShares(policies_, other.regions).settings(), settings);
}

// Two nodes of one region (us), a second region (eu) heard from by report: a global key whose
// share has risen above the floor keeps that share when its owner leaves and hands it over.
TEST(RegionsHandoff, AKeyHandedToAnotherNodeOfItsRegionKeepsItsShare) {
  const PolicySet policies = testing::Policies(kPolicies, "regions.yaml");
  const std::vector<std::string> both = {"a:1", "b:1"};
  std::map<std::string, std::unique_ptr<testing::NodeHarness>> harnesses;
  for (const std::string& name : both) {
    NodeOptions o;
    o.self = name;
    o.members = both;
    o.generation = 1;
    o.regions.region = "us";
    o.regions.others.push_back({"eu", {"e:1"}, ""});
    harnesses[name] =
        std::make_unique<testing::NodeHarness>(policies, o, name == "a:1" ? 100'000 : 9'000'000);
  }
  std::map<std::string, Node*> nodes;
  std::map<std::string, ManualClock*> clocks;
  for (auto& [name, h] : harnesses) {
    nodes[name] = &h->node();
    clocks[name] = &h->clock();
  }
  const auto send = [&](const std::string& to,
                        std::span<const uint8_t> body) -> const wire::Reply& {
    return harnesses.at(to)->Send(body);
  };
  std::string key;
  for (int i = 0; key.empty(); ++i) {
    if (nodes["a:1"]->membership()->ring.Owner("k" + std::to_string(i)) == "a:1")
      key = "k" + std::to_string(i);
  }
  const KeyId id = protocol::LimitId(*policies.Find("partner"), key, {});
  const auto heartbeat = [&] {  // eu says its link is up (no traffic of its own)
    flatbuffers::FlatBufferBuilder fbb;
    // eu routes by its list of us's nodes: the same as theirs.
    const auto r = wire::CreateRegionReport(
        fbb, fbb.CreateString("eu"), fbb.CreateString("e:1"), nodes["a:1"]->policy_table().digest(),
        KeyIdSeedDigest(), 0, Ring(both).version(), nodes["a:1"]->regions()->settings());
    send("a:1",
         FinishPeerRequest(fbb, wire::OpType::Regions, wire::CreatePeer(fbb, 0, 0, 0, 0, 0, r)));
  };
  RequestBuilder b;
  for (int tick = 0; tick < 3; ++tick) {  // demand of 200/s on a; eu wants nothing
    for (int step = 0; step < 20; ++step) {
      clocks["a:1"]->Advance(100);
      for (int i = 0; i < 20; ++i) {
        b.Check(1, "partner", key);
        send("a:1", b.Finish());
        b.Clear();
      }
    }
    nodes["a:1"]->regions()->Measure(clocks["a:1"]->NowMs());
    heartbeat();
    nodes["a:1"]->regions()->Rebalance(clocks["a:1"]->NowMs());
  }
  // A report routed by another list of us's nodes is refused (its keys may be anyone's).
  {
    flatbuffers::FlatBufferBuilder fbb;
    const auto r = wire::CreateRegionReport(
        fbb, fbb.CreateString("eu"), fbb.CreateString("e:1"), nodes["a:1"]->policy_table().digest(),
        KeyIdSeedDigest(), 0, Ring({"a:1"}).version(), nodes["a:1"]->regions()->settings());
    const wire::Reply& reply = send(
        "a:1",
        FinishPeerRequest(fbb, wire::OpType::Regions, wire::CreatePeer(fbb, 0, 0, 0, 0, 0, r)));
    EXPECT_NE(reply.ops()->Get(0)->error()->str().find("routed by another list"),
              std::string::npos);
  }
  const int64_t share =
      nodes["a:1"]->regions()->ViewOf(0, &id, clocks["a:1"]->NowMs()).front().share;
  EXPECT_EQ(share, 110);  // 120 less eu's floor (L / B = 10)
  // a leaves; b takes its keys.
  ASSERT_TRUE(nodes["b:1"]->ownership().SetMembers({"b:1"}, 2).ok());
  nodes["a:1"]->Leave(2);
  const Handoff::Sink sink = [&](const std::string& member,
                                 std::span<const uint8_t> frame) -> int64_t {
    const wire::Reply& r = send(member, frame);
    return r.ops()->Get(0)->status() == wire::Status::Ok ? r.ops()->Get(0)->granted() : -1;
  };
  ASSERT_TRUE(nodes["a:1"]->handoff().RunNext(sink, std::chrono::milliseconds(0)).has_value());
  const std::vector<RegionShares::View> there =
      nodes["b:1"]->regions()->ViewOf(0, &id, clocks["b:1"]->NowMs());
  EXPECT_EQ(there.front().share, share) << "the new owner started the key at its floor";
  // It goes on from the state: no fresh burst (a's bucket is empty at 200/s offered).
  b.Check(1, "partner", key);
  EXPECT_FALSE(send("b:1", b.Finish()).ops()->Get(0)->allowed());
}

TEST(RegionOptionsCheck, EachMistakeIsNamed) {
  const PolicySet policies = testing::Policies(kPolicies, "regions.yaml");
  const auto error = [&](RegionOptions o) {
    const Status checked = RegionShares::Check(policies, o);
    return checked.ok() ? std::string("(none)") : checked.error();
  };
  RegionOptions o;
  EXPECT_EQ(error(o), "(none)");  // no regions at all
  o.others.push_back({"eu", {"e:1"}, ""});
  EXPECT_EQ(error(o), "regions: name this node's region (region) too");
  o.region = "us";
  EXPECT_EQ(error(o), "(none)");
  o.others.push_back({"eu", {"e:2"}, ""});
  EXPECT_EQ(error(o), "regions: 'eu' is named twice");
  o.others.back() = {"ap", {"a:1"}, "ap.svc:1"};
  EXPECT_EQ(error(o), "regions: region 'ap' needs members or members_dns (one of them)");
  o.others.back() = {"ap", {}, ""};
  EXPECT_EQ(error(o), "regions: region 'ap' needs members or members_dns (one of them)");
  o.others.back() = {"us", {"a:1"}, ""};
  EXPECT_EQ(error(o), "regions: 'us' is named twice");
  o.others.back() = {"ap", {"a:1"}, ""};
  o.rebalance_interval_ms = 50;
  EXPECT_EQ(error(o), "rebalance_interval: 100 ms to 60 s, got 50 ms");
  o.rebalance_interval_ms = 2000;
  o.floor = 1.5;
  EXPECT_EQ(error(o), "region_floor: a share of the limit, 0 to 1");
  o.floor = 0.05;
  // 120/s with B = 12 holds shares of at least 10: 12 regions at most.
  for (int i = 0; i < 10; ++i) o.others.push_back({"x" + std::to_string(i), {"x:1"}, ""});
  EXPECT_EQ(error(o),
            "policy 'partner': a global limit of 120 cannot give each of 13 regions "
            "its smallest share (10: limit / burst)");
  for (int i = 0; i < 60; ++i) o.others.push_back({"y" + std::to_string(i), {"y:1"}, ""});
  EXPECT_EQ(error(o), "regions: at most 64 regions, got 73");
}

TEST_F(Regions, AskingANodeWithoutRegionsOrAboutARegionalPolicyIsAnError) {
  RequestBuilder b;
  b.Regions(1, "local", "k");
  const wire::Reply& r = Send("us", b.Finish());
  EXPECT_EQ(r.ops()->Get(0)->status(), wire::Status::BadRequest);
  EXPECT_NE(r.ops()->Get(0)->error()->str().find("policy 'local' is scope: region"),
            std::string::npos);
  b.Clear();
  b.Regions(1);  // the links
  const wire::Reply& links = Send("us", b.Finish());
  ASSERT_EQ(links.ops()->Get(0)->status(), wire::Status::Ok);
  ASSERT_EQ(links.ops()->Get(0)->regions()->size(), 3u);
  EXPECT_EQ(links.ops()->Get(0)->regions()->Get(0)->region()->str(), "us");
  EXPECT_EQ(links.ops()->Get(0)->regions()->Get(1)->link_age_ms(), -1);  // never heard

  // A node with no region named.
  testing::NodeHarness plain(policies_, NodeOptions{}, 1000);
  b.Clear();
  b.Regions(1);
  EXPECT_EQ(testing::ErrorOf(plain.One(b)),
            "this node belongs to no region (its config names no `region`)");
}

}  // namespace
}  // namespace limiter
