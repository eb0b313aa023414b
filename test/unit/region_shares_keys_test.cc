// RegionShares' keys (the fixture: region_shares_harness.h): at region_max_keys a key gets the
// floor, counted, and a key dropped when idle frees its place at once; Reconcile moves a key's
// state to the share in force without raising what it may admit; a key handed over keeps its
// share; ViewOf and Top say what was received; Reports sends each key to its owner there, at
// most 4096 keys a frame.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/share_allocation.h"
#include "server/region_shares.h"
#include "test/unit/region_shares_harness.h"
#include "test/unit/test_seed.h"

namespace limiter::regions_test {
namespace {

RegionOptions FewKeys(int64_t max_keys) {
  RegionOptions o = Options("us");
  o.max_keys = max_keys;
  return o;
}

class RegionSharesFourKeys : public RegionSharesTest {
 protected:
  RegionSharesFourKeys() : RegionSharesTest(FewKeys(4)) {}
};

TEST_F(RegionSharesFourKeys, AtRegionMaxKeysANewKeyGetsTheFloorAndIsCounted) {
  const KeyId used = Id(kPartner, "used");
  us_.Use(kPartner, used, 1, kT0);
  // Other regions' reports may fill three of the four: the last is kept for keys used here.
  Sent eu;
  for (int i = 0; i < 4; ++i)
    eu.keys.push_back({kPartner, Id(kPartner, "r" + std::to_string(i)), 50, 10});
  Result<int64_t> taken = Receive(us_, eu, kT0);
  ASSERT_TRUE(taken.ok()) << taken.error();
  EXPECT_EQ(*taken, 2);
  EXPECT_EQ(us_.counters().keys_untracked.load(), 2);
  EXPECT_EQ(us_.counters().keys.load(), 3);
  const KeyId real = Id(kPartner, "real");
  us_.Use(kPartner, real, 1, kT0);
  EXPECT_EQ(us_.counters().keys.load(), 4);
  EXPECT_EQ(us_.counters().keys_untracked.load(), 2);
  // Full: a new key gets the floor, counted each time, and stays there whatever the reports
  // justify; a key tracked already moves.
  const KeyId beyond = Id(kPartner, "beyond");
  int64_t t = kT0 + kInterval;
  for (int i = 0; i < 2; ++i) {
    Offer(us_, kPartner, beyond, 1000, t - kInterval, t);
    Interval(t, kPartner, real, 1000, 50, 10);
  }
  EXPECT_EQ(Str(us_.Use(kPartner, beyond, 1, t)), Str(ShareRateOf(kPartner, 10)));
  EXPECT_EQ(Self(us_, kPartner, beyond, t).share, 10);
  EXPECT_EQ(Self(us_, kPartner, beyond, t).demand, 0);
  EXPECT_EQ(Self(us_, kPartner, real, t).share, 60);
  EXPECT_EQ(us_.counters().keys_untracked.load(), 2 + 2 * 20 + 1);
  EXPECT_EQ(us_.counters().keys.load(), 4);
}

class RegionSharesTwoKeys : public RegionSharesTest {
 protected:
  RegionSharesTwoKeys() : RegionSharesTest(FewKeys(2)) {}
};

TEST_F(RegionSharesTwoKeys, AKeyDroppedWhenIdleFreesItsPlaceAtOnce) {
  const KeyId a = Id(kPartner, "a"), b = Id(kPartner, "b");
  int64_t t = kT0;
  Interval(t, kPartner, a, 1000, 50, 10);
  Interval(t, kPartner, a, 1000, 50, 10);
  ASSERT_EQ(Self(us_, kPartner, a, t).share, 60);
  us_.Use(kPartner, b, 1, t);
  ASSERT_EQ(us_.counters().keys.load(), 2);
  // Nobody uses or reports either for more than three intervals: the tick drops both, and a
  // new key takes a place at once, before any rebalance.
  t += 4 * kInterval;
  us_.Measure(t);
  EXPECT_EQ(us_.counters().keys.load(), 0);
  const KeyId c = Id(kPartner, "c");
  us_.Use(kPartner, c, 1, t + 1);
  EXPECT_EQ(us_.counters().keys_untracked.load(), 0) << "a dropped key still held its place";
  EXPECT_EQ(us_.counters().keys.load(), 1);
  // The key that had 60 comes back at its floor.
  EXPECT_EQ(Str(us_.Use(kPartner, a, 1, t + 2)), Str(ShareRateOf(kPartner, 10)));
  EXPECT_EQ(us_.counters().keys.load(), 2);
  EXPECT_EQ(us_.Top(10).size(), 2u);
}

TEST_F(RegionSharesTest, AKeyAnotherRegionReportedLatelyIsKeptWhileIdleHere) {
  const KeyId id = Id(kPartner, "acme");
  us_.Use(kPartner, id, 1, kT0);
  Sent eu;
  eu.keys = {{kPartner, id, 50, 10}};
  ASSERT_TRUE(Receive(us_, eu, kT0 + 3 * kInterval).ok());
  us_.Measure(kT0 + 4 * kInterval);
  EXPECT_EQ(us_.counters().keys.load(), 1);
  us_.Measure(kT0 + 7 * kInterval);
  EXPECT_EQ(us_.counters().keys.load(), 0);
}

TEST_F(RegionSharesTest, ReconcileMovesTheStateOnlyWhenItsShareChanged) {
  const KeyId id = Id(kPartner, "acme");
  KeyLimiter state(Algorithm::kGcra);
  // Not tracked: nothing to move.
  EXPECT_FALSE(us_.Reconcile(id, ShareRateOf(kPartner, 10), state, kT0));
  int64_t t = kT0;
  const Rate floor = us_.Use(kPartner, id, 1, t);
  EXPECT_FALSE(us_.Reconcile(id, floor, state, t));  // decided under the floor, as taken
  ASSERT_TRUE(state.Decide(floor, t, 1).allowed);
  Interval(t, kPartner, id, 1000, 50, 10);
  Interval(t, kPartner, id, 1000, 50, 10);
  const Rate sixty = us_.Use(kPartner, id, 0, t);
  ASSERT_EQ(Str(sixty), "60/1000ms burst 6");
  EXPECT_TRUE(us_.Reconcile(id, sixty, state, t));
  // Moved without a fresh burst: what the floor's bucket held (1), not 6.
  EXPECT_EQ(state.Available(sixty, t), 1);
  EXPECT_FALSE(us_.Reconcile(id, sixty, state, t + 1));
}

TEST_F(RegionSharesTest, AnIdleKeyNeverRefillsAtAShareItLostMeanwhile) {
  const KeyId id = Id(kPartner, "acme");
  KeyLimiter state(Algorithm::kGcra);
  int64_t t = kT0;
  Interval(t, kPartner, id, 1000, 50, 10);
  Interval(t, kPartner, id, 1000, 50, 10);
  const Rate sixty = us_.Use(kPartner, id, 0, t);
  ASSERT_EQ(sixty.limit(), 60);
  us_.Reconcile(id, sixty, state, t);
  ASSERT_TRUE(state.Decide(sixty, t, 1).allowed);
  // Idle here (no use) while the share falls to the floor and comes back to 60.
  Interval(t, kPartner, id, 0, 1000, 1000);
  ASSERT_EQ(Self(us_, kPartner, id, t).share, 10);
  Interval(t, kPartner, id, 1000, 50, 10);
  Interval(t, kPartner, id, 1000, 50, 10);
  ASSERT_EQ(Self(us_, kPartner, id, t).share, 60);
  // Left under 60 it would be full (6); it refilled at the floor's burst of 1.
  const Rate now_rate = us_.Use(kPartner, id, 0, t);
  ASSERT_EQ(Str(now_rate), Str(sixty));
  EXPECT_EQ(state.Available(sixty, t), 6);
  EXPECT_TRUE(us_.Reconcile(id, now_rate, state, t));
  EXPECT_EQ(state.Available(now_rate, t), 1);
}

// Random demands, reports and uses of one key in each of the two bucket algorithms: after every
// Reconcile, the key may admit no more at once than it could before under the share its state
// was decided at, nor more than the burst of the lowest share in force since then.
TEST_F(RegionSharesTest, ReconcileNeverRaisesWhatAKeyMayAdmit) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const auto pick = [&](std::initializer_list<int64_t> from) {
    return *(from.begin() + static_cast<std::ptrdiff_t>(rng() % from.size()));
  };
  for (const int policy : {kPartner, kBulk}) {
    const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
    const KeyId id = Id(policy, "random");
    KeyLimiter state(p.algorithm);
    Rate decided = us_.Use(policy, id, 0, kT0);
    int64_t lowest = decided.limit();  // since the last use
    int64_t t = kT0;
    for (int interval = 0; interval < 120; ++interval) {
      const int64_t us = pick({0, 10, 100, 1000, 5000});
      const int64_t eu = pick({0, 10, 100, 1000, 5000});
      const int64_t ap = pick({0, 10, 100, 1000, 5000});
      Interval(t, policy, id, us, eu, ap);
      lowest = std::min(lowest, Self(us_, policy, id, t).share);
      // Uses after the rebalance, the first sometimes at its very ms.
      const int uses = static_cast<int>(rng() % 4);
      int64_t now = t - kInterval / 2;
      for (int u = 0; u < uses; ++u) {
        if (u > 0 || rng() % 3 != 0) now += static_cast<int64_t>(rng() % 300);
        const Rate rate = us_.Use(policy, id, 0, now);
        const KeyLimiter before = state;
        const bool moved = us_.Reconcile(id, rate, state, now);
        if (!moved) {
          EXPECT_EQ(Str(rate), Str(decided)) << "decided under another share, not moved";
        }
        const Rate low = ShareRateOf(policy, std::min(lowest, rate.limit()));
        EXPECT_LE(state.Available(rate, now), before.Available(decided, now))
            << "interval " << interval << ": " << Str(decided) << " -> " << Str(rate);
        EXPECT_LE(state.Available(rate, now), low.burst())
            << "interval " << interval << ": lowest share since " << lowest;
        state.Decide(rate, now, 1 + static_cast<int64_t>(rng() % 3));
        decided = rate;
        lowest = rate.limit();
      }
    }
  }
}

TEST_F(RegionSharesTest, AKeyHandedToAnotherNodeOfTheRegionKeepsItsShare) {
  const KeyId id = Id(kPartner, "acme");
  int64_t t = kT0;
  Interval(t, kPartner, id, 1000, 50, 10);
  Interval(t, kPartner, id, 1000, 50, 10);
  const Rate sixty = us_.Use(kPartner, id, 0, t);
  KeyLimiter state(Algorithm::kGcra);
  us_.Reconcile(id, sixty, state, t);
  const std::pair<int64_t, int64_t> carried = us_.Carried(id);
  EXPECT_EQ(carried, (std::pair<int64_t, int64_t>{60, 60}));
  // It left: this node no longer tracks or reports it.
  EXPECT_EQ(us_.counters().keys.load(), 0);
  EXPECT_EQ(us_.Carried(id), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(Self(us_, kPartner, id, t).share, 10);

  RegionShares next(policies_, Options("us"));
  next.Adopt(kPartner, id, carried.first, carried.second, t);
  EXPECT_EQ(Self(next, kPartner, id, t).share, 60);
  EXPECT_EQ(Str(next.Use(kPartner, id, 1, t)), Str(sixty));
  const KeyLimiter before = state;
  EXPECT_FALSE(next.Reconcile(id, sixty, state, t));  // decided under 60: goes on as it was
  EXPECT_EQ(state.Available(sixty, t), before.Available(sixty, t));
}

TEST_F(RegionSharesTest, AKeyHandedOverGoesOnFromTheLowestShareSinceItWasLastUsed) {
  const KeyId id = Id(kPartner, "acme");
  int64_t t = kT0;
  Interval(t, kPartner, id, 1000, 50, 10);
  Interval(t, kPartner, id, 1000, 50, 10);
  const Rate sixty = us_.Use(kPartner, id, 0, t);
  KeyLimiter state(Algorithm::kGcra);
  us_.Reconcile(id, sixty, state, t);
  Interval(t, kPartner, id, 0, 1000, 1000);  // down to 10, idle here
  Interval(t, kPartner, id, 1000, 50, 10);
  Interval(t, kPartner, id, 1000, 50, 10);  // back to 60
  const std::pair<int64_t, int64_t> carried = us_.Carried(id);
  EXPECT_EQ(carried, (std::pair<int64_t, int64_t>{60, 10}));
  RegionShares next(policies_, Options("us"));
  next.Adopt(kPartner, id, carried.first, carried.second, t);
  EXPECT_TRUE(next.Reconcile(id, next.Use(kPartner, id, 1, t), state, t));
  EXPECT_LE(state.Available(sixty, t), 1);
  // A state decided under the whole limit (before regions) is taken as such.
  const KeyId whole = Id(kPartner, "whole");
  next.Adopt(kPartner, whole, 60, 120, t);
  KeyLimiter full(Algorithm::kGcra);
  EXPECT_TRUE(next.Reconcile(whole, next.Use(kPartner, whole, 1, t), full, t));
  EXPECT_EQ(full.Available(sixty, t), 6);  // cut from 12 to the share's burst
}

TEST_F(RegionSharesTest, AdoptIgnoresSharesThatCannotBeAndKeysServedHereMeanwhile) {
  const KeyId id = Id(kPartner, "acme");
  us_.Adopt(kLocal, Id(kLocal, "acme"), 3, 3, kT0);  // not a global limit
  us_.Adopt(kPartner, id, 0, 10, kT0);
  us_.Adopt(kPartner, id, 121, 10, kT0);
  us_.Adopt(kPartner, id, 60, 0, kT0);
  us_.Adopt(kPartner, id, 60, 121, kT0);
  us_.Adopt(kPartner, id, 5, 10, kT0);  // below the smallest share (10): it holds no token
  us_.Adopt(kPartner, id, 60, 5, kT0);
  EXPECT_EQ(us_.counters().keys.load(), 0);
  // Served here before the hand-off arrived: its own record stands.
  us_.Use(kPartner, id, 1, kT0);
  us_.Adopt(kPartner, id, 60, 60, kT0);
  EXPECT_EQ(Self(us_, kPartner, id, kT0).share, 10);
}

TEST_F(RegionSharesTest, ViewOfSaysWhatWasReceivedThisRegionFirst) {
  const KeyId id = Id(kPartner, "acme");
  Offer(us_, kPartner, id, 1000, kT0 - kInterval, kT0);
  Sent ap = From("ap");
  ap.keys = {{kPartner, id, 10, 10}};
  Sent eu;
  eu.keys = {{kPartner, id, 50, 40}};
  ASSERT_TRUE(Receive(us_, ap, kT0 - 20).ok());
  ASSERT_TRUE(Receive(us_, eu, kT0 - 10).ok());
  std::vector<RegionShares::View> v = us_.ViewOf(kPartner, &id, kT0);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].region, "us");
  EXPECT_EQ(v[0].share, 10);
  EXPECT_EQ(v[0].demand, 1000);
  EXPECT_EQ(v[0].report_age_ms, 0);
  EXPECT_EQ(v[0].link_age_ms, 0);
  EXPECT_TRUE(v[0].link_up);
  EXPECT_EQ(v[1].region, "ap");
  EXPECT_EQ(v[1].share, 10);
  EXPECT_EQ(v[1].demand, 10);
  EXPECT_EQ(v[1].report_age_ms, 20);
  EXPECT_EQ(v[1].link_age_ms, 20);
  EXPECT_TRUE(v[1].link_up);
  EXPECT_EQ(v[2].region, "eu");
  EXPECT_EQ(v[2].share, 40);
  EXPECT_EQ(v[2].demand, 50);
  EXPECT_EQ(v[2].report_age_ms, 10);
  // Not heard from for more than an interval and a half: the links are down; the last word
  // stays.
  v = us_.ViewOf(kPartner, &id, kT0 - 10 + 3 * kInterval / 2 + 1);
  EXPECT_FALSE(v[1].link_up);
  EXPECT_FALSE(v[2].link_up);
  EXPECT_EQ(v[2].link_age_ms, 3 * kInterval / 2 + 1);
  EXPECT_EQ(v[2].share, 40);
  // The links alone; a key of another policy, or one not tracked: what a first use would get.
  v = us_.ViewOf(kPartner, nullptr, kT0);
  EXPECT_EQ(v[0].share, -1);
  EXPECT_EQ(v[2].link_age_ms, 10);
  v = us_.ViewOf(kBulk, &id, kT0);
  EXPECT_EQ(v[0].share, 50);
  EXPECT_EQ(v[0].demand, 0);
  EXPECT_EQ(v[2].share, -1);
  const KeyId other = Id(kPartner, "other");
  EXPECT_EQ(us_.ViewOf(kPartner, &other, kT0)[0].share, 10);
  EXPECT_EQ(us_.counters().keys.load(), 1);  // asking tracks nothing
}

