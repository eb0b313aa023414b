#include "server/region_shares.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "common/limits.h"
#include "common/mutex.h"
#include "common/share_allocation.h"
#include "protocol/wire.h"

namespace limiter {
namespace {

constexpr size_t kShards = 16;
constexpr size_t kBuckets = 64;  // demand kept per 100 ms, this many back (6.4 s)
constexpr int64_t kBucketMs = 100;
constexpr size_t kReportKeys = 4096;  // keys per report frame

}  // namespace

struct RegionShares::Record {
  int policy = 0;
  int64_t share = 0;
  Rate rate;        // the share's Rate, what Use answers
  Rate state_rate;  // the Rate the key's state was last decided under (Reconcile)
  // Since the state was last decided: when the share first changed, and the lowest share's
  // Rate in force since (-1: no change). Reconcile converts as of then, refilling slowest.
  int64_t changed_ms = -1;
  Rate low_rate;
  int64_t raise_to = 0;
  int64_t raise_since_ms = -1;              // -1: no raise waiting
  std::array<int64_t, kBuckets> buckets{};  // units wanted per 100 ms, by (ms / 100) % kBuckets
  int64_t newest = 0;                       // the newest bucket's number (ms / 100)
  int64_t last_use_ms = 0;
  int64_t sent_demand = 0;  // this region's demand as last reported (used in the allocation)
  struct Report {
    int64_t demand = 0;
    int64_t share = -1;
    int64_t at_ms = -1;  // -1: none
  };
  std::vector<Report> reports;  // per region index
};

struct RegionShares::Shard {
  Mutex mu;
  std::unordered_map<KeyId, Record, KeyIdHash> records LIMITER_GUARDED_BY(mu);
};

Status RegionShares::Check(const PolicySet& policies, const RegionOptions& o) {
  if (o.region.empty()) {
    if (!o.others.empty()) return Error{"regions: name this node's region (region) too"};
    return Status::Ok();
  }
  if (o.region.size() > kMaxNameBytes) {
    return Error{"region: a region's name is 1 to " + std::to_string(kMaxNameBytes) + " bytes"};
  }
  std::set<std::string> names = {o.region};
  for (const RegionOptions::Other& other : o.others) {
    if (other.name.empty() || other.name.size() > kMaxNameBytes) {
      return Error{"regions: a region's name is 1 to " + std::to_string(kMaxNameBytes) + " bytes"};
    }
    if (!names.insert(other.name).second) {
      return Error{"regions: '" + other.name + "' is named twice"};
    }
    if (other.members.empty() == other.members_dns.empty()) {
      return Error{"regions: region '" + other.name +
                   "' needs members or members_dns (one of them)"};
    }
  }
  if (names.size() > kMaxRegions) {
    return Error{"regions: at most " + std::to_string(kMaxRegions) + " regions, got " +
                 std::to_string(names.size())};
  }
  if (o.rebalance_interval_ms < 100 || o.rebalance_interval_ms > 60'000) {
    return Error{"rebalance_interval: 100 ms to 60 s, got " +
                 std::to_string(o.rebalance_interval_ms) + " ms"};
  }
  if (!(o.floor >= 0 && o.floor <= 1)) return Error{"region_floor: a share of the limit, 0 to 1"};
  // Reports carry the floor to the millionth (settings()): regions whose floors differ below it
  // would take each other's reports and compute shares that sum past L.
  if (static_cast<double>(std::llround(o.floor * 1e6)) / 1e6 != o.floor) {
    return Error{"region_floor: at most 6 decimals (regions compare it to the millionth)"};
  }
  if (o.max_keys < 1) return Error{"region_max_keys: at least 1"};
  const int64_t n = static_cast<int64_t>(names.size());
  for (const Policy& p : policies.policies()) {
    if (p.scope != Scope::kGlobal) continue;
    const int64_t q = ShareQuantum(p.algorithm, p.rate);
    if (p.rate.limit() / q < n) {
      return Error{"policy '" + p.name + "': a global limit of " + std::to_string(p.rate.limit()) +
                   " cannot give each of " + std::to_string(n) + " regions its smallest share (" +
                   std::to_string(q) + (q > 1 ? ": limit / burst" : "") + ")"};
    }
  }
  return Status::Ok();
}

RegionShares::RegionShares(const PolicySet& policies, RegionOptions options)
    : policies_(policies), options_(std::move(options)), shards_(new Shard[kShards]) {
  names_.push_back(options_.region);
  for (const RegionOptions::Other& o : options_.others) names_.push_back(o.name);
  std::sort(names_.begin(), names_.end());
  self_ = static_cast<size_t>(std::find(names_.begin(), names_.end(), options_.region) -
                              names_.begin());
  // The whole seconds of the demand window all fall after the last tick: each tick reports the
  // traffic since the one before.
  window_buckets_ = std::clamp<int64_t>(options_.rebalance_interval_ms / kBucketMs - 1, 4,
                                        static_cast<int64_t>(kBuckets) - 2);
  heard_ms_.assign(names_.size(), -1);
  send_failed_ms_.assign(names_.size(), -1);
  rings_.resize(names_.size());
  std::string settings = std::to_string(options_.rebalance_interval_ms) + '/' +
                         std::to_string(std::llround(options_.floor * 1e6));
  for (const std::string& n : names_) settings += '/' + n;
  settings_ = XXH3_64bits(settings.data(), settings.size());
  for (const RegionOptions::Other& o : options_.others) {
    if (!o.members.empty()) SetMembers(o.name, o.members);
  }
}

RegionShares::~RegionShares() = default;

RegionShares::Shard& RegionShares::ShardOf(const KeyId& id) const {
  return shards_[(id.lo * 0x9E3779B97F4A7C15ull) >> 60];
}

int64_t RegionShares::FloorUnits(const Policy& p) const {
  return std::max<int64_t>(
      1, static_cast<int64_t>(std::llround(options_.floor * static_cast<double>(p.rate.limit()))));
}

int64_t RegionShares::FloorShare(int policy) const {
  const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
  const int64_t n = static_cast<int64_t>(names_.size());
  return std::max(ShareQuantum(p.algorithm, p.rate), std::min(FloorUnits(p), p.rate.limit() / n));
}

RegionShares::Record* RegionShares::Find(Shard& s, int policy, const KeyId& id, int64_t now,
                                         bool create, bool for_report) {
  s.mu.AssertHeld();  // the callers hold it
  const auto it = s.records.find(id);
  if (it != s.records.end()) return &it->second;
  // Other regions' reports may track at most three quarters of max_keys: the rest is kept
  // for keys used here, whatever another region reports.
  const int64_t most = for_report ? options_.max_keys - options_.max_keys / 4 : options_.max_keys;
  if (!create) return nullptr;
  // The place is taken before the record is made: keys made at once in other shards cannot pass
  // the bound together.
  int64_t keys = counters_.keys.load(std::memory_order_relaxed);
  do {
    if (keys >= most) return nullptr;
  } while (!counters_.keys.compare_exchange_weak(keys, keys + 1, std::memory_order_relaxed));
  Record& r = s.records[id];
  const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
  r.policy = policy;
  r.share = FloorShare(policy);
  r.rate = *ShareRate(p.algorithm, p.rate, r.share);
  // A state this node may still hold from before (a record dropped while the key was idle, a
  // key kept from a hand-off): taken as decided under the floor, the slowest it can refill.
  r.state_rate = r.rate;
  r.reports.resize(names_.size());
  r.last_use_ms = now;
  r.newest = now / kBucketMs;
  return &r;
}

Rate RegionShares::Use(int policy, const KeyId& id, int64_t units, int64_t now) {
  Shard& s = ShardOf(id);
  MutexLock lock(s.mu);
  Record* r = Find(s, policy, id, now, /*create=*/true);
  if (r == nullptr) {
    counters_.keys_untracked.fetch_add(1, std::memory_order_relaxed);
    const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
    return *ShareRate(p.algorithm, p.rate, FloorShare(policy));
  }
  r->last_use_ms = std::max(r->last_use_ms, now);
  if (units > 0) {
    const int64_t bucket = now / kBucketMs;
    if (bucket > r->newest) {
      for (int64_t x = r->newest + 1;
           x <= bucket && x <= r->newest + static_cast<int64_t>(kBuckets); ++x) {
        r->buckets[static_cast<size_t>(x) % kBuckets] = 0;
      }
      r->newest = bucket;
    }
    if (bucket > r->newest - static_cast<int64_t>(kBuckets)) {
      r->buckets[static_cast<size_t>(bucket) % kBuckets] += units;
    }
  }
  return r->rate;
}

bool RegionShares::Reconcile(const KeyId& id, const Rate& rate, KeyLimiter& state, int64_t now) {
  Shard& s = ShardOf(id);
  MutexLock lock(s.mu);
  const auto it = s.records.find(id);
  if (it == s.records.end()) return false;
  Record& r = it->second;
  if (r.changed_ms < 0 && r.state_rate == rate) return false;
  if (r.changed_ms >= 0 && r.changed_ms < now) {
    // As of the first change, to the lowest share since; then refilled at that one up to now.
    state = Reshaped(state, r.state_rate, r.low_rate, r.changed_ms);
    state = Reshaped(state, r.low_rate, rate, now);
  } else {
    state = Reshaped(state, r.state_rate, rate, now);
  }
  r.state_rate = rate;
  r.changed_ms = -1;
  return true;
}

int64_t RegionShares::DemandOf(const Record& r, int64_t now) const {
  // The last window_buckets_ whole buckets, scaled to units per window.
  const int64_t bucket = now / kBucketMs;
  int64_t units = 0;
  for (int64_t x = bucket - window_buckets_; x < bucket; ++x) {
    if (x <= r.newest && x > r.newest - static_cast<int64_t>(kBuckets)) {
      units += r.buckets[static_cast<size_t>(x) % kBuckets];
    }
  }
  const int64_t w = policies_.policies()[static_cast<size_t>(r.policy)].rate.window_ms();
  const __int128 scaled = static_cast<__int128>(units) * w;
  const int64_t span = window_buckets_ * kBucketMs;
  return static_cast<int64_t>(std::min<__int128>((scaled + span - 1) / span, INT64_MAX / 4));
}

void RegionShares::Measure(int64_t now) {
  const int64_t interval = options_.rebalance_interval_ms;
  for (size_t sh = 0; sh < kShards; ++sh) {
    Shard& s = shards_[sh];
    MutexLock lock(s.mu);
    for (auto it = s.records.begin(); it != s.records.end();) {
      Record& r = it->second;
      r.sent_demand = DemandOf(r, now);
      bool reported = false;  // another region reported this key lately
      for (const Record::Report& rep : r.reports) {
        reported |= rep.at_ms >= 0 && now - rep.at_ms <= 3 * interval;
      }
      if (r.sent_demand == 0 && !reported && now - r.last_use_ms > 3 * interval) {
        it = s.records.erase(it);  // nobody uses it: back to its floor when it comes again
        counters_.keys.fetch_sub(1, std::memory_order_relaxed);  // and its place is free now
        continue;
      }
      ++it;
    }
  }
}

void RegionShares::Rebalance(int64_t now) {
  const auto started = std::chrono::steady_clock::now();
  const int64_t interval = options_.rebalance_interval_ms;
  // Reports leave on the ticks, the same everywhere, and this runs half an interval later: a
  // report no older than an interval is this tick's. A region never heard from makes every
  // share its floor; one not heard from at this tick makes every share stay where it is or
  // fall.
  const int64_t fresh = interval;
  bool never = false, frozen = false;
  std::vector<bool> up(names_.size(), true);
  // Per region, per member of its list here: heard from at this tick. A key whose owner there
  // was not (a node down, a link cut between two nodes only) raises nothing.
  std::vector<std::shared_ptr<const Ring>> rings;
  std::vector<std::vector<bool>> owner_up(names_.size());
  {
    MutexLock lock(links_mu_);
    rings = rings_;
    for (size_t i = 0; i < names_.size(); ++i) {
      if (i == self_) continue;
      never |= heard_ms_[i] < 0;
      up[i] = heard_ms_[i] >= 0 && now - heard_ms_[i] <= fresh &&
              !(send_failed_ms_[i] >= 0 && now - send_failed_ms_[i] <= fresh);
      frozen |= !up[i];
      if (!rings[i]) continue;
      for (const std::string& m : rings[i]->members()) {
        const auto heard = node_heard_ms_.find(names_[i] + '/' + m);
        owner_up[i].push_back(heard != node_heard_ms_.end() && now - heard->second <= fresh);
      }
    }
  }
  std::vector<int64_t> demands(names_.size());
  for (size_t sh = 0; sh < kShards; ++sh) {
    Shard& s = shards_[sh];
    MutexLock lock(s.mu);
    for (auto it = s.records.begin(); it != s.records.end();) {
      Record& r = it->second;
      const Policy& p = policies_.policies()[static_cast<size_t>(r.policy)];
      // The shares come from what every region reported at this tick, this one's own demand
      // included as it was reported (Measure): regions holding the same reports compute the
      // same shares.
      int64_t target = FloorShare(r.policy);
      bool key_frozen = frozen;
      for (size_t i = 0; i < names_.size() && !key_frozen; ++i) {
        if (i != self_ && rings[i] && !rings[i]->empty()) {
          key_frozen = !owner_up[i][rings[i]->OwnerOfSlot(RingSlotOf(it->first))];
        }
      }
      if (!never) {
        for (size_t i = 0; i < names_.size(); ++i) {
          const Record::Report& rep = r.reports[i];
          if (i == self_) {
            demands[i] = r.sent_demand;
          } else if (rep.at_ms >= 0 && (now - rep.at_ms <= fresh || !up[i])) {
            demands[i] = rep.demand;  // fresh, or the last word of a region cut off
          } else {
            demands[i] = 0;  // up, and no traffic there for this key
          }
        }
        target = AllocateShares(p.rate.limit(), demands, FloorUnits(p),
                                ShareQuantum(p.algorithm, p.rate))[self_];
      }
      // Lower at once; raise one interval later, to no more than was justified then.
      if (target < r.share) {
        r.share = target;
        r.raise_since_ms = -1;
      } else if (target > r.share && !key_frozen && !never) {
        if (r.raise_since_ms >= 0 && now - r.raise_since_ms >= interval - interval / 8) {
          r.share = std::min(target, r.raise_to);
          r.raise_since_ms = -1;
        } else if (r.raise_since_ms >= 0) {
          r.raise_to = std::min(r.raise_to, target);
        } else {
          r.raise_to = target;
          r.raise_since_ms = now;
        }
      } else {
        r.raise_since_ms = -1;
      }
      const Rate rate = *ShareRate(p.algorithm, p.rate, r.share);
      if (!(rate == r.rate)) {
        if (r.changed_ms < 0) {
          r.changed_ms = now;
          r.low_rate = rate.limit() < r.rate.limit() ? rate : r.rate;
        } else if (rate.limit() < r.low_rate.limit()) {
          r.low_rate = rate;
        }
        r.rate = rate;
      }
      ++it;
    }
  }
  counters_.rebalance_us.store(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now() - started)
                                   .count(),
                               std::memory_order_relaxed);
}

