// The fixture RegionShares' tests share: a deployment of three regions (ap, eu, us), one node
// each, and a policy file with two global policies and a local one; reports written field by
// field and carried as the wire carries them (a Regions peer request, verified); the us node
// alone (RegionSharesTest), driven with explicit times.
#ifndef LIMITER_TEST_UNIT_REGION_SHARES_HARNESS_H_
#define LIMITER_TEST_UNIT_REGION_SHARES_HARNESS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/share_allocation.h"
#include "protocol/rules.h"
#include "protocol/wire.h"
#include "server/region_shares.h"
#include "test/support/policies.h"

namespace limiter::regions_test {

// partner: L = 120, B = 12, so the smallest share is 10 (burst 1); the floor, 5% of 120 = 6,
// is raised to it. bulk: L = B = 1000, any share holds a token; its floor is 50.
inline constexpr const char* kPolicies = R"(
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

inline PolicySet Parse(const char* text = kPolicies) {
  return testing::Policies(text, "region_shares.yaml");
}

inline std::string Address(const std::string& region) { return region + "-node:1"; }

// A node of `region` in a deployment of ap, eu and us, one node each.
inline RegionOptions Options(const std::string& region) {
  RegionOptions o;
  o.region = region;
  o.rebalance_interval_ms = kInterval;
  for (const char* other : {"ap", "eu", "us"}) {
    if (region != other) o.others.push_back({other, {Address(other)}, ""});
  }
  return o;
}

inline std::string Str(const Rate& r) {
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

inline Sent From(const std::string& region) {
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

}  // namespace limiter::regions_test

#endif  // LIMITER_TEST_UNIT_REGION_SHARES_HARNESS_H_
