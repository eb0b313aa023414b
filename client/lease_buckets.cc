#include "client/lease_buckets.h"

#include <algorithm>

#include "common/key_limiter.h"
#include "common/limits.h"
#include "common/mutex.h"

namespace limiter {
namespace {

constexpr size_t kShards = 256;
// Local buckets per shard before the first sweep for idle ones (then twice what remained).
constexpr size_t kFirstSweep = 64;
// A key its owner said is out backs off at most this long before asking again: long enough
// that N gateways polling an over-limit key cost the owner little (a key at 100/s with
// leases of 20 and 40 gateways would wait 8 s for its share), short enough that a key of a
// day's window is not locked out on a gateway for days.
constexpr int64_t kMaxBackoffUs = 10'000'000;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

struct alignas(64) LeaseBuckets::Bucket {  // own cache lines: other threads' keys
  struct Batch {
    int64_t units;
    int64_t expires_us;
    int64_t granted_at_ms;  // node time, for RETURN
    uint64_t lease_id;      // for RETURN
    int64_t lease_units;    // what that lease granted: the most RETURN may give back of it
    SubBucket sub;          // where it was leased from, for RETURN
  };
  // The leases not yet spent, oldest first, inline (no allocation on the request path).
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
        // Full: fold the oldest two into one that lapses at the earlier time. Units are
        // spent oldest first, so what is left of it belongs to the newer lease, which is the
        // one a RETURN names (the older one's units simply lapse if any are left).
        items_[1].units += items_[0].units;
        items_[1].expires_us = std::min(items_[0].expires_us, items_[1].expires_us);
        pop_front();
      }
      items_[size_++] = b;
    }

   private:
    std::array<Batch, 4> items_;
    size_t size_ = 0;
  };
  struct Waiter {
    int64_t cost;
    int64_t deadline_us;
    Done done;
  };

  int policy = 0;
  std::string key, tenant;
  Batches batches;
  int64_t units = 0;  // sum over batches
  int64_t lease_size = 1;
  int64_t store_remaining = 0;
  bool lease_in_flight = false;
  int64_t asked = 0;  // units the lease in flight asked for
  // After the owner had less than asked for: no new lease before this time, and requests
  // the bucket cannot pay are denied here.
  int64_t next_lease_us = 0;
  // Refill below this many units: the units spent during a lease's round trip.
  int64_t watermark = 1;
  int64_t lease_sent_us = 0;
  int64_t last_reply_us = 0;
  int64_t spent_since_reply = 0;
  std::vector<Waiter> waiters;  // oldest first (a vector: nothing allocated until one waits)
  int64_t waiting_units = 0;    // sum of the waiters' costs
  bool timer_armed = false;

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
  bool Idle(int64_t now_us) const {
    return units == 0 && waiters.empty() && !lease_in_flight && now_us >= next_lease_us;
  }
};

struct alignas(64) LeaseBuckets::Shard {  // one cache line apart: threads on other shards
  Mutex mu;
  std::unordered_map<KeyId, Bucket, KeyIdHash> buckets LIMITER_GUARDED_BY(mu);
  size_t sweep_at LIMITER_GUARDED_BY(mu) = kFirstSweep;
  uint64_t lease_allowed LIMITER_GUARDED_BY(mu) = 0;
  uint64_t lease_denied LIMITER_GUARDED_BY(mu) = 0;
  uint64_t expired LIMITER_GUARDED_BY(mu) = 0;
};

template <class F>
LeaseBuckets::Settled LeaseBuckets::Settle(const KeyId& id, F&& f) {
  Settled s;
  Shard& shard = ShardOf(id);
  MutexLock lock(shard.mu);
  auto it = shard.buckets.find(id);
  if (it == shard.buckets.end()) return s;  // dropped: nobody waits on it
  Bucket& b = it->second;
  f(shard, b, s);
  if (!s.fallbacks.empty()) {  // what they fall back for
    s.policy = b.policy;
    s.key = b.key;
    s.tenant = b.tenant;
  }
  return s;
}

