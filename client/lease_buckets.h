// LeaseBuckets: a gateway's local buckets, one per leased limit it serves, filled with units
// leased from the limit's owner; every unit spent here was already charged at the store.
//
// The promise to callers: a request is answered from its bucket when the bucket holds the
// units; otherwise it waits for the lease in flight or the next one, and that lease asks for
// what the waiting requests need (at least the lease size, at most what the limit can
// hold). A request is denied only when the owner had less than was asked (the key is out of
// units), and falls back by class when its deadline passes first. A warm key never waits:
// below a watermark (the units it spends during one round trip) the bucket is topped up in
// the background. After the owner was short, requests the bucket cannot pay are denied here
// until this gateway's share of the rate (1/N) would have refilled a lease, or the owner says
// the rest is there (at least 1 ms, at most 10 s, with jitter), so a key over its limit does
// not cost the store a call per request.
//
// Memory follows the keys in use: a shard drops its idle buckets (nothing held, nobody
// waiting, nothing in flight) when it reaches 64 of them or twice what it kept last time.
//
// Thread-safety: all functions may be called from any thread; 256 shards each have their
// own mutex, and a call locks one. The callbacks it hands back (answers, fallbacks) are run
// by the caller, with no lock held.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client/client_counters.h"
#include "client/resolved_request.h"
#include "common/policy.h"
#include "limiter/client/client.h"
#include "protocol/key_id.h"
#include "protocol/sub_bucket.h"

namespace limiter {

class LeaseBuckets {
 public:
  using Done = std::function<void(client::Decision)>;
  struct Options {
    int gateways = 1;            // N: a short key backs off for one unit of its 1/N share
    int64_t deadline_us = 2000;  // how long a request waits for a lease
  };

  LeaseBuckets(const PolicySet& policies, Options options, ClientCounters& counters);
  ~LeaseBuckets();
  LeaseBuckets(const LeaseBuckets&) = delete;
  LeaseBuckets& operator=(const LeaseBuckets&) = delete;

  // --- the request path ---

  // The answer of the request's existing bucket when it can answer alone: spending held
  // units, or denying while the owner has said the key is out. The request is resolved (its
  // cost and lease mode known) and not `never`. *refill: start a background lease
  // (StartLease).
  bool TrySpend(const ResolvedRequest& r, int64_t now_us, client::Decision* out, bool* refill);
  // Answers from the request's bucket (making it) as TrySpend does; else, when owner_up()
  // says its owner can be asked, queues `done` (moved from) for the lease in flight or the
  // next one (*start_lease: none is in flight, start one), and else leaves `done` alone. A
  // queued request waits at most for the lease in flight (whose deadline is no later than
  // its own); only when that lease could not pay it and the next one is started does the
  // bucket need a deadline timer of its own (Settled::arm_timer). owner_up runs with the
  // bucket's shard locked.
  enum class Step { kAnswered, kQueued, kOwnerAway };
  Step SpendOrQueue(const ResolvedRequest& r, int64_t now_us, Done& done, client::Decision* out,
                    bool* refill, bool* start_lease, const std::function<bool()>& owner_up);

  // --- leasing ---

  struct Ask {
    int policy = 0;
    std::string key, tenant;
    int64_t units = 0;
  };
  // What the next lease asks for (marking it sent), or nullopt when the bucket is gone.
  std::optional<Ask> NextLease(const KeyId& id, int64_t now_us);

