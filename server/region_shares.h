// RegionShares: a node's part in splitting `scope: global` limits among regions (DESIGN
// "Regions"). Each region runs its own cluster; for a global key, the key's owner in each
// region enforces that region's share L_r (and B_r) through the key's usual algorithm, and
// every rebalance interval tells the key's owners in the other regions (routed by their
// rings) its region's recent demand. Each region computes the shares from the latest reports
// it holds with one pure function (AllocateShares), so no consensus is needed.
//
// The overshoot across regions is bounded by "lower at once, raise one interval later": a
// share falls as soon as the reports say so, and rises only to what the reports of one
// interval earlier already justified, by when every region holding those reports has lowered
// its own. Reports leave on the wall clock's multiples of the interval in every region, and
// every region computes half an interval later from the reports of that tick (its own demand
// as it reported it), so regions agree. A region that did not hear from another at the last tick
// raises nothing (it keeps its last share, never more); one that never heard from another enforces
// its floor.
//
// Thread-safety: every method may be called from any thread. The table is split into shards,
// each under its own mutex; Reconcile is called with the key's store stripe locked (stripe,
// then shard: never the other way).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/key_limiter.h"
#include "common/mutex.h"
#include "common/policy.h"
#include "common/rate.h"
#include "limiter/status.h"
#include "protocol/key_id.h"
#include "protocol/ring.h"

namespace limiter {

namespace wire {
struct RegionReport;
}

struct RegionOptions {
  std::string region;  // this node's region; empty: no regions (a global limit is enforced whole)
  // The other regions: each by a static member list or a DNS name, like the node's own.
  struct Other {
    std::string name;
    std::vector<std::string> members;
    std::string members_dns;
  };
  std::vector<Other> others;
  int64_t rebalance_interval_ms = 2000;
  double floor = 0.05;         // each region's floor: this share of L, at least one unit
  int64_t max_keys = 100'000;  // global keys tracked; beyond, a new one gets the floor share
};

class RegionShares {
 public:
  static constexpr size_t kMaxRegions = 64;

  // Ok when `options` can run with `policies`, else why not: region names, and every global
  // limit large enough for a quantum per region (ShareQuantum).
  static Status Check(const PolicySet& policies, const RegionOptions& options);
  // Precondition: Check passed.
  RegionShares(const PolicySet& policies, RegionOptions options);
  ~RegionShares();

  const RegionOptions& options() const { return options_; }
  // What every region must share (the region names, floor and interval), as reports carry it.
  uint64_t settings() const { return settings_; }
  // Every region, this one included, by name: the order of AllocateShares' demands.
  const std::vector<std::string>& names() const { return names_; }

  // Hot path: the Rate global key `id` (of `policy`) is enforced with in this region now,
  // counting `units` of demand (0 for an op that asks for nothing).
  Rate Use(int policy, const KeyId& id, int64_t units, int64_t now_ms);
  // With the key's stripe locked, before the key is decided with `rate` (from Use): moves its
  // state to `rate` (Reshaped) when it was last decided under another share, and says so:
  // the caller must then save the state, decided or not (it is the key's state from now on).
  bool Reconcile(const KeyId& id, const Rate& rate, KeyLimiter& state, int64_t now_ms);

  // Every rebalance tick (the wall clock's multiples of the interval): each tracked key's
  // demand over the last interval, as the reports of this tick carry it (Reports); drops the
  // keys nobody used lately.
  void Measure(int64_t now_ms);
  // Half an interval after each tick, when this tick's reports have come: recomputes every
  // tracked key's share from them.
  void Rebalance(int64_t now_ms);
  // This tick's reports (after Measure): a Request body (a Regions op) for every member of
  // every other region whose list is known, carrying the keys it owns that had traffic here.
  // `self` is this node's address, `policy_digest` and `key_seed` what the receivers check.
  struct Report {
    std::string region;  // the receiving region
    std::string member;  // and node
    std::vector<uint8_t> body;
  };
  std::vector<Report> Reports(const std::string& self, uint64_t policy_digest, uint64_t key_seed);
  // The member list of another region (static, or its DNS answer).
  void SetMembers(const std::string& region, std::vector<std::string> members);
  // Whether `node` is in this node's list of another region `region` (a report's sender
  // must be).
  bool IsMemberOf(const std::string& region, const std::string& node) const;
  // Every member of every other region, as this node lists them.
  std::vector<std::string> AllOtherMembers() const;

