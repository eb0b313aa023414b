#include "client/client_core.h"

#include <algorithm>
#include <future>

#include "common/limits.h"

namespace limiter {

using ClientDecision = client::Decision;
using client::Source;

// A request, resolved against the policy file.
struct ClientCore::Resolved {
  const Policy* policy = nullptr;
  int index = 0;
  int64_t cost = 1;
  bool lease = false;  // spend from a local bucket (else one CHECK per request)
  std::string_view key;
  std::string_view tenant;
  std::string_view operation;
  std::string_view routing;  // the tenant when the policy nests under one, else the key
  KeyId id;                  // of (policy, tenant, key): the local bucket
};

// Local buckets per shard before the first sweep for idle ones (then twice what remained).
constexpr size_t kFirstSweep = 64;

struct alignas(64) ClientCore::Bucket {  // own cache lines: buckets of other threads' keys
  struct Batch {
    int64_t units;
    int64_t expires_us;
    int64_t granted_at_ms;  // node time, for RETURN
    SubBucket sub;          // where it was leased from, for RETURN
  };
  // The leases not yet spent, oldest first, kept inline (no allocation on the request path).
  // A refill comes only below the watermark, so two or three are the most seen.
  class Batches {
   public:
    bool empty() const { return size_ == 0; }
    const Batch* begin() const { return items_.data(); }
    const Batch* end() const { return items_.data() + size_; }
    Batch& front() { return items_[0]; }
    void pop_front() {
      for (size_t i = 1; i < size_; ++i) items_[i - 1] = items_[i];
      --size_;
    }
    void clear() { size_ = 0; }
    void push_back(const Batch& b) {
      if (size_ == items_.size()) {
        // Full: fold the oldest two into one that lapses at the earlier time and counts
        // as leased at the earlier time (so a RETURN never reaches a window it was not
        // charged to).
        items_[0].units += items_[1].units;
        items_[0].expires_us = std::min(items_[0].expires_us, items_[1].expires_us);
        items_[0].granted_at_ms = std::min(items_[0].granted_at_ms, items_[1].granted_at_ms);
        for (size_t i = 2; i < size_; ++i) items_[i - 1] = items_[i];
        --size_;
      }
      items_[size_++] = b;
    }

   private:
    std::array<Batch, 4> items_;
    size_t size_ = 0;
  };
  struct Waiter {
    int64_t cost;
    Done done;
  };
  int policy = 0;
  std::string key, tenant;
  Batches batches;
  int64_t units = 0;          // sum over batches
  int64_t lease_size = 1;
  int64_t store_remaining = 0;
  bool lease_in_flight = false;
  // After the owner had less than asked for: no new lease before this time, and requests
  // the bucket cannot pay are denied here, so a key over its limit does not cost the
  // store an operation per request.
  int64_t next_lease_us = 0;
  // Refill below this many units: enough to cover the units spent during a lease's round
  // trip, so the top-up is as large as it can be without the key running dry.
  int64_t watermark = 1;
  int64_t lease_sent_us = 0;
  int64_t last_reply_us = 0;
  int64_t spent_since_reply = 0;
  std::vector<Waiter> waiters;

