// RegionShares alone, with no Node: built from a policy file (the shared fixture) and
// RegionOptions, driven with explicit times, its reports carried as the wire carries them (a
// Regions peer request, verified). Use answers the share a key is enforced at and counts its
// demand; a share falls at once and rises one interval after the reports that justify it, to
// no more than they justified, never below a region's floor; regions exchanging reports agree
// and their shares never sum past L, with reports lost or late or a region cut off (which keeps
// its last share, never more). Reports that cannot be trusted are refused with the reason; at
// region_max_keys a key gets the floor, counted. Reconcile moves a key's state to the share in
// force without raising what it may admit; a key handed over keeps its share; ViewOf and Top
// say what was received; Check names the field it refuses; and threads using keys while
// reports arrive and shares move leave the shares within L.
#include "server/region_shares.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/region_share.h"
#include "protocol/rules.h"
#include "protocol/wire.h"
#include "test/support/policies.h"
#include "test/unit/test_seed.h"

namespace limiter {
namespace {

// partner: L = 120, B = 12, so the smallest share is 10 (burst 1); the floor, 5% of 120 = 6,
// is raised to it. bulk: L = B = 1000, any share holds a token; its floor is 50.
const char* kPolicies = R"(
policies:
  - {name: partner, algorithm: gcra, limit: 120, window: 1s, burst: 12, class: contract,
     scope: global}
  - {name: bulk, algorithm: token_bucket, limit: 1000, window: 1s, burst: 1000, class: contract,
     scope: global}
  - {name: local, algorithm: token_bucket, limit: 5, window: 1s, class: contract}
)";
constexpr int kPartner = 0, kBulk = 1, kLocal = 2;

constexpr uint64_t kPolicyDigest = 0x9011c1e5;
constexpr uint64_t kKeySeed = 0x5eed;
constexpr int64_t kInterval = 2000;
constexpr int64_t kT0 = 1'000'000;  // a tick: a multiple of the interval

PolicySet Parse(const char* text = kPolicies) {
  return testing::Policies(text, "region_shares.yaml");
}

std::string Address(const std::string& region) { return region + "-node:1"; }

// A node of `region` in a deployment of ap, eu and us, one node each.
RegionOptions Options(const std::string& region) {
  RegionOptions o;
  o.region = region;
  o.rebalance_interval_ms = kInterval;
  for (const char* other : {"ap", "eu", "us"}) {
    if (region != other) o.others.push_back({other, {Address(other)}, ""});
  }
  return o;
}

std::string Str(const Rate& r) {
  return std::to_string(r.limit()) + "/" + std::to_string(r.window_ms()) + "ms burst " +
         std::to_string(r.burst());
}

// One key of a report: its demand there and its share there.
struct Demand {
  int policy = kPartner;
  KeyId id;
  int64_t demand = 0;
  int64_t share = 10;
};

// A report as a node of another region sends it (eu's, unless changed); any field may be made
// wrong.
struct Sent {
  std::string region = "eu";
  bool no_region = false;
  std::string node = "eu-node:1";
  uint64_t policies = kPolicyDigest;
  uint64_t key_seed = kKeySeed;
  uint64_t ring_version = 0;
  uint64_t settings = 0;
  std::vector<Demand> keys;
};

Sent From(const std::string& region) {
  Sent s;
  s.region = region;
  s.node = Address(region);
  return s;
}

// A report's bytes as a node receives them (one Regions peer request), verified, and the
// report in them. Not copyable: the report points into the bytes.
class Wire {
 public:
  explicit Wire(std::span<const uint8_t> body) : bytes_(body.begin(), body.end()) {
    const wire::Request* request = VerifiedRequest(bytes_, storage_);
    EXPECT_NE(request, nullptr);
    EXPECT_NE(request ? request->peer() : nullptr, nullptr);
    report_ = request && request->peer() ? request->peer()->report() : nullptr;
    EXPECT_NE(report_, nullptr);
  }
  explicit Wire(const Sent& s) : Wire(Build(s).span()) {}
  Wire(const Wire&) = delete;
  Wire& operator=(const Wire&) = delete;

