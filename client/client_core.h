// ClientCore: the gateway library's logic over a Scheduler and a Transport (the seams), so
// that the real client (client.cc: asio thread, TCP) and the fleet simulation in the tests
// (simulated clock and transport, real Node) run the same code.
//
// Per request: resolve the policy and cost; a lease-mode key spends units leased from its
// owner from a local bucket, refilled in the background at a low watermark, so a warm key
// never waits on the network; a strict-mode key sends one CHECK. A store call that misses
// its deadline, or a node marked down, falls back by the policy's class.
//
// Thread-safety: Decide, DecideAsync, TryLocal and the accessors may be called from any
// thread. Local buckets live in shards, each with its own mutex; the ring, node health,
// fallback limiters and debts each have theirs. Transport calls and timers run on the
// scheduler's thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client/scheduler.h"
#include "client/transport.h"
#include "common/key_id.h"
#include "common/key_limiter.h"
#include "common/policy.h"
#include "common/ring.h"
#include "limiter/client/client.h"

namespace limiter {

struct ClientCoreOptions {
  int64_t deadline_us = 2000;
  int gateways = 1;             // N: contract limits fall back to L/N
  int down_after_misses = 3;    // consecutive deadline misses that mark a node down
  int64_t probe_first_us = 100'000;
  int64_t probe_max_us = 1'000'000;
  int64_t reconcile_retry_us = 500'000;
};

class ClientCore {
 public:
  ClientCore(PolicySet policies, std::vector<std::string> members, Scheduler& scheduler,
             Transport& transport, ClientCoreOptions options);
  ~ClientCore();
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  // Blocks until DecideAsync answers; not for use on the scheduler's own thread.
  client::Decision Decide(const client::Request& request);
  void DecideAsync(const client::Request& request, std::function<void(client::Decision)> done);
  // The answer from local state alone (a warm lease), or false when it needs more.
  bool TryLocal(const client::Request& request, client::Decision* out);

  // Opens the connections to every member ahead of the first request; answers are ignored.
  void WarmUp();
  // A new member list (a DNS refresh); keys follow their new owners from the next call.
  void SetMembers(std::vector<std::string> members);
  std::shared_ptr<const Ring> ring() const;

  client::Counters counters() const;
  // Leased units not yet spent nor lapsed, over every key.
  int64_t HeldUnits() const;
  // RETURNs every unspent leased unit; `done` runs on the scheduler's thread when every
  // RETURN has been answered or has missed its deadline.
  void ReturnLeases(std::function<void()> done);

 private:
  struct Resolved;
  struct SubBucket {
    uint16_t k = 0;  // 0: the key itself
    uint16_t index = 0;
    uint32_t epoch = 0;
  };
  struct SplitView;
  struct Bucket;
  struct Shard;
  struct Health;
  struct Debt;
  struct Shedder;
  using Done = std::function<void(client::Decision)>;