  void Expire(int64_t now_us, uint64_t* expired) {
    while (!batches.empty() && batches.front().expires_us <= now_us) {
      units -= batches.front().units;
      *expired += static_cast<uint64_t>(batches.front().units);
      batches.pop_front();
    }
  }
  void Take(int64_t cost) {
    units -= cost;
    while (cost > 0) {
      const int64_t take = std::min(cost, batches.front().units);
      batches.front().units -= take;
      cost -= take;
      if (batches.front().units == 0) batches.pop_front();
    }
  }
};

struct alignas(64) ClientCore::Shard {  // one cache line apart: threads on other shards
  std::mutex mu;
  std::unordered_map<KeyId, Bucket, KeyIdHash> buckets;  // guarded by mu
  // When buckets reaches this size, idle ones are dropped first (SweepIdle): a gateway
  // sees keys come and go, and its memory must not grow with every key it ever saw.
  size_t sweep_at = kFirstSweep;                         // guarded by mu
  uint64_t lease_allowed = 0;                            // guarded by mu
  uint64_t lease_denied = 0;                             // guarded by mu
  uint64_t expired = 0;                                  // guarded by mu
};

struct ClientCore::Health {
  bool down = false;
  int misses = 0;
  int64_t backoff_us = 0;
};

struct ClientCore::Debt {
  int policy = 0;
  std::string key, tenant, owner;
  int64_t units = 0;
  bool in_flight = false;
};

// What this client knows of a split key: valid until its owner's answer says, renewed (with
// the ops sent to the sub-buckets since) half way through.
struct ClientCore::SplitView {
  int policy = 0;
  std::string key;
  SubBucket sub;  // k and epoch; index: the next to use
  int64_t valid_until_us = 0;
  int64_t renew_at_us = 0;
  int64_t sent = 0;
  bool renewing = false;
  uint32_t other_tries = 0;  // second tries after a denial, and how many were allowed
  uint32_t other_wins = 0;
  uint32_t denials = 0;
};

struct ClientCore::Shedder {
  std::mutex mu;
  int64_t in_use = 0;                                     // guarded by mu
  std::deque<std::pair<uint64_t, std::shared_ptr<Done>>> queue;  // guarded by mu
  uint64_t next_ticket = 0;                               // guarded by mu
};

namespace {

constexpr size_t kShards = 256;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

ClientCore::ClientCore(PolicySet policies, std::vector<std::string> members,
                       Scheduler& scheduler, Transport& transport, ClientCoreOptions options)
    : policies_(std::move(policies)),
      scheduler_(scheduler),
      transport_(transport),
      options_(options),
      ring_(std::make_shared<const Ring>(std::move(members))) {
  const int64_t n = std::max(1, options_.gateways);
  for (size_t i = 0; i < policies_.policies().size(); ++i) {
    const Policy& p = policies_.policies()[i];
    policy_index_.emplace(p.name, static_cast<int>(i));
    // L/N per W is L per N*W, exactly; the burst shrinks the same way.
    Rate share = p.rate;
    if (!p.fallback.allow_overshoot && n > 1) {
      const int64_t burst = std::max<int64_t>(1, p.rate.burst() / n);
      if (!Rate::Invalid(p.rate.limit(), p.rate.window_ms() * n, burst)) {
        share = Rate(p.rate.limit(), p.rate.window_ms() * n, burst);
      } else {
        share = Rate(std::max<int64_t>(1, p.rate.limit() / n), p.rate.window_ms(), burst);
      }
    }
    contract_fallback_.push_back(share);
    shedders_.push_back(std::make_unique<Shedder>());
  }
  for (size_t i = 0; i < kShards; ++i) shards_.push_back(std::make_unique<Shard>());
}

ClientCore::~ClientCore() = default;

std::optional<std::string> ClientCore::Resolve(const client::Request& req, Resolved& r) const {
  const auto it = policy_index_.find(req.policy);
  if (it == policy_index_.end()) return "no policy named '" + std::string(req.policy) + "'";
  r.index = it->second;
  r.policy = &policies_.policies()[static_cast<size_t>(r.index)];
  if (req.key.empty() || req.key.size() > kMaxKeyBytes) {
    return "the key must be 1 to " + std::to_string(kMaxKeyBytes) + " bytes";
  }
  if (req.tenant.size() > kMaxKeyBytes) {
    return "the tenant must be at most " + std::to_string(kMaxKeyBytes) + " bytes";
  }
  const bool nested = r.policy->parent_index >= 0;
  if (nested && req.tenant.empty()) {
    return "policy '" + r.policy->name + "' nests under '" + r.policy->parent +
           "'; the request needs a tenant";
  }
  if (req.operation.empty() && (req.cost < 1 || req.cost > kMaxCost)) {
    return "cost must be between 1 and " + std::to_string(kMaxCost);
  }
  r.key = req.key;
  r.tenant = req.tenant;
  r.operation = req.operation;
  r.routing = nested ? req.tenant : req.key;
  r.cost = req.operation.empty() ? req.cost : r.policy->CostOf(req.operation);
  // A lease charges the same units to every limit of the chain, so it only stands in for
  // requests that cost every one of them the same.
  r.lease = r.policy->mode == LeaseMode::kLease &&
            SameCostAlongChain(*r.policy, req.operation, r.cost);
  r.id = MakeKeyId({r.policy->name, r.tenant, r.key});
  return std::nullopt;
}

ClientDecision ClientCore::Denied(const Resolved& r, std::string error) const {
  ClientDecision d;
  d.allowed = false;
  if (r.policy) {
    d.policy = r.policy->name;
    d.limit = r.policy->rate.limit();
    d.window_ms = r.policy->rate.window_ms();
  }
  d.error = std::move(error);
  d.source = Source::kStore;
  return d;
}

void ClientCore::Count(const ClientDecision& d) {
  counters_.decisions.fetch_add(1, std::memory_order_relaxed);
  (d.allowed ? counters_.allowed : counters_.denied).fetch_add(1, std::memory_order_relaxed);
  counters_.by_source[static_cast<size_t>(d.source)].fetch_add(1, std::memory_order_relaxed);
}

// With the shard locked: answers from the bucket if it can (spending from it, or denying
// while the owner has said it is short), and says whether to refill.
bool ClientCore::Spend(Shard& shard, Bucket& b, const Policy& p, int64_t cost, int64_t now_us,
                       ClientDecision* out, bool* refill) {
  b.Expire(now_us, &shard.expired);
  if (!b.waiters.empty()) return false;
  *refill = false;
  out->policy = p.name;
  out->limit = p.rate.limit();
  out->window_ms = p.rate.window_ms();
  out->reset = std::chrono::milliseconds(0);
  if (b.units < cost) {
    if (now_us >= b.next_lease_us) return false;
    ++shard.lease_denied;
    out->allowed = false;
    out->remaining = b.units;
    out->retry_after = std::chrono::milliseconds(CeilDiv(b.next_lease_us - now_us, 1000));
    out->source = Source::kStore;
    return true;
  }
  b.Take(cost);
  b.spent_since_reply += cost;
  ++shard.lease_allowed;
  out->allowed = true;
  out->remaining = b.units + b.store_remaining;
  out->retry_after = std::chrono::milliseconds(0);
  out->source = Source::kLease;
  // Top up in the background below the watermark, so a warm key never waits.
  *refill = !b.lease_in_flight && b.units < b.watermark && now_us >= b.next_lease_us;
  if (*refill) b.lease_in_flight = true;
  return true;
}

bool ClientCore::SameCostAlongChain(const Policy& policy, std::string_view operation,
                                    int64_t cost) const {
  for (int a = policy.parent_index; a >= 0;
       a = policies_.policies()[static_cast<size_t>(a)].parent_index) {
    const Policy& ancestor = policies_.policies()[static_cast<size_t>(a)];
    if (ancestor.mode != LeaseMode::kLease ||
        (!operation.empty() && ancestor.CostOf(operation) != cost)) {
      return false;
    }
  }
  return true;
}

bool ClientCore::TryLocal(const client::Request& req, ClientDecision* out) {
  // Only keys that already have a bucket: it was made by a resolved request, so the policy
  // exists and uses leases; the 128-bit id stands for (policy, tenant, key).
  if (req.key.empty() || req.key.size() > kMaxKeyBytes || req.tenant.size() > kMaxKeyBytes ||
      req.policy.size() > kMaxNameBytes) {
    return false;
  }
  const KeyId id = MakeKeyId({req.policy, req.tenant, req.key});
  Shard& shard = ShardOf(id);
  bool refill = false;
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.buckets.find(id);
    if (it == shard.buckets.end()) return false;
    Bucket& b = it->second;
    const Policy& p = policies_.policies()[static_cast<size_t>(b.policy)];
    int64_t cost = req.cost;
    if (!req.operation.empty()) {
      cost = p.CostOf(req.operation);
      if (!SameCostAlongChain(p, req.operation, cost)) return false;
    } else if (cost < 1 || cost > kMaxCost) {
      return false;
    }
    if (!Spend(shard, b, p, cost, scheduler_.NowCoarseUs(), out, &refill)) return false;
  }
  if (refill) scheduler_.Post([this, id] { StartLease(id); });
  return true;
}

ClientDecision ClientCore::Decide(const client::Request& req) {
  ClientDecision d;
  if (TryLocal(req, &d)) return d;
  std::promise<ClientDecision> answer;
  std::future<ClientDecision> result = answer.get_future();
  DecideAsync(req, [&answer](ClientDecision decided) { answer.set_value(std::move(decided)); });
  return result.get();  // the deadline timer guarantees an answer
}

void ClientCore::DecideAsync(const client::Request& req, Done done) {
  Resolved r;
  if (auto error = Resolve(req, r)) {
    ClientDecision d = Denied(r, std::move(*error));
    Count(d);
    done(std::move(d));
    return;
  }
  const std::string owner = OwnerOf(r.routing);
  if (owner.empty() || IsDown(owner)) {
    // Units already leased are spent first: they were subtracted at the store.
    ClientDecision d;
    bool refill = false;
    bool answered = false;
    if (r.lease) {
      Shard& shard = ShardOf(r.id);
      std::lock_guard<std::mutex> lock(shard.mu);
      auto it = shard.buckets.find(r.id);
      answered = it != shard.buckets.end() &&
                 Spend(shard, it->second, *r.policy, r.cost, scheduler_.NowUs(), &d, &refill);
      if (refill) it->second.lease_in_flight = false;  // no refill while the owner is away
    }
    if (answered) {
      done(std::move(d));
    } else {
      Fallback(r, std::move(done));
    }
    return;
  }
  if (!r.lease) {
    // Strings of the request must outlive the call: copy into the closure.
    auto shared_done = std::make_shared<Done>(std::move(done));
    struct Owned {
      std::string policy, key, tenant, operation;
      int64_t cost;
    };
    auto owned = std::make_shared<Owned>(Owned{std::string(req.policy), std::string(req.key),
                                               std::string(req.tenant),
                                               std::string(req.operation), req.cost});
    scheduler_.Post([this, owned, shared_done] {
      Resolved again;
      const client::Request copy{owned->policy, owned->key, owned->tenant, owned->operation,
                                 owned->cost};
      if (Resolve(copy, again)) return;  // resolved once already; cannot fail now
      StartCheck(again, shared_done, 0);
      (void)owned;  // keeps the strings `again` points into alive through StartCheck
    });
    return;
  }
  Shard& shard = ShardOf(r.id);
  bool start = false;
  bool answered = false;
  bool refill = false;
  ClientDecision d;
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    const int64_t now_us = scheduler_.NowUs();
    if (shard.buckets.size() >= shard.sweep_at && !shard.buckets.contains(r.id)) {
      SweepIdle(shard, now_us);
    }
    auto [it, created] = shard.buckets.try_emplace(r.id);
    Bucket& b = it->second;
    if (created) {
      b.policy = r.index;
      b.key = std::string(r.key);
      b.tenant = std::string(r.tenant);
      b.lease_size = r.policy->LeaseSize();
      b.watermark = 1;  // raised once the key shows it spends faster than a round trip
    }
    answered = Spend(shard, b, *r.policy, r.cost, now_us, &d, &refill);
    if (!answered) {
      b.waiters.push_back({r.cost, std::move(done)});
      if (!b.lease_in_flight) {
        b.lease_in_flight = true;
        start = true;
      }
    }
  }
  if (answered) {
    if (refill) scheduler_.Post([this, id = r.id] { StartLease(id); });
    done(std::move(d));
    return;
  }
  if (start) scheduler_.Post([this, id = r.id] { StartLease(id); });
}

