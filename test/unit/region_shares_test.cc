// RegionShares alone, with no Node (the fixture: region_shares_harness.h). Use answers the
// share a key is enforced at and counts its demand; a share falls at once and rises one
// interval after the reports that justify it, to no more than they justified, never below a
// region's floor; a report not delivered stops the sender's raises; reports that cannot be
// trusted are refused with the reason, and only well-formed global keys owned here are taken
// from one; IsMemberOf knows the nodes listed per region.
#include "server/region_shares.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/share_allocation.h"
#include "test/unit/region_shares_harness.h"

namespace limiter::regions_test {
namespace {

TEST_F(RegionSharesTest, UseAnswersTheFloorForANewKeyAndTracksIt) {
  const KeyId id = Id(kPartner, "acme");
  EXPECT_EQ(Str(us_.Use(kPartner, id, 1, kT0)), Str(ShareRateOf(kPartner, 10)));
  EXPECT_EQ(Str(ShareRateOf(kPartner, 10)), "10/1000ms burst 1");
  EXPECT_EQ(us_.counters().keys.load(), 1);
  EXPECT_EQ(Str(us_.Use(kPartner, id, 0, kT0 + 1)), Str(ShareRateOf(kPartner, 10)));
  EXPECT_EQ(us_.counters().keys.load(), 1);  // the same key
  const KeyId bulk = Id(kBulk, "acme");
  EXPECT_EQ(Str(us_.Use(kBulk, bulk, 0, kT0)), "50/1000ms burst 50");
  EXPECT_EQ(us_.counters().keys.load(), 2);
  EXPECT_EQ(us_.counters().keys_untracked.load(), 0);
  EXPECT_EQ(Self(us_, kPartner, id, kT0).share, 10);
  EXPECT_EQ(Self(us_, kBulk, bulk, kT0).share, 50);
}

TEST_F(RegionSharesTest, UseCountsTheUnitsAskedOverTheLastIntervalAsTheDemand) {
  const KeyId id = Id(kPartner, "acme");
  const KeyId quiet = Id(kPartner, "quiet");
  Offer(us_, kPartner, id, 1000, kT0 - kInterval, kT0);
  for (int64_t t = kT0 - kInterval; t < kT0; t += 100) {
    us_.Use(kPartner, quiet, 0, t);   // an op that asks for nothing
    us_.Use(kPartner, quiet, -5, t);  // nor does this
  }
  us_.Use(kPartner, id, 500, kT0 + 100);  // after the tick: the next interval's
  EXPECT_EQ(Self(us_, kPartner, id, kT0).demand, 1000);
  EXPECT_EQ(Self(us_, kPartner, quiet, kT0).demand, 0);
  us_.Measure(kT0);
  const std::vector<RegionShares::TopShare> top = us_.Top(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].policy, "partner");
  EXPECT_EQ(top[0].demand, 1000);
  EXPECT_EQ(top[1].demand, 0);
  // An interval later the 500 are counted, the 1000 are not; one more and nothing is.
  us_.Measure(kT0 + kInterval);
  EXPECT_EQ(us_.Top(1).front().demand, (500 * 1000 + 1899) / 1900);
  us_.Measure(kT0 + 2 * kInterval);
  EXPECT_EQ(us_.Top(1).front().demand, 0);
}

TEST_F(RegionSharesTest, ARaiseWaitsOneIntervalAndGoesNoHigherThanItWasJustifiedThen) {
  const KeyId id = Id(kPartner, "acme");
  int64_t t = kT0;
  // us wants 1000, eu 50, ap 10: 60, 50 and 10. Justified now, in force one interval later.
  Interval(t, kPartner, id, 1000, 50, 10);
  RegionShares::View v = Self(us_, kPartner, id, t - kInterval / 2);
  EXPECT_EQ(v.share, 10);
  EXPECT_EQ(v.pending_share, 60);
  EXPECT_EQ(Str(us_.Use(kPartner, id, 0, t - kInterval / 2)), Str(ShareRateOf(kPartner, 10)));
  // The next reports justify 100 (eu wants 10 now): the raise is to the 60 of the interval
  // before, not to 100.
  Interval(t, kPartner, id, 1000, 10, 10);
  v = Self(us_, kPartner, id, t - kInterval / 2);
  EXPECT_EQ(v.share, 60);
  EXPECT_EQ(v.pending_share, 0);
  EXPECT_EQ(Str(us_.Use(kPartner, id, 0, t - kInterval / 2)), "60/1000ms burst 6");
  Interval(t, kPartner, id, 1000, 10, 10);
  v = Self(us_, kPartner, id, t - kInterval / 2);
  EXPECT_EQ(v.share, 60);
  EXPECT_EQ(v.pending_share, 100);
  Interval(t, kPartner, id, 1000, 10, 10);
  EXPECT_EQ(Self(us_, kPartner, id, t).share, 100);
  EXPECT_EQ(Str(us_.Use(kPartner, id, 0, t)), "100/1000ms burst 10");
}

TEST_F(RegionSharesTest, AFallTakesEffectAtOnceAndCancelsARaiseWaiting) {
  const KeyId id = Id(kPartner, "acme");
  int64_t t = kT0;
  Interval(t, kPartner, id, 1000, 50, 10);
  Interval(t, kPartner, id, 1000, 50, 10);
  ASSERT_EQ(Self(us_, kPartner, id, t).share, 60);
  // eu wants 1000 too: 55 each, at this very rebalance.
  Interval(t, kPartner, id, 1000, 1000, 10);
  EXPECT_EQ(Self(us_, kPartner, id, t - kInterval / 2).share, 55);
  EXPECT_EQ(Str(us_.Use(kPartner, id, 0, t - kInterval / 2)), "55/1000ms burst 5");
  // eu wants 50 again: 60 waits; then all three want 1000: 40 at once, and nothing waits.
  Interval(t, kPartner, id, 1000, 50, 10);
  EXPECT_EQ(Self(us_, kPartner, id, t).pending_share, 60);
  Interval(t, kPartner, id, 1000, 1000, 1000);
  EXPECT_EQ(Self(us_, kPartner, id, t).share, 40);
  EXPECT_EQ(Self(us_, kPartner, id, t).pending_share, 0);
  // A raise starts over: one interval to wait again.
  Interval(t, kPartner, id, 1000, 50, 10);
  EXPECT_EQ(Self(us_, kPartner, id, t).share, 40);
  EXPECT_EQ(Self(us_, kPartner, id, t).pending_share, 60);
}

TEST_F(RegionSharesTest, ARegionKeepsItsFloorWhateverTheOthersWant) {
  const KeyId bulk = Id(kBulk, "acme");
  const KeyId partner = Id(kPartner, "acme");
  int64_t t = kT0;
  for (int i = 0; i < 4; ++i) {  // in use here, asking for nothing
    Interval(t, kBulk, bulk, 0, 5000, 5000);
    EXPECT_EQ(Self(us_, kBulk, bulk, t).share, 50);  // 5% of 1000
    EXPECT_EQ(Self(us_, kBulk, bulk, t).pending_share, 0);
  }
  for (int i = 0; i < 4; ++i) {
    Interval(t, kPartner, partner, 0, 5000, 5000);
    EXPECT_EQ(Self(us_, kPartner, partner, t).share, 10);  // 5% of 120 is 6: a quantum is 10
  }
  // The others, from the same reports, take the rest and no more.
  const std::vector<int64_t> demands = {5000, 5000, 0};
  EXPECT_EQ(AllocateShares(1000, demands, 50, 1), (std::vector<int64_t>{475, 475, 50}));
}

TEST_F(RegionSharesTest, AKeyAnotherRegionNoLongerReportsCountsAsWantingNothingThere) {
  const KeyId id = Id(kPartner, "acme");
  int64_t t = kT0;
  Interval(t, kPartner, id, 1000, 1000, 10);
  Interval(t, kPartner, id, 1000, 1000, 10);
  ASSERT_EQ(Self(us_, kPartner, id, t).share, 55);
  Interval(t, kPartner, id, 1000, 0, 10);  // eu's report, without the key
  EXPECT_EQ(Self(us_, kPartner, id, t).pending_share, 100);
}

TEST_F(RegionSharesTest, ANodeThatNeverHeardFromARegionHoldsEveryKeyAtItsFloor) {
  const KeyId id = Id(kPartner, "acme");
  int64_t t = kT0;
  for (int i = 0; i < 4; ++i) {  // eu reports; ap never does
    Offer(us_, kPartner, id, 1000, t - kInterval, t);
    us_.Measure(t);
    Sent eu;
    eu.keys = {{kPartner, id, 10, 10}};
    ASSERT_TRUE(Receive(us_, eu, t + 30).ok());
    us_.Rebalance(t + kInterval / 2);
    EXPECT_EQ(Self(us_, kPartner, id, t + kInterval / 2).share, 10);
    EXPECT_EQ(Self(us_, kPartner, id, t + kInterval / 2).pending_share, 0);
    t += kInterval;
  }
  const std::vector<RegionShares::View> links = us_.ViewOf(kPartner, nullptr, t);
  ASSERT_EQ(links.size(), 3u);
  EXPECT_EQ(links[1].region, "ap");
  EXPECT_EQ(links[1].link_age_ms, -1);
  EXPECT_FALSE(links[1].link_up);
  // A key handed here at a larger share falls to the floor too.
  const KeyId handed = Id(kPartner, "handed");
  us_.Adopt(kPartner, handed, 60, 60, t);
  EXPECT_EQ(Self(us_, kPartner, handed, t).share, 60);
  us_.Rebalance(t);
  EXPECT_EQ(Self(us_, kPartner, handed, t).share, 10);
}

TEST_F(RegionSharesTest, AReportNotDeliveredStopsTheSendersRaises) {
  const KeyId id = Id(kPartner, "acme");
  int64_t t = kT0;
  us_.NoteSent("eu", false, t);  // this tick's report to eu was lost
  us_.NoteSent("eu", true, t);   // a delivered one does not undo that
  us_.NoteSent("mars", false, t);
  Interval(t, kPartner, id, 1000, 50, 10);
  EXPECT_EQ(Self(us_, kPartner, id, t).pending_share, 0);
  Interval(t, kPartner, id, 1000, 50, 10);
  EXPECT_EQ(Self(us_, kPartner, id, t).pending_share, 60);
  us_.NoteSent("ap", false, t);  // lost again: the raise waiting is off
  Interval(t, kPartner, id, 1000, 50, 10);
  EXPECT_EQ(Self(us_, kPartner, id, t).share, 10);
  EXPECT_EQ(Self(us_, kPartner, id, t).pending_share, 0);
  Interval(t, kPartner, id, 1000, 50, 10);
  Interval(t, kPartner, id, 1000, 50, 10);
  EXPECT_EQ(Self(us_, kPartner, id, t).share, 60);
}

// eu runs two nodes; the test hears from one of them only.
RegionOptions TwoNodesInEu() {
  RegionOptions o = Options("us");
  o.others[1].members = {"eu-a:1", "eu-b:1"};
  EXPECT_EQ(o.others[1].name, "eu");
  return o;
}

class RegionSharesTwoNodesThere : public RegionSharesTest {
 protected:
  RegionSharesTwoNodesThere() : RegionSharesTest(TwoNodesInEu()) {}
};

TEST_F(RegionSharesTwoNodesThere, AKeyWhoseOwnerThereWasNotHeardFromRaisesNothing) {
  const Ring eu({"eu-a:1", "eu-b:1"});
  KeyId heard, silent;  // owned in eu by eu-a, by eu-b
  bool have_heard = false, have_silent = false;
  for (int i = 0; !(have_heard && have_silent); ++i) {
    const KeyId id = Id(kPartner, "k" + std::to_string(i));
    if (eu.members()[eu.OwnerOfSlot(RingSlotOf(id))] == "eu-a:1") {
      heard = id;
      have_heard = true;
    } else {
      silent = id;
      have_silent = true;
    }
  }
  int64_t t = kT0;
  for (int i = 0; i < 3; ++i) {
    Offer(us_, kPartner, heard, 1000, t - kInterval, t);
    Offer(us_, kPartner, silent, 1000, t - kInterval, t);
    us_.Measure(t);
    Sent a;
    a.node = "eu-a:1";
    a.keys = {{kPartner, heard, 50, 10}};
    Sent ap = From("ap");
    ap.keys = {{kPartner, heard, 10, 10}, {kPartner, silent, 10, 10}};
    ASSERT_TRUE(Receive(us_, a, t + 30).ok());
    ASSERT_TRUE(Receive(us_, ap, t + 30).ok());
    us_.Rebalance(t + kInterval / 2);
    t += kInterval;
  }
  EXPECT_EQ(Self(us_, kPartner, heard, t).share, 60);
  EXPECT_EQ(Self(us_, kPartner, silent, t).share, 10) << "raised with its owner in eu unheard";
  EXPECT_EQ(Self(us_, kPartner, silent, t).pending_share, 0);
}

TEST_F(RegionSharesTest, ReportsThatCannotBeTrustedAreRefusedWithTheReasonAndChangeNothing) {
  const KeyId id = Id(kPartner, "acme");
  const Ring two({"us-node:1", "us-node:2"});
  // eu's report of `id`, changed by `change`.
  const auto refused = [&](auto change, const Ring& own = Ring()) {
    Sent s;
    s.keys = {{kPartner, id, 1000, 10}};
    change(s);
    Result<int64_t> r = Receive(us_, s, kT0, own);
    return r.ok() ? std::string("(taken)") : r.error();
  };
  EXPECT_EQ(refused([](Sent& s) { s.region = "mars"; }),
            "region report from 'mars', which is not another region of this node's (regions: "
            "ap, eu, us)");
  EXPECT_EQ(refused([](Sent& s) { s.region = "us"; }),
            "region report from 'us', which is not another region of this node's (regions: "
            "ap, eu, us)");
  EXPECT_EQ(refused([](Sent& s) { s.no_region = true; }),
            "region report from '', which is not another region of this node's (regions: ap, "
            "eu, us)");
  const std::string long_name(10'000, 'x');
  const std::string error = refused([&](Sent& s) { s.region = long_name; });
  EXPECT_EQ(error.find(std::string(65, 'x')), std::string::npos) << "echoes the whole name";
  EXPECT_NE(error.find(std::string(64, 'x')), std::string::npos);
  EXPECT_EQ(refused([](Sent& s) { s.policies = kPolicyDigest + 1; }),
            "region report from 'eu' refused: its policy file differs");
  EXPECT_EQ(refused([](Sent& s) { s.key_seed = kKeySeed + 1; }),
            "region report from 'eu' refused: its key-id seed differs (regions share one "
            "cluster secret)");
  EXPECT_NE(refused([&](Sent& s) {
              s.settings = us_.settings() + 1;
            }).find("refused: its region settings differ"),
            std::string::npos);
  const uint64_t one = Ring({"us-node:1"}).version();
  EXPECT_NE(refused([&](Sent& s) { s.ring_version = one; }, two)
                .find("refused: it was routed by another list of this region's nodes"),
            std::string::npos);
  // Nothing of them was taken: no link, no key, no demand.
  EXPECT_EQ(us_.counters().reports_refused.load(), 8);
  EXPECT_EQ(us_.counters().reports_received.load(), 0);
  EXPECT_EQ(us_.counters().keys.load(), 0);
  for (const RegionShares::View& v : us_.ViewOf(kPartner, &id, kT0)) {
    if (v.region != "us") {
      EXPECT_EQ(v.link_age_ms, -1) << v.region;
      EXPECT_EQ(v.share, -1) << v.region;
    }
  }
  // The same report, right.
  EXPECT_EQ(refused([&](Sent& s) { s.ring_version = two.version(); }, two), "(taken)");
  EXPECT_EQ(us_.counters().reports_received.load(), 1);
  EXPECT_EQ(us_.counters().reports_refused.load(), 8);
}

TEST_F(RegionSharesTest, OnlyWellFormedGlobalKeysOwnedHereAreTakenFromAReport) {
  const Ring own({"us-node:1", "us-node:2"});
  std::vector<KeyId> mine, theirs;
  for (int i = 0; mine.size() < 2 || theirs.empty(); ++i) {
    const KeyId id = Id(kPartner, "k" + std::to_string(i));
    (own.members()[own.OwnerOfSlot(RingSlotOf(id))] == "us-node:1" ? mine : theirs).push_back(id);
  }
  const KeyId local = Id(kLocal, "k");
  Sent s;
  s.ring_version = own.version();
  s.keys = {{kPartner, mine[0], 50, 50},
            {kPartner, theirs[0], 50, 50},                                  // another node's here
            {kLocal, local, 50, 50},                                        // not a global limit
            {99, mine[1], 50, 50},                                          // no such policy
            {kPartner, KeyId{0, 0}, 50, 50},                                // no key
            {kPartner, Id(kPartner, "negative"), -1, 50},                   // no demand
            {kPartner, mine[1], std::numeric_limits<int64_t>::max(), 50}};  // bounded
  Result<int64_t> taken = Receive(us_, s, kT0, own);
  ASSERT_TRUE(taken.ok()) << taken.error();
  EXPECT_EQ(*taken, 2);
  EXPECT_EQ(us_.counters().keys.load(), 2);
  EXPECT_EQ(us_.counters().keys_untracked.load(), 0);
  EXPECT_EQ(us_.ViewOf(kPartner, &mine[0], kT0)[2].demand, 50);
  EXPECT_EQ(us_.ViewOf(kPartner, &mine[1], kT0)[2].demand, std::numeric_limits<int64_t>::max() / 4);
  EXPECT_EQ(us_.ViewOf(kPartner, &theirs[0], kT0)[2].share, -1);
  // In a region of one node every global key is this node's.
  s.ring_version = 0;
  taken = Receive(us_, s, kT0);
  ASSERT_TRUE(taken.ok()) << taken.error();
  EXPECT_EQ(*taken, 3);
}

TEST(RegionSharesMembers, IsMemberOfKnowsOnlyTheNodesListedForThatRegion) {
  const PolicySet policies = Parse();
  RegionOptions o = Options("us");
  o.others[0] = {"ap", {}, "limiterd.ap.svc:7450"};
  ASSERT_TRUE(RegionShares::Check(policies, o).ok());
  RegionShares s(policies, o);
  EXPECT_TRUE(s.IsMemberOf("eu", "eu-node:1"));
  EXPECT_FALSE(s.IsMemberOf("eu", "ap-node:1"));
  EXPECT_FALSE(s.IsMemberOf("ap", "ap-node:1"));  // its DNS name has not answered yet
  EXPECT_FALSE(s.IsMemberOf("us", "us-node:1"));  // this region is nobody's to speak for
  EXPECT_FALSE(s.IsMemberOf("mars", "eu-node:1"));
  EXPECT_FALSE(s.IsMemberOf("", ""));
  EXPECT_EQ(s.AllOtherMembers(), (std::vector<std::string>{"eu-node:1"}));
  s.SetMembers("ap", {"ap-2:7450", "ap-1:7450"});
  EXPECT_TRUE(s.IsMemberOf("ap", "ap-1:7450"));
  EXPECT_TRUE(s.IsMemberOf("ap", "ap-2:7450"));
  s.SetMembers("eu", {"eu-new:1"});
  EXPECT_FALSE(s.IsMemberOf("eu", "eu-node:1"));
  EXPECT_TRUE(s.IsMemberOf("eu", "eu-new:1"));
  s.SetMembers("us", {"us-node:1"});  // not another region: ignored
  s.SetMembers("mars", {"m:1"});
  EXPECT_FALSE(s.IsMemberOf("us", "us-node:1"));
  EXPECT_FALSE(s.IsMemberOf("mars", "m:1"));
  EXPECT_EQ(s.AllOtherMembers(), (std::vector<std::string>{"ap-1:7450", "ap-2:7450", "eu-new:1"}));
}

}  // namespace
}  // namespace limiter::regions_test
