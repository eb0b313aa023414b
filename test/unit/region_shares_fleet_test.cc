// RegionShares across a deployment (the fixture: region_shares_harness.h): regions exchanging
// reports agree, and their shares in force never sum past L with reports lost or late at random
// or a region cut off (which keeps its last share, never more); Check names the field it
// refuses; regions of one deployment share their settings and any difference shows; and
// threads using keys while reports arrive and shares move leave the shares within L.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/share_allocation.h"
#include "server/region_shares.h"
#include "test/unit/region_shares_harness.h"
#include "test/unit/test_seed.h"

namespace limiter::regions_test {
namespace {

// The three regions of one deployment, one node each, on one clock (their ticks are the wall
// clock's, the same everywhere): every tick each measures and its reports, as Reports makes
// them, reach the others but for the (from, to) pairs lost (which the sender learns of) and
// those late (delivered within the interval, but after the receiver's rebalance).
using Pairs = std::set<std::pair<std::string, std::string>>;

class Fleet {
 public:
  explicit Fleet(const PolicySet& policies, int64_t max_keys = 100'000) : policies_(policies) {
    for (const char* name : {"ap", "eu", "us"}) {
      RegionOptions o = Options(name);
      o.max_keys = max_keys;
      regions_.emplace(name, std::make_unique<RegionShares>(policies, o));
      own_.emplace(name, Ring({Address(name)}));
    }
  }
  RegionShares& at(const std::string& region) { return *regions_.at(region); }
  const std::map<std::string, std::unique_ptr<RegionShares>>& regions() const { return regions_; }

  void Tick(int64_t now, const Pairs& lost = {}, const Pairs& late = {}) {
    for (auto& [name, r] : regions_) r->Measure(now);
    for (auto& [from, r] : regions_) {
      for (RegionShares::Report& report : r->Reports(Address(from), kPolicyDigest, kKeySeed)) {
        if (lost.count({from, report.region})) {
          r->NoteSent(report.region, false, now);
        } else if (late.count({from, report.region})) {
          late_.push_back({from, std::move(report)});
        } else {
          Deliver(from, report, now);
        }
      }
    }
  }
  void DeliverLate(int64_t now) {
    for (const auto& [from, report] : late_) Deliver(from, report, now);
    late_.clear();
  }
  void Rebalance(int64_t now) {
    for (auto& [name, r] : regions_) r->Rebalance(now);
  }
  int64_t Share(const std::string& region, int policy, const KeyId& id, int64_t now) {
    return at(region).ViewOf(policy, &id, now).front().share;
  }
  int64_t Sum(int policy, const KeyId& id, int64_t now) {
    int64_t sum = 0;
    for (const auto& [name, r] : regions_) sum += Share(name, policy, id, now);
    return sum;
  }
  // One interval from the tick at `t`: each region offered its demand (per second), rebalanced
  // half an interval after the tick, the next tick. The shares in force are checked at every
  // rebalance: within L, none below its floor.
  void Interval(int64_t& t, int policy, const KeyId& id,
                const std::map<std::string, int64_t>& demand, const Pairs& lost = {},
                const Pairs& late = {}) {
    const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
    for (const auto& [name, d] : demand) {
      for (int64_t x = t; x < t + kInterval / 2; x += 100) at(name).Use(policy, id, d / 10, x);
    }
    Rebalance(t + kInterval / 2);
    DeliverLate(t + kInterval / 2 + 100);
    EXPECT_LE(Sum(policy, id, t + kInterval / 2), p.rate.limit()) << "at " << t;
    for (const auto& [name, r] : regions_) {
      EXPECT_GE(Share(name, policy, id, t), FloorOf(policy)) << name << " at " << t;
    }
    for (const auto& [name, d] : demand) {
      for (int64_t x = t + kInterval / 2; x < t + kInterval; x += 100) {
        at(name).Use(policy, id, d / 10, x);
      }
    }
    t += kInterval;
    Tick(t, lost, late);
  }
  int64_t FloorOf(int policy) const { return policy == kPartner ? 10 : 50; }