LeaseBuckets::LeaseBuckets(const PolicySet& policies, Options options, ClientCounters& counters)
    : policies_(policies), options_(options), counters_(counters) {
  for (const Policy& p : policies_.policies()) {
    int64_t cap = kMaxCost;
    for (const Policy* q : policies_.Chain(p))
      cap = std::min(cap, FullAllowance(q->algorithm, q->rate));
    capacity_.push_back(cap);
  }
  for (size_t i = 0; i < kShards; ++i) shards_.push_back(std::make_unique<Shard>());
}

LeaseBuckets::~LeaseBuckets() = default;

client::Decision LeaseBuckets::Answer(const Policy& p, bool allowed) const {
  client::Decision d;
  Fill(&d, p, allowed);
  return d;
}

// In place: the request path fills the caller's Decision rather than moving one into it.
void LeaseBuckets::Fill(client::Decision* d, const Policy& p, bool allowed) {
  d->allowed = allowed;
  d->policy = p.name;
  d->limit = p.rate.limit();
  d->window_ms = p.rate.window_ms();
  d->reset = std::chrono::milliseconds(0);
}

bool LeaseBuckets::Spend(Shard& shard, Bucket& b, int64_t cost, int64_t now_us,
                         client::Decision* out, bool* refill) {
  shard.mu.AssertHeld();  // the callers' lock
  b.Expire(now_us, &shard.expired);
  *refill = false;
  if (!b.waiters.empty()) return false;  // they are first in line
  const Policy& p = policies_.policies()[static_cast<size_t>(b.policy)];
  if (b.units < cost) {
    if (now_us >= b.next_lease_us) return false;
    ++shard.lease_denied;
    Fill(out, p, false);
    out->remaining = b.units;
    out->retry_after = std::chrono::milliseconds(CeilDiv(b.next_lease_us - now_us, 1000));
    out->source = client::Source::kStore;  // the store said the key is out
    return true;
  }
  b.Take(cost);
  b.spent_since_reply += cost;
  ++shard.lease_allowed;
  Fill(out, p, true);
  out->remaining = b.units + b.store_remaining;
  out->retry_after = std::chrono::milliseconds(0);
  out->source = client::Source::kLease;
  // Top up in the background below the watermark, so a warm key never waits.
  *refill = !b.lease_in_flight && b.units < b.watermark && now_us >= b.next_lease_us;
  if (*refill) b.lease_in_flight = true;
  return true;
}

bool LeaseBuckets::TrySpend(const ResolvedRequest& r, int64_t now_us, client::Decision* out,
                            bool* refill) {
  Shard& shard = ShardOf(r.id);
  MutexLock lock(shard.mu);
  auto it = shard.buckets.find(r.id);
  return it != shard.buckets.end() && Spend(shard, it->second, r.cost, now_us, out, refill);
}

LeaseBuckets::Step LeaseBuckets::SpendOrQueue(const ResolvedRequest& r, int64_t now_us, Done& done,
                                              client::Decision* out, bool* refill,
                                              bool* start_lease,
                                              const std::function<bool()>& owner_up) {
  Shard& shard = ShardOf(r.id);
  MutexLock lock(shard.mu);
  auto it = shard.buckets.find(r.id);
  if (it != shard.buckets.end() && Spend(shard, it->second, r.cost, now_us, out, refill)) {
    return Step::kAnswered;
  }
  if (!owner_up()) return Step::kOwnerAway;
  if (it == shard.buckets.end()) {
    if (shard.buckets.size() >= shard.sweep_at) SweepIdle(shard, now_us);
    it = shard.buckets.try_emplace(r.id).first;
    Bucket& b = it->second;
    b.policy = r.index;
    b.key = std::string(r.key);
    b.tenant = std::string(r.tenant);
    b.lease_size = r.policy->LeaseSize();
  }
  Bucket& b = it->second;
  b.waiters.push_back({r.cost, now_us + options_.deadline_us, std::move(done)});
  b.waiting_units += r.cost;
  *start_lease = !b.lease_in_flight;
  b.lease_in_flight = true;
  return Step::kQueued;
}