  struct Grant {
    int64_t granted = 0;
    int64_t wanted = 0;
    int64_t granted_at_ms = 0;  // node time
    int64_t lease_ttl_ms = 0;
    uint64_t lease_id = 0;
    int64_t suggested_lease = 0;
    int64_t store_remaining = 0;
    int64_t retry_after_ms = 0;         // when short: when the rest could be had
    const Policy* denied_by = nullptr;  // when short: the limit of the chain that was
    SubBucket sub;
  };
  // What to run after a lease's answer (no lock held): answers, requests that fall back by
  // class, and whether the bucket needs another lease (for requests still waiting) or its
  // deadline timer.
  struct Settled {
    std::vector<std::pair<Done, client::Decision>> answers;
    // Requests that fall back, with their costs, and the bucket's limit they are for.
    std::vector<std::pair<Done, int64_t>> fallbacks;
    int policy = 0;
    std::string key, tenant;
    bool lease_again = false;
    bool arm_timer = false;
    int64_t timer_at_us = 0;
  };
  Settled OnGrant(const KeyId& id, const Grant& g, int64_t now_us);
  // A grant that came after its lease's deadline had already failed the requests waiting on
  // it. The owner charged those units, so they go into the bucket (made again if it was
  // dropped meanwhile, from `ask`) rather than being lost until the lease lapses: otherwise
  // a slow moment would deny later requests while the key still holds units. Requests
  // waiting now that the units can pay are answered; any lease in flight is left alone.
  Settled OnLateGrant(const KeyId& id, const Ask& ask, const Grant& g, int64_t now_us);
  // The owner answered but refused: waiting requests are denied with `error` (empty: an
  // ordinary denial, say between two views of a split key), and asked to retry later.
  Settled OnRefused(const KeyId& id, const std::string& error, int64_t retry_after_ms,
                    int64_t now_us);
  // No usable answer in time: waiting requests fall back by class.
  Settled OnFailed(const KeyId& id);
  // The lease is asked again elsewhere (a redirect, a sub-bucket): waiting requests keep
  // their own deadlines meanwhile (Settled::arm_timer).
  Settled OnRetry(const KeyId& id);
  // The bucket's deadline timer: requests past their deadline fall back.
  Settled OnDeadline(const KeyId& id, int64_t now_us);

  // --- the whole gateway ---

  struct Unspent {
    int policy = 0;
    std::string key, tenant;
    int64_t units = 0;
    int64_t granted_at_ms = 0;
    uint64_t lease_id = 0;
    SubBucket sub;
  };
  // Takes every unspent leased unit out of the buckets, to be returned.
  std::vector<Unspent> TakeUnspent(int64_t now_us);
  // Leased units not yet spent nor lapsed.
  int64_t HeldUnits(int64_t now_us) const;
  void AddCounters(client::Counters& c) const;
  // The policy and key of a bucket, or nullopt when it is gone.
  std::optional<std::pair<const Policy*, std::string>> KeyOf(const KeyId& id);

 private:
  struct Bucket;
  struct Shard;
  Shard& ShardOf(const KeyId& id) { return *shards_[id.lo % shards_.size()]; }
  const Shard& ShardOf(const KeyId& id) const { return *shards_[id.lo % shards_.size()]; }
  // With the shard locked: answers alone if the bucket can (waiters first: none queued).
  bool Spend(Shard& shard, Bucket& b, int64_t cost, int64_t now_us, client::Decision* out,
             bool* refill);
  void SweepIdle(Shard& shard, int64_t now_us);
  // Puts a grant's units into the bucket (with its shard locked), counted as leased.
  void Keep(Bucket& b, const Grant& g, int64_t now_us);
  // Runs f(shard, bucket, settled) with the bucket's shard locked; nothing when it is gone.
  template <class F>
  Settled Settle(const KeyId& id, F&& f);
  client::Decision Answer(const Policy& p, bool allowed) const;
  static void Fill(client::Decision* d, const Policy& p, bool allowed);
  // Waiting requests that their bucket can pay now are answered; when `short_ms` is set the
  // owner is out, and the rest are denied (retry after it), else they keep waiting.
  void ServeWaiters(Bucket& b, bool owner_short, int64_t now_us, Settled& s);
  // When a bucket whose owner was short asks again.
  int64_t Backoff(const Bucket& b, const Policy& p, int64_t retry_after_ms, int64_t now_us,
                  const KeyId& id) const;

  const PolicySet& policies_;
  const Options options_;
  ClientCounters& counters_;
  std::vector<int64_t> capacity_;  // per policy: the most one request can be admitted, chain-wide
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace limiter
