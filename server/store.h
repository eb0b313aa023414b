// The node's in-memory store: every key's algorithm state, keyed by a 128-bit xxh3 of
// (policy, key) under a per-process seed (key_id.h); key strings are not kept. Keys are spread
// over stripes, each with its own mutex and one KeyTable per policy, so threads meet on a lock
// only when they touch the same stripe; an operation on several keys locks their stripes in
// ascending order.
//
// Idle keys expire: a key whose state equals a fresh key's (a full bucket, a past window)
// carries no information and is reclaimed by Sweep, or on demand at the key bound. Keys with
// live state are never evicted, since forgetting them would let the key exceed its promise;
// at the bound, new keys are refused instead.
//
// Key units and budgets. The bound is on memory: the node holds at most max_keys key units.
// A key is one unit (its 32-byte slot); a sliding-log key is 1 + ceil(B / 32), B being what
// its log holds on the heap (its State and its ring buffer, counted as at least
// kMinCapacity entries). A log's buffer grows only when full and only with the units
// reserved first (ReserveCharge), and gives half back at a quarter full (Pack), so the count
// is exact as entries come and go; one log holds at most min(L, W) entries (sliding_log.h).
// Each policy has a share of max_keys, so that a flood of new keys on one policy cannot push
// out another policy's new keys:
//   - a policy with `max_keys: N` in the policy file has N units reserved, and N is its cap;
//   - the others get equal reserves out of half of what the explicit ones leave; the other
//     half is reserved by nobody, and they may grow beyond their reserves into it (up to
//     max_keys). Half, not all: with everything reserved no policy could ever grow past
//     max_keys / policies, and a node with one busy policy would refuse keys at a fraction of
//     its bound.
// A reservation of u units for a policy holding h is admitted iff h + u <= its cap and either
// h + u <= its reserve or the node's committed space, the sum over policies of
// max(held, reserve), stays within max_keys. A policy below its reserve therefore always gets
// its key, whatever the others do; a flood on one policy takes at most its reserve and the
// unreserved half. Explicit caps adding up to more than max_keys are an error (PlanBudgets:
// the node must not start with them).
//
// Exact under concurrency: each policy's held units are one atomic, changed only by exact
// transitions (CAS or fetch_add/sub, which know the old value), and over_, the units held
// beyond reserves, changes after each transition by exactly what it moved
// max(0, held - reserve): the changes telescope, so at rest over_ equals the sum, and nothing
// leaks. Within its reserve a reservation is a CAS on its policy's atomic alone (no lock;
// over_ does not move). Beyond it, reservations take budget_mu_, the only place over_ grows,
// so each reads over_ no lower than the truth (a release lowers it just after its own
// transition: a reading can be high for a moment, which refuses, never over-admits).
// Releases (Erase, Sweep, a log shrinking) take no lock. An op that reserves for several
// policies and is refused at the last one gives the others back, so a concurrent reservation
// beyond its reserve may be refused by that momentary hold; reserves are never touched by it.
//
// Beside a key's state, the store keeps a lease book for keys that had leases granted
// (lease_book.h), in its stripe; the book goes with the key (a key is fresh again, so no
// charge of its leases is left in effect).
//
// Thread-safety: the functions taking a Slot or a policy table need the key's stripe locked
// (StripeLock); the budget functions and counters may be used from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/key_limiter.h"
#include "common/lease_book.h"
#include "common/mutex.h"
#include "common/policy.h"
#include "limiter/status.h"
#include "server/key_table.h"

namespace limiter {

// A policy's share of the node's key units (see Store).
struct KeyBudget {
  int64_t reserve = 0;  // always available to the policy
  int64_t cap = 0;      // the most it may hold: its own max_keys, or the node's
  bool capped = false;  // the cap is the policy's own max_keys
};

class Store {
 public:
  struct Options {
    int64_t max_keys = 10'000'000;  // key units
    size_t stripes = 64;
    // Read for the keys of calendar policies, whose time is their calendar's window time
    // (server/policy_clock.h): sweeps judge them by it. Null: such keys are never swept.
    const Clock* clock = nullptr;
    // A sub-bucket of a split key (NoteSubBucket) is swept only once it has been fresh this
    // long; 0: as soon as it is fresh, like any key.
    int64_t sub_bucket_idle_ms = 0;
  };

  // Each policy's budget under max_keys, in the order of policies.policies(); an error when
  // the policies' own max_keys add up to more than max_keys. limiterd checks it before it
  // builds a node; a Store made with budgets that fail it is a crash.
  static Result<std::vector<KeyBudget>> PlanBudgets(const PolicySet& policies, int64_t max_keys);
  // Key units of a sliding-log key whose buffer holds `capacity` entries.
  static int64_t LogUnits(size_t capacity);