void RegionShares::SetMembers(const std::string& region, std::vector<std::string> members) {
  const auto it = std::find(names_.begin(), names_.end(), region);
  if (it == names_.end() || static_cast<size_t>(it - names_.begin()) == self_) return;
  auto ring = std::make_shared<const Ring>(std::move(members));
  MutexLock lock(links_mu_);
  rings_[static_cast<size_t>(it - names_.begin())] = std::move(ring);
}

std::vector<RegionShares::Report> RegionShares::Reports(const std::string& self,
                                                        uint64_t policy_digest, uint64_t key_seed) {
  std::vector<std::shared_ptr<const Ring>> rings;
  {
    MutexLock lock(links_mu_);
    rings = rings_;
  }
  // Per region, per member: the keys it owns that had traffic here.
  std::vector<std::vector<std::vector<wire::KeyDemand>>> keys(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    if (i != self_ && rings[i] && !rings[i]->empty()) keys[i].resize(rings[i]->members().size());
  }
  for (size_t sh = 0; sh < kShards; ++sh) {
    Shard& s = shards_[sh];
    MutexLock lock(s.mu);
    for (const auto& [id, r] : s.records) {
      if (r.sent_demand == 0) continue;
      for (size_t i = 0; i < names_.size(); ++i) {
        if (keys[i].empty()) continue;
        keys[i][rings[i]->OwnerOfSlot(RingSlotOf(id))].emplace_back(
            id.lo, id.hi, r.sent_demand, r.share, static_cast<uint16_t>(r.policy));
      }
    }
  }
  std::vector<Report> out;
  for (size_t i = 0; i < names_.size(); ++i) {
    for (size_t m = 0; m < keys[i].size(); ++m) {
      const std::vector<wire::KeyDemand>& all = keys[i][m];
      // At least one frame each, so that an idle link still says it is up.
      for (size_t from = 0; from == 0 || from < all.size(); from += kReportKeys) {
        const size_t n = std::min(kReportKeys, all.size() - from);
        flatbuffers::FlatBufferBuilder fbb(256 + n * sizeof(wire::KeyDemand));
        const auto list = fbb.CreateVectorOfStructs(all.data() + from, n);
        const auto report =
            wire::CreateRegionReport(fbb, fbb.CreateString(options_.region), fbb.CreateString(self),
                                     policy_digest, key_seed, list, rings[i]->version(), settings_);
        const std::span<const uint8_t> body = FinishPeerRequest(
            fbb, wire::OpType::Regions, wire::CreatePeer(fbb, 0, 0, 0, 0, 0, report));
        out.push_back({names_[i], rings[i]->members()[m], {body.begin(), body.end()}});
      }
    }
  }
  counters_.reports_sent.fetch_add(static_cast<int64_t>(out.size()), std::memory_order_relaxed);
  return out;
}