void ClientCore::SweepIdle(Shard& shard, int64_t now_us) {
  for (auto it = shard.buckets.begin(); it != shard.buckets.end();) {
    Bucket& b = it->second;
    b.Expire(now_us, &shard.expired);
    // Idle: nothing held, nobody waiting, no lease coming, no back-off to remember.
    const bool idle = b.units == 0 && b.waiters.empty() && !b.lease_in_flight &&
                      now_us >= b.next_lease_us;
    it = idle ? shard.buckets.erase(it) : std::next(it);
  }
  shard.sweep_at = std::max(kFirstSweep, 2 * shard.buckets.size());
}

void ClientCore::StartLease(const KeyId& id, int attempt) {
  Shard& shard = ShardOf(id);
  OpSpec op;
  op.kind = OpKind::kLease;
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.buckets.find(id);
    if (it == shard.buckets.end()) return;
    Bucket& b = it->second;
    int64_t want = std::max<int64_t>(1, b.lease_size - b.units);
    for (const Bucket::Waiter& w : b.waiters) want = std::max(want, w.cost);
    op.policy = policies_.policies()[static_cast<size_t>(b.policy)].name;
    op.key = b.key;
    op.tenant = b.tenant;
    op.cost = want;
    b.lease_sent_us = scheduler_.NowUs();
  }
  const Policy& p = *policies_.Find(op.policy);
  SubBucket sub;
  if (std::optional<SubBucket> picked = PickSplit(p, op.key)) sub = *picked;
  op.split_k = sub.k;
  op.split_index = sub.index;
  op.split_epoch = sub.epoch;
  const std::string owner = OwnerFor(p.parent_index >= 0 ? op.tenant : op.key, op.key, sub);
  const int64_t wanted = op.cost;
  if (owner.empty() || IsDown(owner)) {
    OnLease(id, wanted, 2, sub, CallResult{CallStatus::kConnection, "owner is down", {}});
    return;
  }
  Call(owner, std::move(op), [this, id, wanted, attempt, sub](CallResult result) {
    OnLease(id, wanted, attempt, sub, std::move(result));
  });
}

std::optional<std::pair<const Policy*, std::string>> ClientCore::BucketKey(const KeyId& id) {
  Shard& shard = ShardOf(id);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.buckets.find(id);
  if (it == shard.buckets.end()) return std::nullopt;
  return std::make_pair(&policies_.policies()[static_cast<size_t>(it->second.policy)],
                        it->second.key);
}