  const wire::RegionReport& report() const { return *report_; }

 private:
  struct Built {
    flatbuffers::FlatBufferBuilder fbb;
    std::span<const uint8_t> body;
    std::span<const uint8_t> span() const { return body; }
  };
  static Built Build(const Sent& s) {
    Built b;
    std::vector<wire::KeyDemand> keys;
    for (const Demand& d : s.keys) {
      keys.emplace_back(d.id.lo, d.id.hi, d.demand, d.share, static_cast<uint16_t>(d.policy));
    }
    const auto region =
        s.no_region ? flatbuffers::Offset<flatbuffers::String>() : b.fbb.CreateString(s.region);
    const auto report =
        wire::CreateRegionReport(b.fbb, region, b.fbb.CreateString(s.node), s.policies, s.key_seed,
                                 b.fbb.CreateVectorOfStructs(keys), s.ring_version, s.settings);
    b.body = FinishPeerRequest(b.fbb, wire::OpType::Regions,
                               wire::CreatePeer(b.fbb, 0, 0, 0, 0, 0, report));
    return b;
  }

  std::vector<uint8_t> bytes_;
  std::vector<uint64_t> storage_;
  const wire::RegionReport* report_ = nullptr;
};

// The us node of the deployment, alone; the other regions' reports are written by the test.
class RegionSharesTest : public ::testing::Test {
 protected:
  explicit RegionSharesTest(RegionOptions options = Options("us"))
      : policies_(Parse()), us_(policies_, std::move(options)) {}

  KeyId Id(int policy, const std::string& key) const {
    return protocol::LimitId(policies_.policies()[static_cast<size_t>(policy)], key, {});
  }
  Rate ShareRateOf(int policy, int64_t share) const {
    const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
    return *ShareRate(p.algorithm, p.rate, share);
  }
  // `per_second` units asked of `id` over [from, to), a tenth of it every 100 ms.
  static void Offer(RegionShares& s, int policy, const KeyId& id, int64_t per_second, int64_t from,
                    int64_t to) {
    for (int64_t t = from; t < to; t += 100) s.Use(policy, id, per_second / 10, t);
  }
  Result<int64_t> Receive(RegionShares& s, Sent sent, int64_t now, const Ring& own = Ring(),
                          const std::string& self = Address("us")) {
    if (sent.settings == 0) sent.settings = s.settings();
    const Wire w(sent);
    return s.Receive(w.report(), kPolicyDigest, kKeySeed, own, self, now);
  }
  RegionShares::View Self(const RegionShares& s, int policy, const KeyId& id, int64_t now) const {
    return s.ViewOf(policy, &id, now).front();
  }
  // One interval of the us node from the tick at `t`: us offers `us_demand` over the interval
  // before, measures, hears eu and ap (their demands), and rebalances half an interval later.
  void Interval(int64_t& t, int policy, const KeyId& id, int64_t us_demand, int64_t eu_demand,
                int64_t ap_demand) {
    Offer(us_, policy, id, us_demand, t - kInterval, t);
    us_.Measure(t);
    Sent eu;
    eu.keys = {{policy, id, eu_demand, 10}};
    if (eu_demand == 0) eu.keys.clear();  // no traffic there: the report says the link is up
    Sent ap = From("ap");
    ap.keys = {{policy, id, ap_demand, 10}};
    if (ap_demand == 0) ap.keys.clear();
    EXPECT_TRUE(Receive(us_, eu, t + 30).ok());
    EXPECT_TRUE(Receive(us_, ap, t + 30).ok());
    us_.Rebalance(t + kInterval / 2);
    t += kInterval;
  }

  PolicySet policies_;
  RegionShares us_;
};

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
}  // namespace limiter