std::pair<int64_t, int64_t> RegionShares::Carried(const KeyId& id) {
  Shard& s = ShardOf(id);
  MutexLock lock(s.mu);
  const auto it = s.records.find(id);
  if (it == s.records.end()) return {0, 0};
  // The key leaves this node: so does its record (it must not report stale demand).
  const std::pair<int64_t, int64_t> carried{
      it->second.share,
      std::min(it->second.state_rate.limit(),
               it->second.changed_ms >= 0 ? it->second.low_rate.limit() : INT64_MAX)};
  s.records.erase(it);
  counters_.keys.fetch_sub(1, std::memory_order_relaxed);
  return carried;
}

void RegionShares::Adopt(int policy, const KeyId& id, int64_t share, int64_t state_share,
                         int64_t now) {
  const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
  if (p.scope != Scope::kGlobal || share <= 0 || share > p.rate.limit() || state_share <= 0 ||
      state_share > p.rate.limit()) {
    return;
  }
  const std::optional<Rate> rate = ShareRate(p.algorithm, p.rate, share);
  // The state's own rate: the policy's when it was decided under the whole limit.
  const std::optional<Rate> state_rate = state_share == p.rate.limit()
                                             ? std::optional<Rate>(p.rate)
                                             : ShareRate(p.algorithm, p.rate, state_share);
  if (!rate || !state_rate) return;
  Shard& s = ShardOf(id);
  MutexLock lock(s.mu);
  if (s.records.count(id)) return;  // served here meanwhile: its own record stands
  Record* r = Find(s, policy, id, now, /*create=*/true);
  if (r == nullptr) return;
  r->share = share;
  r->rate = *rate;
  r->state_rate = *state_rate;
}