void ClientCore::OnLease(const KeyId& id, int64_t wanted, int attempt, SubBucket sub,
                         CallResult result) {
  const OpAnswer& answer = result.answer;
  if (result.status == CallStatus::kOk) {
    if (answer.status == OpAnswer::Status::kWrongOwner && attempt == 0 && AdoptRing(answer)) {
      counters_.wrong_owner.fetch_add(1, std::memory_order_relaxed);
      StartLease(id, 1);  // once more, to the owner the new ring names
      return;
    }
    if (answer.status == OpAnswer::Status::kSplit && attempt < 2) {
      // The key got hot and was split: lease from one of its sub-buckets instead.
      counters_.split_redirects.fetch_add(1, std::memory_order_relaxed);
      const std::optional<std::pair<const Policy*, std::string>> bucket = BucketKey(id);
      if (!bucket) return;
      LearnSplit(*bucket->first, bucket->second, answer);
      if (answer.split_valid_ms > 0) {
        StartLease(id, attempt + 1);
        return;
      }
    }
    if (answer.status == OpAnswer::Status::kOk && answer.granted == 0 && sub.k != 0 &&
        attempt == 0) {
      const std::optional<std::pair<const Policy*, std::string>> bucket = BucketKey(id);
      if (!bucket) return;
      if (TryOtherSubBucket(*bucket->first, bucket->second)) {
        StartLease(id, 1);  // one sub-bucket is empty: try one other before denying
        return;
      }
    }
  }
  Shard& shard = ShardOf(id);
  std::vector<std::pair<Done, ClientDecision>> answers;
  std::vector<Done> fallbacks;
  Resolved r;
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.buckets.find(id);
    if (it == shard.buckets.end()) return;
    Bucket& b = it->second;
    b.lease_in_flight = false;
    const Policy& p = policies_.policies()[static_cast<size_t>(b.policy)];
    r.policy = &p;
    r.index = b.policy;
    r.key = b.key;
    r.tenant = b.tenant;
    r.routing = p.parent_index >= 0 ? r.tenant : r.key;
    r.id = id;
    r.lease = true;
    const OpAnswer& a = result.answer;
    const bool answered = result.status == CallStatus::kOk;
    if (answered && a.status == OpAnswer::Status::kOk) {
      const int64_t now_us = scheduler_.NowUs();
      if (a.granted > 0) {
        b.batches.push_back({a.granted, now_us + a.lease_ttl_ms * 1000, a.granted_at_ms, sub});
        b.units += a.granted;
        counters_.leases.fetch_add(1, std::memory_order_relaxed);
        counters_.units_leased.fetch_add(static_cast<uint64_t>(a.granted),
                                         std::memory_order_relaxed);
      }
      b.lease_size = std::max(p.LeaseSize(), a.suggested_lease);
      b.store_remaining = a.results.empty() ? 0 : a.results.front().remaining;
      if (b.last_reply_us > 0 && now_us > b.last_reply_us) {
        const int64_t rtt = now_us - b.lease_sent_us;
        const int64_t need = b.spent_since_reply * rtt / (now_us - b.last_reply_us);
        b.watermark = std::clamp<int64_t>(need, 1, std::max<int64_t>(1, b.lease_size / 2));
      }
      b.last_reply_us = now_us;
      b.spent_since_reply = 0;
      if (a.granted >= wanted) {
        b.next_lease_us = 0;
      } else {
        // Short: the key is over its limit across the fleet. Come back when this gateway's
        // share (1/N of the rate) would have filled the lease, or when the owner says the
        // rest is there, whichever is later; with jitter, so gateways do not return together.
        const Rate& rate = p.rate;
        const int64_t share_us = CeilDiv(wanted * rate.window_ms() * 1000 *
                                             std::max(1, options_.gateways),
                                         rate.limit());
        const int64_t wait = std::max(a.retry_after_ms * 1000, share_us);
        const uint64_t jitter = (id.lo ^ static_cast<uint64_t>(now_us)) * 0x9e3779b97f4a7c15ULL;
        b.next_lease_us = now_us + wait / 2 +
                          static_cast<int64_t>((jitter >> 32) % static_cast<uint64_t>(wait + 1));
      }
      b.Expire(now_us, &shard.expired);
      size_t served = 0;
      for (; served < b.waiters.size() && b.units >= b.waiters[served].cost; ++served) {
        b.Take(b.waiters[served].cost);
        ClientDecision d;
        d.allowed = true;
        d.policy = p.name;
        d.limit = p.rate.limit();
        d.window_ms = p.rate.window_ms();
        d.remaining = b.units + b.store_remaining;
        d.source = Source::kStore;
        answers.emplace_back(std::move(b.waiters[served].done), std::move(d));
      }
      for (size_t i = served; i < b.waiters.size(); ++i) {
        // The store had too little: what it lacked arrives at the rate of the limit.
        ClientDecision d;
        d.allowed = false;
        const Policy* denier = a.denied_policy.empty() ? &p : policies_.Find(a.denied_policy);
        if (!denier) denier = &p;
        d.policy = denier->name;
        d.limit = denier->rate.limit();
        d.window_ms = denier->rate.window_ms();
        d.remaining = b.units;
        d.retry_after = std::chrono::milliseconds(CeilDiv(b.next_lease_us - now_us, 1000));
        d.source = Source::kStore;
        answers.emplace_back(std::move(b.waiters[i].done), std::move(d));
      }
      b.waiters.clear();
    } else if (answered && a.status == OpAnswer::Status::kSplit) {
      // Split, but between views: its owner reopens it soon. Deny until then.
      b.next_lease_us = scheduler_.NowUs() + a.retry_after_ms * 1000;
      for (Bucket::Waiter& w : b.waiters) {
        ClientDecision d = Denied(r, "");
        d.retry_after = std::chrono::milliseconds(a.retry_after_ms);
        answers.emplace_back(std::move(w.done), std::move(d));
      }
      b.waiters.clear();
    } else if (answered && (a.status == OpAnswer::Status::kBadRequest ||
                            a.status == OpAnswer::Status::kUnknownPolicy ||
                            a.status == OpAnswer::Status::kWrongOwner)) {
      // The node and this client disagree about the policies or the ring: say so.
      for (Bucket::Waiter& w : b.waiters) {
        answers.emplace_back(std::move(w.done), Denied(r, "the owner refused the lease: " + a.error));
      }
      b.waiters.clear();
    } else {
      // No answer in time, no connection, or a full node: the class decides.
      for (Bucket::Waiter& w : b.waiters) fallbacks.push_back(std::move(w.done));
      b.waiters.clear();
    }
  }
  for (auto& [done, d] : answers) {
    Count(d);
    done(std::move(d));
  }
  for (Done& done : fallbacks) Fallback(r, std::move(done));
}