 private:
  void Deliver(const std::string& from, const RegionShares::Report& report, int64_t now) {
    RegionShares& to = at(report.region);
    const Wire w(report.body);
    EXPECT_TRUE(to.IsMemberOf(from, w.report().node()->str()));
    Result<int64_t> taken =
        to.Receive(w.report(), kPolicyDigest, kKeySeed, own_.at(report.region), report.member, now);
    EXPECT_TRUE(taken.ok()) << taken.error();
  }

  const PolicySet& policies_;
  std::vector<std::pair<std::string, RegionShares::Report>> late_;
  std::map<std::string, std::unique_ptr<RegionShares>> regions_;
  std::map<std::string, Ring> own_;
};

// Every lost (from, to) pair that involves `region`.
Pairs CutOff(const std::string& region) {
  Pairs lost;
  for (const char* other : {"ap", "eu", "us"}) {
    if (region != other) lost.insert({region, other}), lost.insert({other, region});
  }
  return lost;
}

TEST(RegionSharesFleet, RegionsExchangingReportsAgreeOnTheWorkedExample) {
  const PolicySet policies = Parse();
  Fleet fleet(policies);
  const KeyId id = protocol::LimitId(policies.policies()[kPartner], "acme", {});
  int64_t t = kT0;
  fleet.Tick(t);
  for (int i = 0; i < 5; ++i)
    fleet.Interval(t, kPartner, id, {{"us", 1000}, {"eu", 50}, {"ap", 10}});
  EXPECT_EQ(fleet.Share("us", kPartner, id, t), 60);
  EXPECT_EQ(fleet.Share("eu", kPartner, id, t), 50);
  EXPECT_EQ(fleet.Share("ap", kPartner, id, t), 10);
  // Each region's view of the others is what they enforce.
  const std::vector<RegionShares::View> seen = fleet.at("ap").ViewOf(kPartner, &id, t);
  EXPECT_EQ(seen[1].region, "eu");
  EXPECT_EQ(seen[1].share, 50);
  EXPECT_EQ(seen[2].share, 60);
  EXPECT_EQ(seen[2].demand, 1000);
}

TEST(RegionSharesFleet, ACutOffRegionKeepsItsLastShareAndTheOthersCannotTakeIt) {
  const PolicySet policies = Parse();
  Fleet fleet(policies);
  const KeyId id = protocol::LimitId(policies.policies()[kPartner], "acme", {});
  int64_t t = kT0;
  fleet.Tick(t);
  for (int i = 0; i < 5; ++i)
    fleet.Interval(t, kPartner, id, {{"us", 1000}, {"eu", 50}, {"ap", 10}});
  ASSERT_EQ(fleet.Share("ap", kPartner, id, t), 10);
  // ap is cut off and wants 1000; eu wants nothing now. From their reports us would take 100,
  // and ap 40, but neither may raise while they cannot hear each other; eu may fall.
  for (int i = 0; i < 8; ++i) {
    fleet.Interval(t, kPartner, id, {{"us", 1000}, {"eu", 0}, {"ap", 1000}}, CutOff("ap"));
    EXPECT_EQ(fleet.Share("ap", kPartner, id, t), 10);
    EXPECT_LE(fleet.Share("us", kPartner, id, t), 60);
    EXPECT_EQ(fleet.at("us").ViewOf(kPartner, &id, t)[1].pending_share, 0);
  }
  EXPECT_EQ(fleet.Share("eu", kPartner, id, t), 10);
  const std::vector<RegionShares::View> from_us = fleet.at("us").ViewOf(kPartner, &id, t);
  EXPECT_FALSE(from_us[1].link_up);
  EXPECT_EQ(from_us[1].demand, 10);  // ap's last word
  // Back: the shares move to the new demands, within L all along.
  for (int i = 0; i < 5; ++i)
    fleet.Interval(t, kPartner, id, {{"us", 1000}, {"eu", 0}, {"ap", 1000}});
  EXPECT_EQ(fleet.Share("ap", kPartner, id, t), 55);
  EXPECT_EQ(fleet.Share("eu", kPartner, id, t), 10);
  EXPECT_EQ(fleet.Share("us", kPartner, id, t), 55);
}

// Random demands, reports lost (one way or both, a region cut off for a while) or late at
// random: the shares in force never sum past L, none falls below its floor; once reports flow
// and demand holds, every region enforces AllocateShares of the demands.
TEST(RegionSharesFleet, SharesInForceNeverSumPastTheLimitWhateverReportsAreLostOrLate) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const PolicySet policies = Parse();
  const std::vector<std::string> names = {"ap", "eu", "us"};
  for (const int policy : {kPartner, kBulk}) {
    Fleet fleet(policies);
    const KeyId id = protocol::LimitId(policies.policies()[static_cast<size_t>(policy)], "k", {});
    std::map<std::string, int64_t> demand = {{"ap", 10}, {"eu", 10}, {"us", 10}};
    int64_t t = kT0;
    fleet.Tick(t);
    std::string cut;
    for (int i = 0; i < 150; ++i) {
      for (const std::string& n : names) {
        if (rng() % 3 == 0) {
          static constexpr int64_t kDemands[] = {0, 10, 50, 200, 1000, 5000};
          demand[n] = kDemands[rng() % 6];
        }
      }
      if (rng() % 10 == 0) cut = rng() % 2 ? names[rng() % 3] : std::string();
      Pairs lost = cut.empty() ? Pairs() : CutOff(cut);
      Pairs late;
      for (const std::string& from : names) {
        for (const std::string& to : names) {
          if (from == to) continue;
          const uint64_t fate = rng() % 12;
          if (fate < 2) lost.insert({from, to});
          if (fate == 2) late.insert({from, to});
        }
      }
      fleet.Interval(t, policy, id, demand, lost, late);
      if (::testing::Test::HasFailure()) return;
    }
    for (int i = 0; i < 5; ++i) fleet.Interval(t, policy, id, demand);
    const Policy& p = policies.policies()[static_cast<size_t>(policy)];
    std::vector<int64_t> demands;
    for (const std::string& n : names) demands.push_back(demand[n]);
    const std::vector<int64_t> want = AllocateShares(
        p.rate.limit(), demands, policy == kPartner ? 6 : 50, ShareQuantum(p.algorithm, p.rate));
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(fleet.Share(names[i], policy, id, t), want[i]) << names[i] << ", " << p.name;
    }
  }
}