void LeaseBuckets::SweepIdle(Shard& shard, int64_t now_us) {
  shard.mu.AssertHeld();  // the caller's lock
  for (auto it = shard.buckets.begin(); it != shard.buckets.end();) {
    it->second.Expire(now_us, &shard.expired);
    it = it->second.Idle(now_us) ? shard.buckets.erase(it) : std::next(it);
  }
  shard.sweep_at = std::max(kFirstSweep, 2 * shard.buckets.size());
}

std::optional<LeaseBuckets::Ask> LeaseBuckets::NextLease(const KeyId& id, int64_t now_us) {
  Shard& shard = ShardOf(id);
  MutexLock lock(shard.mu);
  auto it = shard.buckets.find(id);
  if (it == shard.buckets.end()) return std::nullopt;
  Bucket& b = it->second;
  b.Expire(now_us, &shard.expired);
  // Enough for every request waiting, and a lease's worth at least; never more than one
  // request could ever be admitted.
  const int64_t wanted = std::max(b.lease_size, b.waiting_units) - b.units;
  b.asked = std::clamp<int64_t>(wanted, 1, capacity_[static_cast<size_t>(b.policy)]);
  b.lease_sent_us = now_us;
  b.lease_in_flight = true;
  return Ask{b.policy, b.key, b.tenant, b.asked};
}

int64_t LeaseBuckets::Backoff(const Bucket& b, const Policy& p, int64_t retry_after_ms,
                              int64_t now_us, const KeyId& id) const {
  // When this gateway's share of the rate (1/N) would have refilled a lease, or when the
  // owner says the rest is there, whichever is later; within [1 ms, 10 s]. With N gateways
  // asking in turn, the owner sees about one lease per lease's worth of units the key earns.
  const __int128 share = static_cast<__int128>(b.lease_size) * p.rate.window_ms() * 1000 *
                         std::max(1, options_.gateways) / p.rate.limit();
  const __int128 rest = static_cast<__int128>(std::max<int64_t>(0, retry_after_ms)) * 1000;
  const int64_t wait =
      static_cast<int64_t>(std::clamp<__int128>(std::max(share, rest), 1000, kMaxBackoffUs));
  // Jitter in [0.5, 1.5): gateways that were told together come back apart.
  const uint64_t mix = (id.lo ^ static_cast<uint64_t>(now_us) ^ static_cast<uint64_t>(b.asked)) *
                       0x9e3779b97f4a7c15ULL;
  return now_us + wait / 2 + static_cast<int64_t>((mix >> 32) % static_cast<uint64_t>(wait));
}

void LeaseBuckets::ServeWaiters(Bucket& b, bool owner_short, int64_t now_us, Settled& s) {
  const Policy& p = policies_.policies()[static_cast<size_t>(b.policy)];
  // Served or denied in place; those that keep waiting move up, in order.
  size_t kept = 0;
  for (Bucket::Waiter& w : b.waiters) {
    if (b.units >= w.cost) {
      b.Take(w.cost);
      client::Decision d = Answer(p, true);
      d.remaining = b.units + b.store_remaining;
      d.source = client::Source::kStore;
      s.answers.emplace_back(std::move(w.done), std::move(d));
    } else if (owner_short) {
      client::Decision d = Answer(p, false);
      d.remaining = b.units;
      d.retry_after =
          std::chrono::milliseconds(std::max<int64_t>(1, CeilDiv(b.next_lease_us - now_us, 1000)));
      d.source = client::Source::kStore;
      s.answers.emplace_back(std::move(w.done), std::move(d));
    } else {
      b.waiters[kept++] = std::move(w);
    }
  }
  b.waiters.resize(kept);
  b.waiting_units = 0;
  for (const Bucket::Waiter& w : b.waiters) b.waiting_units += w.cost;
}

void LeaseBuckets::Keep(Bucket& b, const Grant& g, int64_t now_us) {
  b.batches.push_back(
      {g.granted, now_us + g.lease_ttl_ms * 1000, g.granted_at_ms, g.lease_id, g.granted, g.sub});
  b.units += g.granted;
  ClientCounters::Add(counters_.leases);
  ClientCounters::Add(counters_.units_leased, static_cast<uint64_t>(g.granted));
}