void ClientCore::StartCheck(const Resolved& r, std::shared_ptr<Done> done, int attempt) {
  SubBucket sub;
  if (std::optional<SubBucket> picked = PickSplit(*r.policy, r.key)) sub = *picked;
  const std::string owner = OwnerFor(r.routing, r.key, sub);
  if (owner.empty() || IsDown(owner)) {
    Fallback(r, std::move(*done));
    return;
  }
  OpSpec op;
  op.kind = OpKind::kCheck;
  op.policy = r.policy->name;
  op.key = std::string(r.key);
  op.tenant = std::string(r.tenant);
  op.operation = std::string(r.operation);
  op.cost = r.operation.empty() ? r.cost : 1;
  op.split_k = sub.k;
  op.split_index = sub.index;
  op.split_epoch = sub.epoch;
  // The closure outlives `r`: keep copies of the strings it points into.
  auto keep = std::make_shared<OpSpec>(op);
  Call(owner, std::move(op), [this, keep, done, attempt, sub](CallResult result) {
    Resolved r;
    const client::Request req{keep->policy, keep->key, keep->tenant, keep->operation,
                              keep->cost};
    if (Resolve(req, r)) return;
    const OpAnswer& a = result.answer;
    if (result.status != CallStatus::kOk || a.status == OpAnswer::Status::kKeysExhausted) {
      Fallback(r, std::move(*done));
      return;
    }
    if (a.status == OpAnswer::Status::kWrongOwner && attempt == 0 && AdoptRing(a)) {
      counters_.wrong_owner.fetch_add(1, std::memory_order_relaxed);
      StartCheck(r, done, 1);
      return;
    }
    if (a.status == OpAnswer::Status::kSplit) {
      counters_.split_redirects.fetch_add(1, std::memory_order_relaxed);
      LearnSplit(*r.policy, r.key, a);
      if (a.split_valid_ms > 0 && attempt < 2) {
        StartCheck(r, done, attempt + 1);  // to one of its sub-buckets
        return;
      }
      ClientDecision d = Denied(r, "");  // between views: its owner reopens it soon
      d.retry_after = std::chrono::milliseconds(a.retry_after_ms);
      Count(d);
      (*done)(std::move(d));
      return;
    }
    if (a.status == OpAnswer::Status::kOk && sub.k != 0) {
      if (!a.allowed && attempt == 0 && TryOtherSubBucket(*r.policy, r.key)) {
        StartCheck(r, done, 1);  // denied by one sub-bucket: try one other before denying
        return;
      }
      if (attempt == 1) NoteOtherSubBucket(*r.policy, r.key, a.allowed);
    }
    ClientDecision d = a.status == OpAnswer::Status::kOk ? FromAnswer(r, a, Source::kStore)
                                                         : Denied(r, a.error);
    Count(d);
    (*done)(std::move(d));
  });
}

std::string ClientCore::OwnerFor(std::string_view routing, std::string_view key,
                                 const SubBucket& sub) const {
  if (sub.k == 0) return OwnerOf(routing);
  std::string sub_key(key);
  sub_key += '#';
  sub_key += std::to_string(sub.index);
  return OwnerOf(sub_key);
}

std::optional<ClientCore::SubBucket> ClientCore::PickSplit(const Policy& p, std::string_view key) {
  if (p.parent_index >= 0) return std::nullopt;  // nested keys are never split
  const KeyId split_id = MakeKeyId({p.name, key});
  SubBucket sub;
  bool renew = false;
  {
    std::lock_guard<std::mutex> lock(split_mu_);
    if (splits_.empty()) return std::nullopt;
    auto it = splits_.find(split_id);
    if (it == splits_.end()) return std::nullopt;
    SplitView& view = it->second;
    const int64_t now = scheduler_.NowUs();
    if (now >= view.valid_until_us) {
      splits_.erase(it);  // lapsed: ask the key's owner again
      return std::nullopt;
    }
    sub = view.sub;
    view.sub.index = static_cast<uint16_t>((view.sub.index + 1) % view.sub.k);
    ++view.sent;
    renew = now >= view.renew_at_us && !view.renewing;
    view.renewing = view.renewing || renew;
  }
  if (renew) scheduler_.Post([this, split_id] { RenewSplit(split_id); });
  return sub;
}

void ClientCore::LearnSplit(const Policy& p, std::string_view key, const OpAnswer& a) {
  const KeyId split_id = MakeKeyId({p.name, key});
  std::lock_guard<std::mutex> lock(split_mu_);
  if (a.split_k == 0 || a.split_valid_ms <= 0) {
    splits_.erase(split_id);
    return;
  }
  const int64_t now = scheduler_.NowUs();
  SplitView& view = splits_[split_id];
  if (view.sub.epoch != a.split_epoch) {
    view.sub.index = static_cast<uint16_t>(split_id.lo % a.split_k);  // gateways start apart
  }
  view.policy = policy_index_.at(p.name);
  view.key = std::string(key);
  view.sub.k = a.split_k;
  view.sub.epoch = a.split_epoch;
  view.sub.index = static_cast<uint16_t>(view.sub.index % a.split_k);
  view.valid_until_us = now + a.split_valid_ms * 1000;
  view.renew_at_us = now + a.split_valid_ms * 1000 / 2;
  view.renewing = false;
}

bool ClientCore::TryOtherSubBucket(const Policy& p, std::string_view key) {
  std::lock_guard<std::mutex> lock(split_mu_);
  auto it = splits_.find(MakeKeyId({p.name, key}));
  if (it == splits_.end()) return false;
  SplitView& view = it->second;
  ++view.denials;
  return view.other_tries < 8 || view.other_wins * 4 >= view.other_tries ||
         view.denials % 16 == 0;
}

void ClientCore::NoteOtherSubBucket(const Policy& p, std::string_view key, bool allowed) {
  std::lock_guard<std::mutex> lock(split_mu_);
  auto it = splits_.find(MakeKeyId({p.name, key}));
  if (it == splits_.end()) return;
  SplitView& view = it->second;
  if (view.other_tries >= 64) {  // a sliding memory: halve both
    view.other_tries /= 2;
    view.other_wins /= 2;
  }
  ++view.other_tries;
  view.other_wins += allowed;
}

void ClientCore::RenewSplit(const KeyId& split_id) {
  OpSpec op;
  op.kind = OpKind::kSplit;
  {
    std::lock_guard<std::mutex> lock(split_mu_);
    auto it = splits_.find(split_id);
    if (it == splits_.end()) return;
    op.policy = policies_.policies()[static_cast<size_t>(it->second.policy)].name;
    op.key = it->second.key;
    op.cost = std::min(it->second.sent, kMaxCost);
    it->second.sent = 0;
  }
  const std::string owner = OwnerOf(op.key);
  if (owner.empty() || IsDown(owner)) return;  // the view lapses by itself
  const std::string policy = op.policy, key = op.key;
  Call(owner, std::move(op), [this, split_id, policy, key](CallResult result) {
    if (result.status == CallStatus::kOk && result.answer.status == OpAnswer::Status::kOk) {
      LearnSplit(*policies_.Find(policy), key, result.answer);
      return;
    }
    std::lock_guard<std::mutex> lock(split_mu_);
    auto it = splits_.find(split_id);
    if (it != splits_.end()) it->second.renewing = false;  // try again with the next op
  });
}