TEST_F(RegionSharesTest, TopListsTheKeysWithTheMostDemandAsMeasured) {
  Offer(us_, kPartner, Id(kPartner, "a"), 300, kT0 - kInterval, kT0);
  Offer(us_, kBulk, Id(kBulk, "b"), 1000, kT0 - kInterval, kT0);
  Offer(us_, kPartner, Id(kPartner, "c"), 10, kT0 - kInterval, kT0);
  EXPECT_EQ(us_.Top(10).front().demand, 0);  // not measured yet
  us_.Measure(kT0);
  const std::vector<RegionShares::TopShare> top = us_.Top(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].policy, "bulk");
  EXPECT_EQ(top[0].demand, 1000);
  EXPECT_EQ(top[0].share, 50);
  EXPECT_EQ(top[1].policy, "partner");
  EXPECT_EQ(top[1].demand, 300);
  EXPECT_EQ(us_.Top(10).size(), 3u);
  EXPECT_TRUE(us_.Top(0).empty());
}

TEST(RegionSharesReports, EachKeyGoesToItsOwnerThereAndEveryNodeHearsTheLinkIsUp) {
  const PolicySet policies = Parse();
  RegionOptions o = Options("us");
  o.others[1].members = {"eu-b:1", "eu-a:1"};
  o.others.push_back({"sa", {}, "limiterd.sa.svc:7450"});  // not answered yet: nobody to send to
  ASSERT_TRUE(RegionShares::Check(policies, o).ok());
  RegionShares us(policies, o);
  // Nothing used yet: one empty report per node.
  us.Measure(kT0);
  std::vector<RegionShares::Report> reports = us.Reports(Address("us"), kPolicyDigest, kKeySeed);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(us.counters().reports_sent.load(), 3);
  const Ring eu({"eu-a:1", "eu-b:1"});
  std::map<std::string, KeyId> by_owner;  // a key owned there by each eu node
  for (int i = 0; by_owner.size() < 2; ++i) {
    const KeyId id = protocol::LimitId(policies.policies()[kPartner], "k" + std::to_string(i), {});
    by_owner.emplace(eu.members()[eu.OwnerOfSlot(RingSlotOf(id))], id);
  }
  for (const auto& [owner, id] : by_owner) {
    for (int64_t t = kT0; t < kT0 + kInterval; t += 100) us.Use(kPartner, id, 100, t);
  }
  us.Use(kPartner, protocol::LimitId(policies.policies()[kPartner], "idle", {}), 0, kT0);
  us.Measure(kT0 + kInterval);
  reports = us.Reports(Address("us"), kPolicyDigest, kKeySeed);
  ASSERT_EQ(reports.size(), 3u);
  std::map<std::string, std::vector<KeyId>> got;
  for (const RegionShares::Report& r : reports) {
    const Wire w(r.body);
    const wire::RegionReport& report = w.report();
    EXPECT_EQ(report.region()->str(), "us");
    EXPECT_EQ(report.node()->str(), Address("us"));
    EXPECT_EQ(report.policies(), kPolicyDigest);
    EXPECT_EQ(report.key_seed(), kKeySeed);
    EXPECT_EQ(report.settings(), us.settings());
    EXPECT_EQ(report.ring_version(),
              r.region == "eu" ? eu.version() : Ring({"ap-node:1"}).version());
    for (const wire::KeyDemand* k : *report.keys()) {
      EXPECT_EQ(k->demand(), 1000);
      EXPECT_EQ(k->share(), 10);
      EXPECT_EQ(k->policy(), kPartner);
      got[r.region + "/" + r.member].push_back(KeyId{k->id_lo(), k->id_hi()});
    }
  }
  EXPECT_EQ(got["eu/eu-a:1"], (std::vector<KeyId>{by_owner["eu-a:1"]}));
  EXPECT_EQ(got["eu/eu-b:1"], (std::vector<KeyId>{by_owner["eu-b:1"]}));
  EXPECT_EQ(got["ap/ap-node:1"].size(), 2u);
  EXPECT_EQ(got.size(), 3u);
}

TEST(RegionSharesReports, AReportCarriesAtMost4096KeysAFrame) {
  const PolicySet policies = Parse();
  RegionShares us(policies, Options("us"));
  for (int i = 0; i < 4097; ++i) {
    us.Use(kBulk, protocol::LimitId(policies.policies()[kBulk], "k" + std::to_string(i), {}), 1,
           kT0 + 100);
  }
  us.Measure(kT0 + kInterval);
  const std::vector<RegionShares::Report> reports =
      us.Reports("us-node:1", kPolicyDigest, kKeySeed);
  std::map<std::string, std::vector<size_t>> keys;
  for (const RegionShares::Report& r : reports) {
    const Wire w(r.body);
    keys[r.member].push_back(w.report().keys()->size());
  }
  EXPECT_EQ(keys["ap-node:1"], (std::vector<size_t>{4096, 1}));
  EXPECT_EQ(keys["eu-node:1"], (std::vector<size_t>{4096, 1}));
}

}  // namespace
}  // namespace limiter::regions_test