  // A key handed to another node of this region (Node::Export) takes its share along: the
  // share in force and the share its state was last decided under (0, 0: none tracked).
  std::pair<int64_t, int64_t> Carried(const KeyId& id);
  // The receiving side: a key handed here starts at the share it had, not at the floor
  // (ignored when this node tracks the key already, or the shares are not valid for it).
  void Adopt(int policy, const KeyId& id, int64_t share, int64_t state_share, int64_t now_ms);

  // A report from another region: the number of keys taken, or what is wrong with it. `own`
  // is this node's ring (empty: a region of one node), which the sender must have routed by;
  // keys whose owner by it is not `self` are ignored.
  Result<int64_t> Receive(const wire::RegionReport& report, uint64_t policy_digest,
                          uint64_t key_seed, const Ring& own, const std::string& self,
                          int64_t now_ms);
  // Whether this node's reports to `region` were all delivered at this tick: one that was not
  // (a one-way cut) makes that region count as not heard from, so nothing rises.
  void NoteSent(const std::string& region, bool delivered, int64_t now_ms);

  // What this node knows, for limiterctl regions: this region first, then the others by name.
  struct View {
    std::string region;
    int64_t share = -1;
    int64_t demand = -1;
    int64_t report_age_ms = -1;
    int64_t link_age_ms = -1;
    int64_t pending_share = 0;
    bool link_up = false;  // heard from at the last tick (within 1.5 intervals)
  };
  // For one key (`id` null: the links alone).
  std::vector<View> ViewOf(int policy, const KeyId* id, int64_t now_ms) const;

  struct Counters {
    std::atomic<int64_t> reports_sent{0}, reports_received{0}, reports_late{0}, reports_refused{0},
        send_errors{0}, keys_untracked{0}, rebalance_us{0}, keys{0};
  };
  Counters& counters() { return counters_; }
  // The shares of the keys with the most demand here, largest first: (policy, share, demand).
  struct TopShare {
    std::string policy;
    int64_t share = 0;
    int64_t demand = 0;
  };
  std::vector<TopShare> Top(size_t n) const;

 private:
  struct Record;
  struct Shard;
  Shard& ShardOf(const KeyId& id) const;
  int64_t DemandOf(const Record& r, int64_t now_ms) const;
  int64_t FloorUnits(const Policy& p) const;  // region_floor of L, at least one unit
  int64_t FloorShare(int policy) const;
  // `for_report`: a record another region's report would make (bounded tighter).
  Record* Find(Shard& s, int policy, const KeyId& id, int64_t now_ms, bool create,
               bool for_report = false);

  const PolicySet& policies_;
  const RegionOptions options_;
  std::vector<std::string> names_;  // sorted; includes options_.region
  size_t self_ = 0;                 // index of this region in names_
  int64_t window_buckets_ = 19;     // the demand window, in 100 ms buckets (one interval less one)
  std::unique_ptr<Shard[]> shards_;
  mutable Mutex links_mu_;
  // Per region index: the last report from any of its nodes (-1: never), the last report to
  // it not delivered.
  std::vector<int64_t> heard_ms_ LIMITER_GUARDED_BY(links_mu_);
  std::vector<int64_t> send_failed_ms_ LIMITER_GUARDED_BY(links_mu_);
  uint64_t settings_ = 0;  // digest of what every region must share
  // sender -> last report
  std::unordered_map<std::string, int64_t> node_heard_ms_ LIMITER_GUARDED_BY(links_mu_);
  // per region index (self: unused)
  std::vector<std::shared_ptr<const Ring>> rings_ LIMITER_GUARDED_BY(links_mu_);
  Counters counters_;
};

}  // namespace limiter