void RegionShares::NoteSent(const std::string& region, bool delivered, int64_t now) {
  const auto it = std::find(names_.begin(), names_.end(), region);
  if (it == names_.end() || delivered) return;
  MutexLock lock(links_mu_);
  send_failed_ms_[static_cast<size_t>(it - names_.begin())] = now;
}

bool RegionShares::IsMemberOf(const std::string& region, const std::string& node) const {
  const auto it = std::find(names_.begin(), names_.end(), region);
  if (it == names_.end()) return false;
  MutexLock lock(links_mu_);
  const std::shared_ptr<const Ring>& ring = rings_[static_cast<size_t>(it - names_.begin())];
  if (!ring) return false;
  const auto& m = ring->members();
  return std::find(m.begin(), m.end(), node) != m.end();
}

std::vector<std::string> RegionShares::AllOtherMembers() const {
  std::vector<std::string> all;
  MutexLock lock(links_mu_);
  for (size_t i = 0; i < rings_.size(); ++i) {
    if (i == self_ || !rings_[i]) continue;
    all.insert(all.end(), rings_[i]->members().begin(), rings_[i]->members().end());
  }
  return all;
}

Result<int64_t> RegionShares::Receive(const wire::RegionReport& report, uint64_t policy_digest,
                                      uint64_t key_seed, const Ring& own, const std::string& self,
                                      int64_t now) {
  const auto refuse = [&](std::string why) -> Result<int64_t> {
    counters_.reports_refused.fetch_add(1, std::memory_order_relaxed);
    return Error{std::move(why)};
  };
  const std::string region = report.region() ? report.region()->str() : std::string();
  const auto it = std::find(names_.begin(), names_.end(), region);
  if (it == names_.end() || static_cast<size_t>(it - names_.begin()) == self_) {
    return refuse("region report from '" + region.substr(0, kMaxNameBytes) +
                  "', which is not another region of this node's (regions: " +
                  [&] {
                    std::string list;
                    for (const std::string& n : names_) list += (list.empty() ? "" : ", ") + n;
                    return list;
                  }() +
                  ")");
  }
  if (report.policies() != policy_digest) {
    return refuse("region report from '" + region + "' refused: its policy file differs");
  }
  if (report.key_seed() != key_seed) {
    return refuse("region report from '" + region +
                  "' refused: its key-id seed differs (regions share one cluster secret)");
  }
  if (report.settings() != settings_) {
    return refuse("region report from '" + region +
                  "' refused: its region settings differ from this node's (the region names, "
                  "region_floor and rebalance_interval must be the same in every region)");
  }
  if (!own.empty() && report.ring_version() != own.version()) {
    return refuse("region report from '" + region +
                  "' refused: it was routed by another list "
                  "of this region's nodes than this node's (ring " +
                  std::to_string(report.ring_version()) + ", here " +
                  std::to_string(own.version()) + "); fix the regions list there");
  }
  const size_t from = static_cast<size_t>(it - names_.begin());
  const std::string node = report.node() ? report.node()->str().substr(0, kMaxNameBytes) : "";
  {
    MutexLock lock(links_mu_);
    heard_ms_[from] = now;
    if (node_heard_ms_.size() > 4 * kMaxRegions * Ring::kMaxMembers) node_heard_ms_.clear();
    int64_t& last = node_heard_ms_[region + '/' + node];
    if (last > 0 && now - last > options_.rebalance_interval_ms * 3 / 2) {
      counters_.reports_late.fetch_add(1, std::memory_order_relaxed);
    }
    last = now;
  }
  counters_.reports_received.fetch_add(1, std::memory_order_relaxed);
  int64_t taken = 0;
  if (const auto* keys = report.keys()) {
    const auto& policies = policies_.policies();
    for (const wire::KeyDemand* k : *keys) {
      const KeyId id{k->id_lo(), k->id_hi()};
      if (k->policy() >= policies.size() || policies[k->policy()].scope != Scope::kGlobal ||
          (id.lo | id.hi) == 0 || k->demand() < 0) {
        continue;  // not a global key here: nothing to share
      }
      // A key of another node of this region: the sender's list of this region differs.
      if (!own.empty() && own.members()[own.OwnerOfSlot(RingSlotOf(id))] != self) continue;
      Shard& s = ShardOf(id);
      MutexLock lock(s.mu);
      Record* r = Find(s, k->policy(), id, now, /*create=*/true, /*for_report=*/true);
      if (r == nullptr) {
        counters_.keys_untracked.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      r->reports[from] = {std::min<int64_t>(k->demand(), INT64_MAX / 4), k->share(), now};
      ++taken;
    }
  }
  return taken;
}

std::vector<RegionShares::View> RegionShares::ViewOf(int policy, const KeyId* id,
                                                     int64_t now) const {
  std::vector<View> views(names_.size());
  {
    MutexLock lock(links_mu_);
    for (size_t i = 0; i < names_.size(); ++i) {
      views[i].region = names_[i];
      views[i].link_age_ms = i == self_ ? 0 : heard_ms_[i] < 0 ? -1 : now - heard_ms_[i];
      views[i].link_up =
          i == self_ ||
          (heard_ms_[i] >= 0 && now - heard_ms_[i] <= options_.rebalance_interval_ms * 3 / 2);
    }
  }
  if (id != nullptr) {
    Shard& s = ShardOf(*id);
    MutexLock lock(s.mu);
    const auto it = s.records.find(*id);
    if (it != s.records.end() && it->second.policy == policy) {
      const Record& r = it->second;
      for (size_t i = 0; i < names_.size(); ++i) {
        if (i == self_) {
          views[i].share = r.share;
          views[i].demand = DemandOf(r, now);
          views[i].report_age_ms = 0;
          views[i].pending_share = r.raise_since_ms >= 0 ? r.raise_to : 0;
        } else if (r.reports[i].at_ms >= 0) {
          views[i].share = r.reports[i].share;
          views[i].demand = r.reports[i].demand;
          views[i].report_age_ms = now - r.reports[i].at_ms;
        }
      }
    } else {
      views[self_].share = FloorShare(policy);  // untracked: what a first request would get
      views[self_].demand = 0;
    }
  }
  // This region first, then the others by name.
  std::rotate(views.begin(), views.begin() + static_cast<std::ptrdiff_t>(self_),
              views.begin() + static_cast<std::ptrdiff_t>(self_) + 1);
  return views;
}

std::vector<RegionShares::TopShare> RegionShares::Top(size_t n) const {
  std::vector<TopShare> all;
  for (size_t sh = 0; sh < kShards; ++sh) {
    Shard& s = shards_[sh];
    MutexLock lock(s.mu);
    for (const auto& [id, r] : s.records) {
      all.push_back(
          {policies_.policies()[static_cast<size_t>(r.policy)].name, r.share, r.sent_demand});
    }
  }
  std::sort(all.begin(), all.end(),
            [](const TopShare& a, const TopShare& b) { return a.demand > b.demand; });
  if (all.size() > n) all.resize(n);
  return all;
}

}  // namespace limiter