ClientDecision ClientCore::FromAnswer(const Resolved& r, const OpAnswer& a, Source source) const {
  ClientDecision d;
  d.allowed = a.allowed;
  const Policy* decider = r.policy;
  size_t index = 0;
  if (!a.allowed && a.denied_by >= 0) {
    index = static_cast<size_t>(a.denied_by);
    if (const Policy* p = policies_.Find(a.denied_policy)) decider = p;
  }
  d.policy = decider->name;
  d.limit = decider->rate.limit();
  d.window_ms = decider->rate.window_ms();
  if (index < a.results.size()) {
    d.remaining = a.results[index].remaining;
    d.reset = std::chrono::milliseconds(a.results[index].reset_after_ms);
  }
  d.retry_after = std::chrono::milliseconds(a.allowed ? 0 : a.retry_after_ms);
  d.source = source;
  return d;
}

void ClientCore::Fallback(const Resolved& r, Done done) {
  const Policy& p = *r.policy;
  counters_.fallback_by_class[static_cast<size_t>(p.limit_class)].fetch_add(
      1, std::memory_order_relaxed);
  ClientDecision d;
  d.policy = p.name;
  d.limit = p.rate.limit();
  d.window_ms = p.rate.window_ms();
  d.source = Source::kFallback;
  const int64_t now_ms = scheduler_.NowUs() / 1000;
  switch (p.limit_class) {
    case LimitClass::kSecurity:
    case LimitClass::kContract: {
      // A local limiter per key for the policy and every ancestor of the same kind:
      // all of them pass, or none is charged.
      struct Local {
        KeyId id;
        const Policy* policy;
        const Rate* rate;
      };
      std::vector<Local> locals;
      for (const Policy* q : policies_.Chain(p)) {
        const Rate* rate = nullptr;
        if (q->limit_class == LimitClass::kSecurity && q->fallback.local_rate) {
          rate = &*q->fallback.local_rate;
        } else if (q->limit_class == LimitClass::kContract) {
          rate = &contract_fallback_[static_cast<size_t>(policy_index_.at(q->name))];
        } else if (q->limit_class == LimitClass::kSecurity) {
          // A security limit with no local limit denies while its owner is away.
          d.allowed = false;
          d.policy = q->name;
          d.retry_after = std::chrono::milliseconds(options_.probe_max_us / 1000);
          Count(d);
          done(std::move(d));
          return;
        } else {
          continue;
        }
        const std::string_view key = q == &p ? r.key : r.tenant;
        locals.push_back({MakeKeyId({"fallback", q->name, key}), q, rate});
      }
      {
        std::lock_guard<std::mutex> lock(fallback_mu_);
        if (local_limits_.size() >= local_sweep_at_) {
          // Keys whose local limiter is back to fresh carry nothing: drop them, so the
          // fallback's memory follows the keys in use, not every key ever seen.
          std::erase_if(local_limits_, [&](const auto& entry) {
            return entry.second.limiter.IsFresh(*entry.second.rate, now_ms);
          });
          local_sweep_at_ = std::max(kFirstSweep, 2 * local_limits_.size());
        }
        std::vector<KeyLimiter*> limiters;
        d.allowed = true;
        for (const Local& l : locals) {
          KeyLimiter& limiter =
              local_limits_.try_emplace(l.id, LocalLimit{KeyLimiter(l.policy->algorithm), l.rate})
                  .first->second.limiter;
          limiters.push_back(&limiter);
          const ClientDecision peek = [&] {
            const limiter::Decision x = limiter.Peek(*l.rate, now_ms, r.cost);
            ClientDecision y;
            y.allowed = x.allowed;
            y.remaining = x.remaining;
            y.retry_after = std::chrono::milliseconds(x.retry_after_ms == kNever ? 0 : x.retry_after_ms);
            y.reset = std::chrono::milliseconds(x.reset_after_ms);
            return y;
          }();
          if (!peek.allowed && d.allowed) {
            d.allowed = false;
            d.policy = l.policy->name;
            d.limit = l.rate->limit();
            d.window_ms = l.rate->window_ms();
            d.retry_after = peek.retry_after;
            d.reset = peek.reset;
            d.remaining = 0;
          }
        }
        if (d.allowed) {
          for (size_t i = 0; i < limiters.size(); ++i) {
            const limiter::Decision x = limiters[i]->Decide(*locals[i].rate, now_ms, r.cost);
            if (i == 0) {
              d.remaining = x.remaining;
              d.reset = std::chrono::milliseconds(x.reset_after_ms);
            }
          }
        }
      }
      Count(d);
      done(std::move(d));
      return;
    }
    case LimitClass::kBilling: {
      // Fail open, and owe the owner what was used.
      {
        std::lock_guard<std::mutex> lock(fallback_mu_);
        Debt& debt = debts_[r.id];
        if (debt.key.empty()) {
          debt.policy = r.index;
          debt.key = std::string(r.key);
          debt.tenant = std::string(r.tenant);
        }
        debt.owner = OwnerOf(r.routing);
        debt.units += r.cost;
      }
      d.allowed = true;
      Count(d);
      done(std::move(d));
      return;
    }
    case LimitClass::kCapacity: {
      Shedder& s = *shedders_[static_cast<size_t>(r.index)];
      auto waiting = std::make_shared<Done>(std::move(done));
      std::unique_lock<std::mutex> lock(s.mu);
      if (s.in_use < p.fallback.max_concurrency) {
        ++s.in_use;
        lock.unlock();
        GrantSlot(r.index, waiting);
        return;
      }
      if (static_cast<int64_t>(s.queue.size()) >= p.fallback.max_queue) {
        lock.unlock();
        d.allowed = false;
        d.retry_after = std::chrono::milliseconds(p.fallback.queue_timeout_ms);
        Count(d);
        (*waiting)(std::move(d));
        return;
      }
      // Wait for a slot, at most queue_timeout.
      const uint64_t ticket = s.next_ticket++;
      s.queue.emplace_back(ticket, waiting);
      lock.unlock();
      const int index = r.index;
      scheduler_.After(p.fallback.queue_timeout_ms * 1000, [this, &s, ticket, index] {
        std::shared_ptr<Done> expired;
        {
          std::lock_guard<std::mutex> guard(s.mu);
          auto it = std::find_if(s.queue.begin(), s.queue.end(),
                                 [&](const auto& q) { return q.first == ticket; });
          if (it == s.queue.end()) return;  // it got a slot
          expired = std::move(it->second);
          s.queue.erase(it);
        }
        const Policy& q = policies_.policies()[static_cast<size_t>(index)];
        ClientDecision d;
        d.policy = q.name;
        d.limit = q.rate.limit();
        d.window_ms = q.rate.window_ms();
        d.source = Source::kFallback;
        d.allowed = false;
        Count(d);
        (*expired)(std::move(d));
      });
      return;
    }
  }
}