LeaseBuckets::Settled LeaseBuckets::OnGrant(const KeyId& id, const Grant& g, int64_t now_us) {
  return Settle(id, [&](Shard& shard, Bucket& b, Settled& s) {
    b.lease_in_flight = false;
    const Policy& p = policies_.policies()[static_cast<size_t>(b.policy)];
    if (g.granted > 0) Keep(b, g, now_us);
    b.lease_size = std::max(p.LeaseSize(), g.suggested_lease);
    // A sub-bucket of a split key holds L/k: leases from it are 1/k the size.
    if (g.sub.k != 0) b.lease_size = std::max<int64_t>(1, b.lease_size / g.sub.k);
    b.store_remaining = g.store_remaining;
    if (b.last_reply_us > 0 && now_us > b.last_reply_us) {
      const int64_t rtt = now_us - b.lease_sent_us;
      const int64_t need = b.spent_since_reply * rtt / (now_us - b.last_reply_us);
      b.watermark = std::clamp<int64_t>(need, 1, std::max<int64_t>(1, b.lease_size / 2));
    }
    b.last_reply_us = now_us;
    b.spent_since_reply = 0;
    // Short: the owner had less than asked, so the key is out of units across the fleet. A
    // sub-bucket that had less is one of k: only an empty one says so (the requests still
    // waiting lease again, from the next sub-bucket).
    const bool owner_short = g.sub.k != 0 ? g.granted == 0 : g.granted < g.wanted;
    // An empty sub-bucket is one of k, not the fleet out of units: lease again once one unit
    // is back there (retry_after for a sub-bucket is for one unit, GrantOf), not after a
    // fleet share's refill.
    b.next_lease_us = !owner_short   ? 0
                      : g.sub.k != 0 ? now_us + std::max<int64_t>(1, g.retry_after_ms) * 1000
                                     : Backoff(b, p, g.retry_after_ms, now_us, id);
    b.Expire(now_us, &shard.expired);
    ServeWaiters(b, owner_short, now_us, s);
    if (owner_short && g.denied_by != nullptr) {
      for (size_t i = 0; i < s.answers.size(); ++i) {
        client::Decision& d = s.answers[i].second;
        if (d.allowed) continue;
        d.policy = g.denied_by->name;
        d.limit = g.denied_by->rate.limit();
        d.window_ms = g.denied_by->rate.window_ms();
      }
    }
    // Requests that came while the lease was in flight and that it could not pay: the next
    // store call is theirs, within their own deadlines.
    s.lease_again = !b.waiters.empty();
    if (s.lease_again) {
      b.lease_in_flight = true;
      s.arm_timer = !b.timer_armed;
      b.timer_armed = true;
      s.timer_at_us = b.waiters.front().deadline_us;
    }
  });
}

LeaseBuckets::Settled LeaseBuckets::OnLateGrant(const KeyId& id, const Ask& ask, const Grant& g,
                                                int64_t now_us) {
  Settled s;
  if (g.granted <= 0) return s;
  Shard& shard = ShardOf(id);
  MutexLock lock(shard.mu);
  auto [it, made] = shard.buckets.try_emplace(id);
  Bucket& b = it->second;
  if (made) {
    b.policy = ask.policy;
    b.key = ask.key;
    b.tenant = ask.tenant;
    b.lease_size = policies_.policies()[static_cast<size_t>(ask.policy)].LeaseSize();
  }
  Keep(b, g, now_us);
  ClientCounters::Add(counters_.late_grants_kept);
  b.Expire(now_us, &shard.expired);
  ServeWaiters(b, /*owner_short=*/false, now_us, s);
  return s;
}