  Store(const PolicySet& policies, Options options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  size_t StripeOf(const KeyId& id) const { return id.hi % stripes_.size(); }
  size_t stripe_count() const { return stripes_.size(); }
  // With stripe `stripe` locked: appends the ids of the policy's keys there for which
  // pick(id) holds (the hand-off collects what it gives away).
  void KeysIn(size_t stripe, int policy, const std::function<bool(const KeyId&)>& pick,
              std::vector<KeyId>& out);

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

  // Any thread, no lock: a hint that the key will be looked up soon (KeyTable::Prefetch).
  void Prefetch(int policy, const KeyId& id) const;

  // --- With the key's stripe locked ---
  Slot* Find(int policy, const KeyId& id);
  // A copy of the state in a slot (a fresh state for nullptr), to look at.
  KeyLimiter Unpack(int policy, const Slot* slot) const;
  // The state in a slot, to change and then Pack (or GiveBack): a sliding log is moved out,
  // not copied, and advanced to now_ms (SlidingLog::Advance); its slot is held, never
  // reclaimed, until then. A fresh state for nullptr.
  KeyLimiter Take(int policy, Slot* slot, int64_t now_ms);
  // Reserves what the key needs to take one more charge: a new key's units (slot nullptr), or
  // a full sliding log's growth (its buffer grows now, the units are recorded in its slot).
  // False, with nothing reserved, when the policy's budget has no room. A new key's units are
  // Unreserve(policy, NewKeyUnits(policy))d if it is not inserted after all.
  bool ReserveCharge(int policy, Slot* slot, KeyLimiter& taken);
  // Stores a state in the slot, after Take or into a new slot; settles the key's units (a
  // log's buffer is trimmed at a quarter full). A state that outgrew its reservation is
  // counted all the same (no path in the node does that).
  void Pack(int policy, KeyLimiter&& limiter, Slot* slot);
  // Returns a state from Take that is not to be saved (a denial, a dry run, a refusal). Its
  // changes must change no later decision (Advance, a denying Decide, Peek).
  void GiveBack(int policy, KeyLimiter&& taken, Slot* slot);
  // Adds a key; needs NewKeyUnits(policy) reserved for it (ReserveCharge or TryReserve).
  Slot* Insert(int policy, const KeyId& id);
  void Erase(int policy, const KeyId& id);
  // Reclaims expired keys in the locked stripes, looking at up to `budget` slots in each: a
  // new key that finds no room tries this before it is refused. A flood of new keys refused
  // at a budget must cost a lookup each, not a scan each (the sweeper goes on meanwhile), so
  // after a pass a stripe is not looked at again for a wait: kReclaimBackoffMs after its
  // first, doubled after each further one up to kMaxReclaimBackoffMs, plus up to half of it
  // at random so that stripes passed together do not all come due together (a frame of new
  // keys would make a pass over each). A pass that let the key in is followed by
  // ReclaimHelped, which starts the waits over; one that reclaimed keys of other policies, or
  // too few, counts as one that found nothing.
  size_t ReclaimLocked(const StripeLock& lock, int64_t now_ms, size_t budget);
  void ReclaimHelped(const StripeLock& lock);
  static constexpr int64_t kReclaimBackoffMs = 100;
  static constexpr int64_t kMaxReclaimBackoffMs = 1600;
  // Reclaim passes made over a stripe (ReclaimLocked), for /metrics and tests.
  int64_t reclaim_passes() const { return reclaim_passes_.load(std::memory_order_relaxed); }

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
    int cool_ticks = 0;    // consecutive ticks below the merge threshold
    bool merging = false;  // no longer renewed; reopens after valid_until_ms
  };
  // The lease book of a key, or nullptr; AddBook makes it (for a key that has a slot). With
  // the key's stripe locked.
  LeaseBook* FindBook(const KeyId& id);
  LeaseBook& AddBook(const KeyId& id);
  int64_t books() const { return books_.load(std::memory_order_relaxed); }

  // A sub-bucket of a split key, made here (with its stripe locked). A sub-bucket that is
  // missing starts drained (Node::Load), so sweeping one as soon as it is full would drain it
  // again at its next op, denying requests well within the limit: it is kept until it has
  // been fresh for Options::sub_bucket_idle_ms (its split merged, or no client uses it).
  void NoteSubBucket(const KeyId& id);

  Split* FindSplit(const KeyId& id);
  Split& AddSplit(const KeyId& id);
  void EraseSplit(const KeyId& id);
  bool has_splits() const { return split_count() > 0; }
  int64_t split_count() const { return splits_.load(std::memory_order_relaxed); }
  // Calls visit(id, split) for every split, each stripe locked in turn (so visit may use the
  // functions above on that key); a split for which it returns true is erased.
  void VisitSplits(const std::function<bool(const KeyId&, Split&)>& visit);

  // --- Key budgets: any thread ---
  // The units a new key of the policy takes.
  int64_t NewKeyUnits(int policy) const { return new_key_units_[static_cast<size_t>(policy)]; }
  // Reserves `units` for the policy within its budget; false (nothing reserved) when there is
  // no room. Unreserve gives units back (a key erased, a reservation not used).
  bool TryReserve(int policy, int64_t units);
  void Unreserve(int policy, int64_t units);
  // Counts a refused new key (or log growth) against the policy.
  void NoteRefusal(int policy);

