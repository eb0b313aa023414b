// Regions in simulated time: three real Nodes, one per region, 30 ms apart, their wall clocks
// a few milliseconds apart (so their rebalance ticks are too), each with its own monotonic
// clock. Demand moves from region to region; then one region is cut off for 30 s while its
// demand jumps, and rejoins. Checked:
//   - after each shift the shares reach the allocation of the new demands within 3 rebalance
//     intervals;
//   - across the regions, every interval's admissions stay within B + L*t/W (the bound the
//     README states beside I1);
//   - a region cut off keeps its last share, never more, and its return adds no burst.
// The run is deterministic (no randomness); it prints the worst interval's figure.
#include <gtest/gtest.h>

#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/promise_check.h"
#include "common/share_allocation.h"
#include "protocol/key_id.h"
#include "protocol/request_builder.h"
#include "protocol/rules.h"
#include "protocol/wire.h"
#include "server/node.h"
#include "test/support/node_harness.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

constexpr int64_t kLimit = 120, kBurst = 12, kIntervalMs = 2000, kLatencyMs = 30;
const char* kPolicies = R"(
policies:
  - {name: partner, algorithm: gcra, limit: 120, window: 1s, burst: 12, class: contract,
     scope: global}
)";

struct SimRegion {
  std::string name;
  int64_t skew_ms = 0;                         // its wall clock against the simulation's
  std::unique_ptr<testing::NodeHarness> node;  // on its own monotonic clock
  double rate = 0;                             // requests/s its gateways send now
  double owed = 0;  // fractional arrivals carried to the next millisecond
  int64_t next_tick_wall = 0;
  bool rebalanced = true;  // since the last tick
};