  std::optional<std::string> Resolve(const client::Request& r, Resolved& out) const;
  Shard& ShardOf(const KeyId& id) { return *shards_[id.lo % shards_.size()]; }
  // Drops the shard's idle local buckets. With the shard's mutex held.
  void SweepIdle(Shard& shard, int64_t now_us);
  bool Spend(Shard& shard, Bucket& b, const Policy& p, int64_t cost, int64_t now_us,
             client::Decision* out, bool* refill);
  // Whether every limit of the chain charges `operation` as much as `policy` does.
  bool SameCostAlongChain(const Policy& policy, std::string_view operation, int64_t cost) const;
  void StartLease(const KeyId& id, int attempt = 0);
  void OnLease(const KeyId& id, int64_t wanted, int attempt, SubBucket sub, CallResult result);
  // The policy and key of a local bucket, or nullopt when it is gone.
  std::optional<std::pair<const Policy*, std::string>> BucketKey(const KeyId& id);
  // Hot keys: a key its owner has split. PickSplit chooses the sub-bucket for the next op
  // (in turn) and counts it, or nullopt when the key is not (known to be) split.
  std::optional<SubBucket> PickSplit(const Policy& p, std::string_view key);
  void LearnSplit(const Policy& p, std::string_view key, const OpAnswer& a);
  // After a denial by one sub-bucket: whether to try one other. Always while such second
  // tries pay off now and then; when nearly all fail (the key is over its limit everywhere),
  // only one denial in 16, so a denied request costs the cluster one op, not two.
  bool TryOtherSubBucket(const Policy& p, std::string_view key);
  void NoteOtherSubBucket(const Policy& p, std::string_view key, bool allowed);
  void RenewSplit(const KeyId& split_id);
  // The node an op goes to: the routing key's owner, or a sub-bucket's ("key#i").
  std::string OwnerFor(std::string_view routing, std::string_view key, const SubBucket& sub) const;
  void StartCheck(const Resolved& r, std::shared_ptr<Done> done, int attempt);
  void Fallback(const Resolved& r, Done done);
  void GrantSlot(int policy, const std::shared_ptr<Done>& done);  // capacity shedder
  void ReleaseSlot(int policy);
  // Sends op with a deadline; `done` runs once on the scheduler's thread.
  void Call(const std::string& address, OpSpec op, Transport::Callback done);
  std::string OwnerOf(std::string_view routing_key) const;
  bool IsDown(const std::string& address);
  void NoteOk(const std::string& address);
  void NoteMiss(const std::string& address);
  void MarkDown(const std::string& address);
  void Probe(const std::string& address);
  void Reconcile(const std::string& address);
  bool AdoptRing(const OpAnswer& answer);
  client::Decision Denied(const Resolved& r, std::string error) const;
  client::Decision FromAnswer(const Resolved& r, const OpAnswer& a, client::Source s) const;
  void Count(const client::Decision& d);

  const PolicySet policies_;
  std::unordered_map<std::string_view, int> policy_index_;
  std::vector<Rate> contract_fallback_;  // per policy: L/N (or L with overshoot)
  Scheduler& scheduler_;
  Transport& transport_;
  const ClientCoreOptions options_;

  mutable std::mutex ring_mu_;
  std::shared_ptr<const Ring> ring_;  // guarded by ring_mu_

  std::vector<std::unique_ptr<Shard>> shards_;

  std::mutex health_mu_;
  std::unordered_map<std::string, Health> health_;  // guarded by health_mu_

  std::mutex split_mu_;
  std::unordered_map<KeyId, SplitView, KeyIdHash> splits_;  // guarded by split_mu_

  std::mutex fallback_mu_;
  struct LocalLimit {
    KeyLimiter limiter;
    const Rate* rate;  // into contract_fallback_ or a policy's fallback
  };
  std::unordered_map<KeyId, LocalLimit, KeyIdHash> local_limits_;  // guarded by fallback_mu_
  size_t local_sweep_at_ = 64;  // guarded by fallback_mu_: sweep fresh ones at this size
  std::unordered_map<KeyId, Debt, KeyIdHash> debts_;                // guarded by fallback_mu_
  std::vector<std::unique_ptr<Shedder>> shedders_;  // per policy; each has its own mutex

  struct AtomicCounters {
    std::atomic<uint64_t> decisions{0}, allowed{0}, denied{0};
    std::array<std::atomic<uint64_t>, 3> by_source{};
    std::array<std::atomic<uint64_t>, 4> fallback_by_class{};
    std::atomic<uint64_t> store_calls{0}, store_errors{0}, deadline_misses{0}, wrong_owner{0};
    std::atomic<uint64_t> leases{0}, units_leased{0}, units_expired{0}, units_returned{0};
    std::atomic<uint64_t> split_redirects{0};
  };
  mutable AtomicCounters counters_;
};

}  // namespace limiter