  // Reclaims expired keys, looking at up to `budget` slots per stripe and policy, and with
  // `share` > 1 at most capacity / share + 1 of a table (but at least kMinSweepSlots). Takes
  // the stripe locks one at a time.
  size_t Sweep(int64_t now_ms, size_t budget, size_t share = 1);
  static constexpr size_t kMinSweepSlots = 64;

  struct PolicyUsage {
    int64_t keys = 0;      // live keys
    int64_t units = 0;     // key units they hold, with those reserved for keys being added
    int64_t refusals = 0;  // reservations refused (new keys, a log's growth)
    KeyBudget budget;
  };
  PolicyUsage usage(int policy) const;
  int64_t keys() const;   // live keys, all policies
  int64_t units() const;  // key units held, all policies
  // The sum over policies of max(units held, reserve): never above max_keys.
  int64_t committed() const;
  int64_t max_keys() const { return max_keys_; }
  int64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }
  size_t table_bytes();  // locks every stripe in turn

  // The keys the tables hold for a policy and their units, counted slot by slot from the
  // memory each holds (every stripe locked in turn). Equals usage()'s when no op is between
  // Take or a reservation and its Pack: for tests and consistency checks.
  struct Tally {
    int64_t keys = 0;
    int64_t units = 0;
  };
  Tally Recount(int policy);

 private:
  struct Stripe {
    Mutex mu;
    // Per policy (read without the lock only by KeyTable::Prefetch, a hint). The vector
    // itself does not change after the store is made.
    std::vector<KeyTable> tables LIMITER_GUARDED_BY(mu);
    std::vector<size_t> cursors LIMITER_GUARDED_BY(mu);  // per policy, where Sweep goes on
    std::unordered_map<KeyId, Split, KeyIdHash> splits LIMITER_GUARDED_BY(mu);
    std::unordered_map<KeyId, LeaseBook, KeyIdHash> books LIMITER_GUARDED_BY(mu);
    std::unordered_set<KeyId, KeyIdHash> sub_buckets LIMITER_GUARDED_BY(mu);
    int64_t next_reclaim_ms LIMITER_GUARDED_BY(mu) = 0;     // ReclaimLocked passes it by until then
    int64_t reclaim_backoff_ms LIMITER_GUARDED_BY(mu) = 0;  // the last wait set, less its jitter
  };
  // One policy's counts, on a cache line of their own.
  struct alignas(64) PolicyKeys {
    std::atomic<int64_t> units{0};
    std::atomic<int64_t> keys{0};
    std::atomic<int64_t> refusals{0};
    KeyBudget budget;
  };
  // The stripe of a key: the caller holds its lock (StripeLock) and says so to the lock
  // analysis (stripe.mu.AssertHeld()), which cannot follow a set of locks chosen at run time.
  Stripe& HeldStripe(const KeyId& id) const;
  size_t SweepStripe(Stripe& stripe, int64_t now_ms, size_t budget, size_t share)
      LIMITER_REQUIRES(stripe.mu);
  // Each policy's time for a sweep at now_ms (its calendar's for a calendar policy); kNoTime
  // for a calendar policy without a clock.
  void PolicyTimes(int64_t now_ms, std::vector<int64_t>& out) const;
  static constexpr int64_t kNoTime = INT64_MIN;
  bool IsFresh(int policy, const Slot& slot, int64_t now_ms) const;
  void DropBook(Stripe& stripe, const KeyId& id) LIMITER_REQUIRES(stripe.mu);
  void Release(int policy, Slot& slot);  // frees what a slot owns
  int64_t SlotUnits(int policy, const Slot& slot) const;
  void PackLog(int policy, SlidingLog::State& log, Slot& slot);
  void ForceReserve(int policy, int64_t units);  // counts units even beyond the budget
  bool IsLog(int policy) const {
    return algorithms_[static_cast<size_t>(policy)] == Algorithm::kSlidingLog;
  }

  std::vector<Algorithm> algorithms_;             // per policy
  std::vector<Rate> rates_;                       // per policy
  std::vector<const Policy*> calendar_policies_;  // per policy: itself if on a calendar, else null
  const Clock* clock_ = nullptr;
  const int64_t sub_bucket_idle_ms_;
  std::vector<int64_t> new_key_units_;  // per policy
  std::unique_ptr<PolicyKeys[]> policy_keys_;
  size_t policy_count_ = 0;
  std::vector<std::unique_ptr<Stripe>> stripes_;
  const int64_t max_keys_;
  int64_t free_ = 0;              // max_keys_ minus every reserve: the space beyond reserves
  Mutex budget_mu_;               // taken to grow over_
  std::atomic<int64_t> over_{0};  // units held beyond reserves, summed over policies
  std::atomic<int64_t> evictions_{0};
  std::atomic<int64_t> reclaim_passes_{0};
  std::atomic<int64_t> splits_{0};
  std::atomic<int64_t> books_{0};
};

}  // namespace limiter