void ClientCore::GrantSlot(int policy, const std::shared_ptr<Done>& done) {
  const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
  ClientDecision d;
  d.allowed = true;
  d.policy = p.name;
  d.limit = p.rate.limit();
  d.window_ms = p.rate.window_ms();
  d.source = Source::kFallback;
  d.permit = client::Permit([this, policy] { ReleaseSlot(policy); });
  Count(d);
  (*done)(std::move(d));
}

void ClientCore::ReleaseSlot(int policy) {
  Shedder& s = *shedders_[static_cast<size_t>(policy)];
  std::shared_ptr<Done> next;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.queue.empty()) {
      --s.in_use;
      return;
    }
    next = std::move(s.queue.front().second);  // the slot passes on
    s.queue.pop_front();
  }
  scheduler_.Post([this, policy, next] { GrantSlot(policy, next); });
}

void ClientCore::Call(const std::string& address, OpSpec op, Transport::Callback done) {
  counters_.store_calls.fetch_add(1, std::memory_order_relaxed);
  struct State {
    bool finished = false;
    uint64_t timer = 0;
    Transport::Callback done;
  };
  auto state = std::make_shared<State>();
  state->done = std::move(done);
  state->timer = scheduler_.After(options_.deadline_us, [this, state, address] {
    if (state->finished) return;
    state->finished = true;
    counters_.deadline_misses.fetch_add(1, std::memory_order_relaxed);
    counters_.store_errors.fetch_add(1, std::memory_order_relaxed);
    NoteMiss(address);
    state->done(CallResult{CallStatus::kDeadline, "no answer within the deadline", {}});
  });
  transport_.Send(address, std::move(op), [this, state, address](CallResult result) {
    if (state->finished) return;  // too late: the deadline has answered
    state->finished = true;
    scheduler_.Cancel(state->timer);
    if (result.status == CallStatus::kConnection) {
      counters_.store_errors.fetch_add(1, std::memory_order_relaxed);
      MarkDown(address);
    } else {
      NoteOk(address);
    }
    state->done(std::move(result));
  });
}

void ClientCore::WarmUp() {
  const std::shared_ptr<const Ring> r = ring();
  scheduler_.Post([this, r] {
    for (const std::string& m : r->members()) {
      OpSpec hello;
      hello.kind = OpKind::kStats;
      transport_.Send(m, std::move(hello), [](CallResult) {});
    }
  });
}

std::string ClientCore::OwnerOf(std::string_view routing_key) const {
  std::lock_guard<std::mutex> lock(ring_mu_);
  return ring_->empty() ? std::string() : ring_->Owner(routing_key);
}

std::shared_ptr<const Ring> ClientCore::ring() const {
  std::lock_guard<std::mutex> lock(ring_mu_);
  return ring_;
}

void ClientCore::SetMembers(std::vector<std::string> members) {
  auto ring = std::make_shared<const Ring>(std::move(members));
  std::lock_guard<std::mutex> lock(ring_mu_);
  if (ring->version() != ring_->version()) ring_ = std::move(ring);
}

bool ClientCore::AdoptRing(const OpAnswer& a) {
  if (a.members.empty()) return false;
  {
    std::lock_guard<std::mutex> lock(ring_mu_);
    if (a.ring_version == ring_->version()) return false;
  }
  SetMembers(a.members);
  return true;
}

bool ClientCore::IsDown(const std::string& address) {
  std::lock_guard<std::mutex> lock(health_mu_);
  auto it = health_.find(address);
  return it != health_.end() && it->second.down;
}

void ClientCore::NoteOk(const std::string& address) {
  std::lock_guard<std::mutex> lock(health_mu_);
  health_[address].misses = 0;
}

void ClientCore::NoteMiss(const std::string& address) {
  bool down = false;
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    Health& h = health_[address];
    down = ++h.misses >= options_.down_after_misses && !h.down;
  }
  if (down) MarkDown(address);
}

void ClientCore::MarkDown(const std::string& address) {
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    Health& h = health_[address];
    if (h.down) return;
    h.down = true;
    h.backoff_us = options_.probe_first_us;
  }
  // The connection stays: a node that is slow for a moment answers the probe on it, with no
  // reconnection and no in-flight op failed. A probe that gets no answer replaces it.
  scheduler_.After(options_.probe_first_us, [this, address] { Probe(address); });
}

void ClientCore::Probe(const std::string& address) {
  OpSpec op;
  op.kind = OpKind::kStats;
  counters_.store_calls.fetch_add(1, std::memory_order_relaxed);
  // A probe bypasses Call: its misses must not count against a node already down.
  auto finished = std::make_shared<bool>(false);
  auto retry = [this, address, finished] {
    if (*finished) return;
    *finished = true;
    int64_t wait = 0;
    {
      std::lock_guard<std::mutex> lock(health_mu_);
      Health& h = health_[address];
      wait = h.backoff_us;
      h.backoff_us = std::min(options_.probe_max_us, h.backoff_us * 2);
    }
    scheduler_.After(wait, [this, address] { Probe(address); });
  };
  // No answer at all: the connection may be wedged (a peer gone without a reset); the next
  // probe goes over a new one.
  const uint64_t timer = scheduler_.After(options_.deadline_us * 10, [this, address, finished, retry] {
    if (*finished) return;
    transport_.Disconnect(address);
    retry();
  });
  transport_.Send(address, op, [this, address, finished, timer, retry](CallResult result) {
    if (*finished) return;
    if (result.status != CallStatus::kOk) {
      scheduler_.Cancel(timer);
      retry();
      return;
    }
    *finished = true;
    scheduler_.Cancel(timer);
    {
      std::lock_guard<std::mutex> lock(health_mu_);
      Health& h = health_[address];
      h.down = false;
      h.misses = 0;
    }
    Reconcile(address);
  });
}