TEST(RegionSharesCheck, EachMistakeIsRefusedNamingItsField) {
  const PolicySet policies = Parse();
  const auto error = [&](const RegionOptions& o) {
    const Status s = RegionShares::Check(policies, o);
    return s.ok() ? std::string("(none)") : s.error();
  };
  RegionOptions o = Options("us");
  EXPECT_EQ(error(o), "(none)");
  EXPECT_EQ(error(RegionOptions{}), "(none)");  // no regions at all
  RegionOptions unnamed = o;
  unnamed.region.clear();
  EXPECT_EQ(error(unnamed), "regions: name this node's region (region) too");
  RegionOptions bad = o;
  bad.region = std::string(65, 'u');
  EXPECT_EQ(error(bad).rfind("region: ", 0), 0u) << error(bad);
  bad.region = std::string(64, 'u');
  EXPECT_EQ(error(bad), "(none)");
  bad = o;
  bad.others[0].name = std::string(65, 'a');
  EXPECT_EQ(error(bad), "regions: a region's name is 1 to 64 bytes");
  bad.others[0].name.clear();
  EXPECT_EQ(error(bad), "regions: a region's name is 1 to 64 bytes");
  bad.others[0].name = "us";
  EXPECT_EQ(error(bad), "regions: 'us' is named twice");
  bad.others[0].name = "eu";
  EXPECT_EQ(error(bad), "regions: 'eu' is named twice");
  bad = o;
  bad.others[0].members_dns = "ap.svc:1";
  EXPECT_EQ(error(bad), "regions: region 'ap' needs members or members_dns (one of them)");
  bad.others[0].members.clear();
  EXPECT_EQ(error(bad), "(none)");
  bad.others[0].members_dns.clear();
  EXPECT_EQ(error(bad), "regions: region 'ap' needs members or members_dns (one of them)");
  bad = o;
  for (int i = 0; i < 62; ++i) bad.others.push_back({"x" + std::to_string(i), {"x:1"}, ""});
  EXPECT_EQ(error(bad), "regions: at most 64 regions, got 65");
  for (const int64_t ms : {int64_t{99}, int64_t{60'001}, int64_t{-1}}) {
    bad = o;
    bad.rebalance_interval_ms = ms;
    EXPECT_EQ(error(bad), "rebalance_interval: 100 ms to 60 s, got " + std::to_string(ms) + " ms");
  }
  for (const int64_t ms : {int64_t{100}, int64_t{60'000}}) {
    bad = o;
    bad.rebalance_interval_ms = ms;
    EXPECT_EQ(error(bad), "(none)");
  }
  for (const double floor : {-0.01, 1.01, std::nan("")}) {
    bad = o;
    bad.floor = floor;
    EXPECT_EQ(error(bad), "region_floor: a share of the limit, 0 to 1") << floor;
  }
  for (const double floor : {0.0, 1.0, 0.123456}) {
    bad = o;
    bad.floor = floor;
    EXPECT_EQ(error(bad), "(none)") << floor;
  }
  // Reports compare floors to the millionth: a finer one could differ between regions unseen.
  bad = o;
  bad.floor = 0.0500004;
  EXPECT_EQ(error(bad).rfind("region_floor: ", 0), 0u) << error(bad);
  bad = o;
  bad.max_keys = 0;
  EXPECT_EQ(error(bad), "region_max_keys: at least 1");
  // A global limit must hold a share for every region; a regional one need not.
  const PolicySet small = Parse(R"(
policies:
  - {name: tiny, algorithm: gcra, limit: 20, window: 1s, burst: 2, class: contract, scope: global}
  - {name: one, algorithm: gcra, limit: 1, window: 1s, class: contract}
)");
  EXPECT_EQ(RegionShares::Check(small, o).error(),
            "policy 'tiny': a global limit of 20 cannot give each of 3 regions its smallest "
            "share (10: limit / burst)");
  RegionOptions two = o;
  two.others.pop_back();
  EXPECT_TRUE(RegionShares::Check(small, two).ok());
}

TEST(RegionSharesSettings, RegionsOfOneDeploymentShareThemAndAnyDifferenceShows) {
  const PolicySet policies = Parse();
  const uint64_t us = RegionShares(policies, Options("us")).settings();
  EXPECT_EQ(RegionShares(policies, Options("eu")).settings(), us);
  EXPECT_EQ(RegionShares(policies, Options("ap")).settings(), us);
  RegionOptions o = Options("eu");
  o.floor = 0.06;
  EXPECT_NE(RegionShares(policies, o).settings(), us);
  o = Options("eu");
  o.rebalance_interval_ms = 3000;
  EXPECT_NE(RegionShares(policies, o).settings(), us);
  o = Options("eu");
  o.others.push_back({"sa", {"sa-node:1"}, ""});
  EXPECT_NE(RegionShares(policies, o).settings(), us);
  o = Options("eu");
  o.max_keys = 7;  // a node's own bound: not shared
  EXPECT_EQ(RegionShares(policies, o).settings(), us);
  EXPECT_EQ(RegionShares(policies, Options("eu")).names(),
            (std::vector<std::string>{"ap", "eu", "us"}));
}

// Threads use keys of every region (one hot key shared by all, keys of their own, new keys
// past region_max_keys) and reconcile their states, while another thread carries reports,
// rebalances with reports lost, hands a key over and reads the views. Nothing crashes, the
// shares stay within L all along, and the keys tracked never pass region_max_keys.
TEST(RegionSharesThreads, UsesWhileReportsArriveAndSharesMoveStayWithinTheLimit) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  const PolicySet policies = Parse();
  constexpr int64_t kMaxKeys = 48;
  Fleet fleet(policies, kMaxKeys);
  const std::vector<std::string> names = {"ap", "eu", "us"};
  const KeyId hot = protocol::LimitId(policies.policies()[kPartner], "hot", {});
  const KeyId bulk = protocol::LimitId(policies.policies()[kBulk], "hot", {});
  std::atomic<int64_t> clock{kT0};
  std::atomic<bool> done{false};
  std::atomic<int64_t> bad_rates{0};
  fleet.Tick(kT0);

  // Per region, per hot key: its state, under a lock as the store's stripe holds it.
  struct Held {
    std::mutex mu;
    KeyLimiter state{Algorithm::kGcra};
  };
  std::map<std::string, Held> held;
  for (const std::string& n : names) held[n];

  std::vector<std::thread> users;
  for (int u = 0; u < 4; ++u) {
    users.emplace_back([&, u] {
      std::mt19937_64 rng(seed + static_cast<uint64_t>(u));
      for (int i = 0; i < 3000 || !done.load(); ++i) {
        if (i > 20'000) break;
        const std::string& region = names[rng() % 3];
        RegionShares& s = fleet.at(region);
        const int64_t now = clock.load();
        const Rate rate = s.Use(kPartner, hot, 1, now);
        if (rate.limit() < 10 || rate.limit() > 120) bad_rates.fetch_add(1);
        {
          Held& h = held[region];
          std::lock_guard<std::mutex> lock(h.mu);
          s.Reconcile(hot, rate, h.state, now);
          h.state.Decide(rate, now, 1);
        }
        const Rate b = s.Use(kBulk, bulk, 1 + static_cast<int64_t>(rng() % 5), now);
        if (b.limit() < 50 || b.limit() > 1000) bad_rates.fetch_add(1);
        // A key of this thread's own, and now and then a new one.
        const KeyId mine =
            protocol::LimitId(policies.policies()[kPartner],
                              "u" + std::to_string(u) + "-" + std::to_string(i % 8), {});
        KeyLimiter state(Algorithm::kGcra);
        s.Reconcile(mine, s.Use(kPartner, mine, 1, now), state, now);
        if (i % 16 == 0) {
          s.Use(kPartner,
                protocol::LimitId(policies.policies()[kPartner],
                                  "new" + std::to_string(u) + "-" + std::to_string(i), {}),
                1, now);
        }
      }
    });
  }
  std::mt19937_64 rng(seed);
  int64_t t = kT0;
  for (int i = 0; i < 40; ++i) {
    Pairs lost;
    for (const std::string& from : names) {
      for (const std::string& to : names) {
        if (from != to && rng() % 5 == 0) lost.insert({from, to});
      }
    }
    clock.store(t + kInterval / 2);
    fleet.Rebalance(t + kInterval / 2);
    EXPECT_LE(fleet.Sum(kPartner, hot, t + kInterval / 2), 120);
    EXPECT_LE(fleet.Sum(kBulk, bulk, t + kInterval / 2), 1000);
    for (const std::string& n : names) {
      fleet.at(n).ViewOf(kPartner, &hot, t);
      fleet.at(n).Top(5);
    }
    // A key handed from us to us (its next owner there) and back.
    const KeyId moving = protocol::LimitId(policies.policies()[kPartner], "u0-1", {});
    const auto [share, state_share] = fleet.at("us").Carried(moving);
    if (share > 0) fleet.at("us").Adopt(kPartner, moving, share, state_share, t + kInterval / 2);
    t += kInterval;
    clock.store(t);
    fleet.Tick(t, lost);
  }
  done.store(true);
  for (std::thread& th : users) th.join();
  EXPECT_EQ(bad_rates.load(), 0);
  fleet.Rebalance(t + kInterval / 2);
  EXPECT_LE(fleet.Sum(kPartner, hot, t + kInterval / 2), 120);
  EXPECT_LE(fleet.Sum(kBulk, bulk, t + kInterval / 2), 1000);
  for (const std::string& n : names) {
    RegionShares& s = fleet.at(n);
    EXPECT_LE(s.counters().keys.load(), kMaxKeys) << n;
    EXPECT_EQ(static_cast<int64_t>(s.Top(1'000'000).size()), s.counters().keys.load()) << n;
  }
}

}  // namespace
}  // namespace limiter::regions_test
