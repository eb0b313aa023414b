// The node's in-memory store: every key's algorithm state, keyed by a 128-bit xxh3 of
// (policy, key); key strings are not kept. Keys are spread over stripes, each with its own
// mutex and one KeyTable per policy, so threads meet on a lock only when they touch the same
// stripe; an operation on several keys locks their stripes in ascending order.
//
// Idle keys expire: a key whose state equals a fresh key's (a full bucket, a past window)
// carries no information and is reclaimed by Sweep, or on demand at the key bound. Keys with
// live state are never evicted, since forgetting them would let the key exceed its promise;
// at max_keys, new keys are refused instead.
//
// Beside a key's state, the store keeps a lease book for keys that had leases granted
// (lease_book.h), in its stripe; the book goes with the key (a key is fresh again, so no
// charge of its leases is left in effect).
//
// Thread-safety: the functions taking a Slot or a policy table need the key's stripe locked
// (StripeLock); the counters are atomics.
#pragma once

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/key_limiter.h"
#include "common/lease_book.h"
#include "common/policy.h"
#include "server/key_table.h"

namespace limiter {

class Store {
 public:
  struct Options {
    int64_t max_keys = 10'000'000;
    size_t stripes = 64;
  };

  Store(const PolicySet& policies, Options options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  size_t StripeOf(const KeyId& id) const { return id.hi % stripes_.size(); }

  // Locks a set of stripes: `stripes` sorted ascending without repeats. At most kMaxLocks.
  class StripeLock {
   public:
    static constexpr size_t kMaxLocks = 64;
    StripeLock(Store& store, std::span<const size_t> stripes);
    ~StripeLock();
    StripeLock(const StripeLock&) = delete;
    StripeLock& operator=(const StripeLock&) = delete;
    std::span<const size_t> stripes() const { return {stripes_.data(), count_}; }

   private:
    Store& store_;
    std::array<size_t, kMaxLocks> stripes_;
    size_t count_;
  };

  // --- With the key's stripe locked ---
  Slot* Find(int policy, const KeyId& id);
  // The state in a slot; a fresh state for nullptr.
  KeyLimiter Unpack(int policy, const Slot* slot) const;
  void Pack(int policy, KeyLimiter&& limiter, Slot* slot);
  // Adds a key; needs a reservation (TryReserve) for it.
  Slot* Insert(int policy, const KeyId& id);
  void Erase(int policy, const KeyId& id);
  // Reclaims expired keys in the locked stripes, looking at up to `budget` slots in each.
  size_t ReclaimLocked(const StripeLock& lock, int64_t now_ms, size_t budget);

  // A key split into sub-buckets on other nodes (hot keys): its owner keeps this record,
  // with the key's stripe, and answers for the key with the split instead of charging it.
  // A split key's own slot is kept (never swept) so that it can reopen drained.
  struct Split {
    int policy = 0;
    std::string key;
    uint16_t k = 0;
    uint32_t epoch = 0;
    int64_t valid_until_ms = 0;  // the latest time any client was told it may use the split
    int64_t reported_ops = 0;    // ops clients sent to the sub-buckets, since the last tick
    int64_t rate = 0;            // ops per second: the higher of the last two ticks
    int64_t last_tick_rate = 0;
    int cool_ticks = 0;          // consecutive ticks below the merge threshold
    bool merging = false;        // no longer renewed; reopens after valid_until_ms
  };
  // The lease book of a key, or nullptr; AddBook makes it (for a key that has a slot). With
  // the key's stripe locked.
  LeaseBook* FindBook(const KeyId& id);
  LeaseBook& AddBook(const KeyId& id);
  int64_t books() const { return books_.load(std::memory_order_relaxed); }

  Split* FindSplit(const KeyId& id);
  Split& AddSplit(const KeyId& id);
  void EraseSplit(const KeyId& id);
  bool has_splits() const { return split_count() > 0; }
  int64_t split_count() const { return splits_.load(std::memory_order_relaxed); }
  // Calls visit(id, split) for every split, each stripe locked in turn (so visit may use the
  // functions above on that key); a split for which it returns true is erased.
  void VisitSplits(const std::function<bool(const KeyId&, Split&)>& visit);

  // Room for `n` new keys under max_keys; false (and nothing reserved) when there is none.
  bool TryReserve(int64_t n);

  // Reclaims expired keys, looking at up to `budget` slots per stripe and policy. Takes the
  // stripe locks one at a time.
  size_t Sweep(int64_t now_ms, size_t budget);

  int64_t keys() const { return keys_.load(std::memory_order_relaxed); }
  int64_t max_keys() const { return max_keys_; }
  int64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }
  size_t table_bytes();  // locks every stripe in turn

 private:
  struct Stripe {
    std::mutex mu;
    std::vector<KeyTable> tables;   // per policy; guarded by mu
    std::vector<size_t> cursors;    // per policy, where Sweep goes on; guarded by mu
    std::unordered_map<KeyId, Split, KeyIdHash> splits;  // guarded by mu
    std::unordered_map<KeyId, LeaseBook, KeyIdHash> books;  // guarded by mu
  };
  size_t SweepStripe(Stripe& stripe, int64_t now_ms, size_t budget);  // with stripe.mu held
  bool IsFresh(int policy, const Slot& slot, int64_t now_ms) const;
  void DropBook(Stripe& stripe, const KeyId& id);  // with stripe.mu held
  void Release(int policy, Slot& slot);  // frees what a slot owns

  std::vector<Algorithm> algorithms_;  // per policy
  std::vector<Rate> rates_;            // per policy
  std::vector<std::unique_ptr<Stripe>> stripes_;
  const int64_t max_keys_;
  std::atomic<int64_t> keys_{0};
  std::atomic<int64_t> evictions_{0};
  std::atomic<int64_t> splits_{0};
  std::atomic<int64_t> books_{0};
};

}  // namespace limiter