void ClientCore::Reconcile(const std::string& address) {
  // Lease what billing keys used while their owner was away, until it is paid.
  std::vector<std::pair<KeyId, OpSpec>> calls;
  {
    std::lock_guard<std::mutex> lock(fallback_mu_);
    for (auto& [id, debt] : debts_) {
      if (debt.owner != address || debt.in_flight || debt.units <= 0) continue;
      debt.in_flight = true;
      OpSpec op;
      op.kind = OpKind::kLease;
      op.policy = policies_.policies()[static_cast<size_t>(debt.policy)].name;
      op.key = debt.key;
      op.tenant = debt.tenant;
      op.cost = std::min(debt.units, kMaxCost);
      calls.emplace_back(id, std::move(op));
    }
  }
  for (auto& [id, op] : calls) {
    Call(address, std::move(op), [this, id = id, address](CallResult result) {
      bool again = false;
      {
        std::lock_guard<std::mutex> lock(fallback_mu_);
        auto it = debts_.find(id);
        if (it == debts_.end()) return;
        Debt& debt = it->second;
        debt.in_flight = false;
        const bool answered = result.status == CallStatus::kOk;
        if (answered && result.answer.status == OpAnswer::Status::kOk) {
          debt.units -= result.answer.granted;
        }
        // A node that refuses the lease outright (the policy is strict there) never will.
        const bool refused = answered && result.answer.status != OpAnswer::Status::kOk &&
                             result.answer.status != OpAnswer::Status::kKeysExhausted;
        if (debt.units <= 0 || refused) {
          debts_.erase(it);
        } else {
          again = true;
        }
      }
      if (again) {
        scheduler_.After(options_.reconcile_retry_us, [this, address] {
          if (!IsDown(address)) Reconcile(address);
        });
      }
    });
  }
}

client::Counters ClientCore::counters() const {
  client::Counters c;
  c.decisions = counters_.decisions.load(std::memory_order_relaxed);
  c.allowed = counters_.allowed.load(std::memory_order_relaxed);
  c.denied = counters_.denied.load(std::memory_order_relaxed);
  for (size_t i = 0; i < 3; ++i) c.by_source[i] = counters_.by_source[i].load(std::memory_order_relaxed);
  for (size_t i = 0; i < 4; ++i) {
    c.fallback_by_class[i] = counters_.fallback_by_class[i].load(std::memory_order_relaxed);
  }
  c.store_calls = counters_.store_calls.load(std::memory_order_relaxed);
  c.store_errors = counters_.store_errors.load(std::memory_order_relaxed);
  c.deadline_misses = counters_.deadline_misses.load(std::memory_order_relaxed);
  c.wrong_owner = counters_.wrong_owner.load(std::memory_order_relaxed);
  c.leases = counters_.leases.load(std::memory_order_relaxed);
  c.units_leased = counters_.units_leased.load(std::memory_order_relaxed);
  c.units_returned = counters_.units_returned.load(std::memory_order_relaxed);
  c.units_expired = counters_.units_expired.load(std::memory_order_relaxed);
  c.split_redirects = counters_.split_redirects.load(std::memory_order_relaxed);
  for (const auto& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard->mu);
    c.decisions += shard->lease_allowed + shard->lease_denied;
    c.allowed += shard->lease_allowed;
    c.denied += shard->lease_denied;
    c.by_source[static_cast<size_t>(Source::kLease)] += shard->lease_allowed;
    c.by_source[static_cast<size_t>(Source::kStore)] += shard->lease_denied;
    c.units_expired += shard->expired;
    c.local_buckets += shard->buckets.size();
  }
  {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(health_mu_));
    for (const auto& [address, h] : health_) c.nodes_down += h.down;
  }
  {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(fallback_mu_));
    c.fallback_limiters = local_limits_.size();
  }
  return c;
}

int64_t ClientCore::HeldUnits() const {
  int64_t held = 0;
  const int64_t now = scheduler_.NowUs();
  for (const auto& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard->mu);
    for (const auto& [id, b] : shard->buckets) {
      for (const Bucket::Batch& batch : b.batches) held += batch.expires_us > now ? batch.units : 0;
    }
  }
  return held;
}

void ClientCore::ReturnLeases(std::function<void()> done) {
  std::vector<std::pair<std::string, OpSpec>> calls;
  for (const auto& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard->mu);
    const int64_t now = scheduler_.NowUs();
    for (auto& [id, b] : shard->buckets) {
      b.Expire(now, &shard->expired);
      const Policy& p = policies_.policies()[static_cast<size_t>(b.policy)];
      for (const Bucket::Batch& batch : b.batches) {
        OpSpec op;
        op.kind = OpKind::kReturn;
        op.policy = p.name;
        op.key = b.key;
        op.tenant = b.tenant;
        op.cost = batch.units;
        op.leased_at_ms = batch.granted_at_ms;
        op.split_k = batch.sub.k;
        op.split_index = batch.sub.index;
        op.split_epoch = batch.sub.epoch;
        calls.emplace_back(OwnerFor(p.parent_index >= 0 ? b.tenant : b.key, b.key, batch.sub),
                           std::move(op));
      }
      b.batches.clear();
      b.units = 0;
    }
  }
  scheduler_.Post([this, calls = std::move(calls), done = std::move(done)]() mutable {
    auto left = std::make_shared<size_t>(calls.size());
    auto finish = std::make_shared<std::function<void()>>(std::move(done));
    if (calls.empty()) {
      (*finish)();
      return;
    }
    for (auto& [owner, op] : calls) {
      const int64_t units = op.cost;
      if (owner.empty() || IsDown(owner)) {
        if (--*left == 0) (*finish)();
        continue;
      }
      Call(owner, std::move(op), [this, left, finish, units](CallResult result) {
        if (result.status == CallStatus::kOk && result.answer.status == OpAnswer::Status::kOk) {
          counters_.units_returned.fetch_add(static_cast<uint64_t>(units),
                                             std::memory_order_relaxed);
        }
        if (--*left == 0) (*finish)();
      });
    }
  });
}

}  // namespace limiter