class RegionsSim : public ::testing::Test {
 protected:
  explicit RegionsSim(int64_t skew = 0) : skew_(skew) {
    const std::vector<std::pair<std::string, int64_t>> regions = {
        {"ap", 7 + skew_}, {"eu", -4}, {"us", 0}};
    for (size_t i = 0; i < regions.size(); ++i) {
      SimRegion& r = regions_[regions[i].first];
      r.name = regions[i].first;
      r.skew_ms = regions[i].second;
      NodeOptions o;
      o.name = r.name;
      o.regions.region = r.name;
      o.regions.rebalance_interval_ms = kIntervalMs;
      for (const auto& [other, skew] : regions) {
        if (other != r.name) o.regions.others.push_back({other, {other + ":1"}, ""});
      }
      r.node = std::make_unique<testing::NodeHarness>(
          policies_, o, 5'000'000 + 123'457 * static_cast<int64_t>(i));
      r.next_tick_wall = kIntervalMs;
    }
  }

  const wire::Reply& Send(SimRegion& r, std::span<const uint8_t> body) {
    return r.node->Send(body);
  }

  int64_t Share(const std::string& region) {
    SimRegion& r = regions_.at(region);
    const KeyId id = protocol::LimitId(*policies_.Find("partner"), "acme", {});
    return r.node->node().regions()->ViewOf(0, &id, r.node->clock().NowMs()).front().share;
  }

  // Runs the simulation to `until_ms`, one millisecond at a time.
  void RunTo(int64_t until_ms) {
    RequestBuilder b;
    for (; now_ms_ < until_ms; ++now_ms_) {
      // Reports due now arrive.
      while (!in_flight_.empty() && in_flight_.front().at_ms <= now_ms_) {
        Flight f = std::move(in_flight_.front());
        in_flight_.pop_front();
        const wire::Reply& reply = Send(regions_.at(f.to), f.body);
        EXPECT_EQ(reply.ops()->Get(0)->status(), wire::Status::Ok);
      }
      for (auto& [name, r] : regions_) {
        // A tick on this region's wall clock: new shares, then its reports leave.
        // Half an interval after its tick, on its wall clock: the new shares.
        if (now_ms_ + r.skew_ms >= r.next_tick_wall - kIntervalMs / 2 && !r.rebalanced) {
          r.rebalanced = true;
          r.node->node().regions()->Rebalance(r.node->clock().NowMs());
          // The shares in force across regions, whenever one changes.
          const std::vector<int64_t> in_force = Now();
          max_sum_ = std::max(max_sum_, in_force[0] + in_force[1] + in_force[2]);
        }
        if (now_ms_ + r.skew_ms >= r.next_tick_wall) {
          r.next_tick_wall += kIntervalMs;
          r.rebalanced = false;
          r.node->node().regions()->Measure(r.node->clock().NowMs());
          for (auto& [region, to, body] : r.node->node().regions()->Reports(
                   name + ":1", r.node->node().policy_table().digest(), KeyIdSeedDigest())) {
            if (cut_.count(name) || cut_.count(region)) continue;
            in_flight_.push_back({now_ms_ + kLatencyMs, region, std::move(body)});
          }
        }
        // This millisecond's requests.
        r.owed += r.rate / 1000.0;
        for (; r.owed >= 1.0; r.owed -= 1.0) {
          b.Check(1, "partner", "acme");
          const wire::Reply& reply = Send(r, b.Finish());
          b.Clear();
          if (reply.ops()->Get(0)->allowed())
            admitted_.push_back({now_ms_ * 1000, now_ms_ * 1000, 1});
        }
      }
      for (auto& [name, r] : regions_) r.node->clock().Advance(1);
      if (now_ms_ % 1000 == 999) {
        shares_.push_back({Share("ap"), Share("eu"), Share("us")});
      }
    }
    // in_flight_ stays ordered: every report has the same latency.
  }

  void SetRates(double ap, double eu, double us) {
    regions_.at("ap").rate = ap;
    regions_.at("eu").rate = eu;
    regions_.at("us").rate = us;
  }

  // The shares the pure function gives for these demands (ap, eu, us order).
  static std::vector<int64_t> Expected(int64_t ap, int64_t eu, int64_t us) {
    const std::vector<int64_t> demands = {ap, eu, us};
    return AllocateShares(kLimit, demands, 6,
                          ShareQuantum(Algorithm::kGcra, Rate(kLimit, 1000, kBurst)));
  }
  std::vector<int64_t> Now() { return {Share("ap"), Share("eu"), Share("us")}; }

 public:
  void Run(bool exact_timing);

 protected:
  struct Flight {
    int64_t at_ms;
    std::string to;
    std::vector<uint8_t> body;
  };
  const PolicySet policies_ = testing::Policies(kPolicies, "regions_sim.yaml");
  std::map<std::string, SimRegion> regions_;
  std::deque<Flight> in_flight_;
  std::set<std::string> cut_;
  const int64_t skew_;   // more for ap's wall clock
  int64_t max_sum_ = 0;  // the most the shares in force ever summed to
  int64_t now_ms_ = 0;
  std::vector<Admission> admitted_;
  std::vector<std::vector<int64_t>> shares_;  // per simulated second: ap, eu, us
};

// The scenario: shifts, a cut-off, a return. `exact_timing`: convergence is checked 3
// intervals after each shift (with wall clocks a few ms apart).
void Scenario(RegionsSim& sim, bool exact_timing);

TEST_F(RegionsSim, SharesFollowShiftingDemandCutOffAndReturnWithinTheBound) {
  Scenario(*this, /*exact_timing=*/true);
}

// ap's wall clock is 0.9 s off: its ticks fall almost half an interval after the others', so
// the regions compute from reports of different ticks. The raise that waits one interval
// keeps the fleet within the bound.
class RegionsSimSkewed : public RegionsSim {
 protected:
  RegionsSimSkewed() : RegionsSim(900) {}
};

TEST_F(RegionsSimSkewed, AClockMostOfAnIntervalOffStillKeepsTheFleetWithinTheBound) {
  Scenario(*this, /*exact_timing=*/false);
}

void Scenario(RegionsSim& sim, bool exact_timing) { sim.Run(exact_timing); }

void RegionsSim::Run(bool exact_timing) {
  // Shifts every 20 s; each is checked 3 intervals (6 s) after it, and again at its end.
  struct Phase {
    double ap, eu, us;
  };
  const std::vector<Phase> phases = {{10, 50, 1000}, {10, 1000, 50}, {1000, 50, 10}};
  for (size_t i = 0; i < phases.size(); ++i) {
    const Phase& p = phases[i];
    SetRates(p.ap, p.eu, p.us);
    const int64_t shift = now_ms_;
    RunTo(shift + 3 * kIntervalMs + 50);
    const std::vector<int64_t> want = Expected(
        static_cast<int64_t>(p.ap), static_cast<int64_t>(p.eu), static_cast<int64_t>(p.us));
    if (i > 0 && exact_timing) {  // the first phase also waits for the regions to hear each other
      EXPECT_EQ(Now(), want) << "phase " << i << ": not converged 3 intervals after the shift";
    }
    RunTo(shift + 20'000);
    EXPECT_EQ(Now(), want) << "phase " << i;
  }
  // ap is cut off for 30 s while its demand stays high and us wants more: nobody's share rises
  // past its last; then ap comes back.
  const std::vector<int64_t> before = Now();
  cut_ = {"ap"};
  SetRates(1000, 50, 1000);
  const int64_t cut_at = now_ms_;
  RunTo(cut_at + 30'000);
  for (size_t s = static_cast<size_t>(cut_at / 1000); s < shares_.size(); ++s) {
    for (size_t r = 0; r < 3; ++r) {
      EXPECT_LE(shares_[s][r], before[r]) << "second " << s << ", region " << r;
    }
  }
  cut_.clear();
  RunTo(now_ms_ + 20'000);
  EXPECT_EQ(Now(), Expected(1000, 50, 1000));

  // The shares in force never summed to more than L; so across regions, the whole run, every
  // interval is within B + L*t/W.
  EXPECT_LE(max_sum_, kLimit);
  const PromiseBound bound{kLimit, 1'000'000, kBurst, 1000};
  const WorstWindow worst = FindWorstWindow(admitted_, bound);
  EXPECT_FALSE(worst.over) << worst.admitted << " admitted in "
                           << static_cast<double>(worst.interval_us) / 1e6 << " s over "
                           << worst.allowed;
  std::printf(
      "regions sim (ap's clock %+lld ms): %.0f simulated s, %zu admitted; shares in force "
      "summed to at most %lld (L = %lld); the interval closest to B + L*t/W: %lld in "
      "%.3f s of %.1f allowed (%+.1f)\n",
      static_cast<long long>(7 + skew_), static_cast<double>(now_ms_) / 1000, admitted_.size(),
      static_cast<long long>(max_sum_), static_cast<long long>(kLimit),
      static_cast<long long>(worst.admitted), static_cast<double>(worst.interval_us) / 1e6,
      worst.allowed, static_cast<double>(worst.admitted) - worst.allowed);
}

}  // namespace
}  // namespace limiter