LeaseBuckets::Settled LeaseBuckets::OnRefused(const KeyId& id, const std::string& error,
                                              int64_t retry_after_ms, int64_t now_us) {
  return Settle(id, [&](Shard&, Bucket& b, Settled& s) {
    b.lease_in_flight = false;
    if (retry_after_ms > 0) b.next_lease_us = now_us + retry_after_ms * 1000;
    const Policy& p = policies_.policies()[static_cast<size_t>(b.policy)];
    for (Bucket::Waiter& w : b.waiters) {
      client::Decision d = Answer(p, false);
      d.error = error;
      d.retry_after = std::chrono::milliseconds(retry_after_ms);
      d.source = client::Source::kStore;
      s.answers.emplace_back(std::move(w.done), std::move(d));
    }
    b.waiters.clear();
    b.waiting_units = 0;
  });
}

LeaseBuckets::Settled LeaseBuckets::OnFailed(const KeyId& id) {
  return Settle(id, [&](Shard&, Bucket& b, Settled& s) {
    b.lease_in_flight = false;
    for (Bucket::Waiter& w : b.waiters) s.fallbacks.emplace_back(std::move(w.done), w.cost);
    b.waiters.clear();
    b.waiting_units = 0;
  });
}

LeaseBuckets::Settled LeaseBuckets::OnRetry(const KeyId& id) {
  return Settle(id, [&](Shard&, Bucket& b, Settled& s) {
    if (b.waiters.empty() || b.timer_armed) return;
    b.timer_armed = true;
    s.arm_timer = true;
    s.timer_at_us = b.waiters.front().deadline_us;
  });
}

LeaseBuckets::Settled LeaseBuckets::OnDeadline(const KeyId& id, int64_t now_us) {
  return Settle(id, [&](Shard&, Bucket& b, Settled& s) {
    b.timer_armed = false;
    size_t late = 0;  // the deadlines come in order
    for (; late < b.waiters.size() && b.waiters[late].deadline_us <= now_us; ++late) {
      b.waiting_units -= b.waiters[late].cost;
      s.fallbacks.emplace_back(std::move(b.waiters[late].done), b.waiters[late].cost);
    }
    b.waiters.erase(b.waiters.begin(), b.waiters.begin() + static_cast<std::ptrdiff_t>(late));
    if (!b.waiters.empty()) {
      b.timer_armed = true;
      s.arm_timer = true;
      s.timer_at_us = b.waiters.front().deadline_us;
    }
  });
}

std::vector<LeaseBuckets::Unspent> LeaseBuckets::TakeUnspent(int64_t now_us) {
  std::vector<Unspent> out;
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    for (auto& [id, b] : shard->buckets) {
      b.Expire(now_us, &shard->expired);
      for (const Bucket::Batch& batch : b.batches) {
        out.push_back({b.policy, b.key, b.tenant, std::min(batch.units, batch.lease_units),
                       batch.granted_at_ms, batch.lease_id, batch.sub});
      }
      b.batches.clear();
      b.units = 0;
    }
  }
  return out;
}

int64_t LeaseBuckets::HeldUnits(int64_t now_us) const {
  int64_t held = 0;
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    for (const auto& [id, b] : shard->buckets) {
      for (const Bucket::Batch& batch : b.batches) {
        held += batch.expires_us > now_us ? batch.units : 0;
      }
    }
  }
  return held;
}

void LeaseBuckets::AddCounters(client::Counters& c) const {
  for (const auto& shard : shards_) {
    MutexLock lock(shard->mu);
    c.decisions += shard->lease_allowed + shard->lease_denied;
    c.allowed += shard->lease_allowed;
    c.denied += shard->lease_denied;
    c.by_source[static_cast<size_t>(client::Source::kLease)] += shard->lease_allowed;
    c.by_source[static_cast<size_t>(client::Source::kStore)] += shard->lease_denied;
    c.units_expired += shard->expired;
    c.local_buckets += shard->buckets.size();
  }
}

std::optional<std::pair<const Policy*, std::string>> LeaseBuckets::KeyOf(const KeyId& id) {
  Shard& shard = ShardOf(id);
  MutexLock lock(shard.mu);
  auto it = shard.buckets.find(id);
  if (it == shard.buckets.end()) return std::nullopt;
  return std::make_pair(&policies_.policies()[static_cast<size_t>(it->second.policy)],
                        it->second.key);
}

}  // namespace limiter
