// KeyTransaction: one op's keys, changed atomically. It locks the keys' stripes (ascending,
// once each), takes each key's state out of the store (a durable key not in memory from its
// database, a sub-bucket not yet made drained), reserves room for every key to take one
// charge, and then saves them all (Commit) or gives them all back (Abandon): an op that is
// refused or denied changes nothing. The store's rules stay inside: existing keys are saved
// before new ones are inserted (an insert may move every slot of its table), a refused
// reservation gives back what was reserved, durable keys are queued for their database.
// It also keeps the lease books that let a RETURN give back only what is still owed.
//
// Thread-safety: one per op, on the worker's thread; the stripes stay locked while it lives.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/calendar.h"
#include "common/key_limiter.h"
#include "common/limit_decision.h"
#include "common/rate.h"
#include "limiter/status.h"
#include "protocol/key_id.h"
#include "server/store.h"

namespace limiter {

class DurableStore;
class PolicyTable;
class RegionShares;

// One limit an op touches: a named limit or an ancestor, with what the op does to it.
struct LimitEntry {
  int policy = 0;
  KeyId id;
  Rate rate;                // the policy's; a sub-bucket's or a region's share of it
  std::string_view key;     // into the request
  std::string_view tenant;  // the request's (a durable record names its key by both)
  bool ancestor = false;    // charged as the ancestor of a named limit (key is the tenant)
  int64_t now = 0;          // the policy's time for this op (server/policy_clock.h)
  const Calendar* calendar = nullptr;  // the policy's, if it runs on one
  uint16_t split_k = 0;                // a sub-bucket: of a key split this many ways
  uint16_t split_index = 0;
  int64_t cost = 1;
  Slot* slot = nullptr;
  KeyLimiter limiter{Algorithm::kGcra};
  LimitDecision decision;
  // For lease books: the charge in effect before this op changed the state, and (LEASE)
  // once the grant is charged.
  int64_t in_effect_before = 0;
  int64_t in_effect = 0;

  // A wait on this entry's clock in wall milliseconds (a calendar's window time is not).
  int64_t WallSpan(int64_t span) const {
    return calendar ? calendar->ToWallDuration(now, span) : span;
  }
  // The decision as a reply says it: its waits in wall milliseconds.
  LimitDecision ReplyDecision() const {
    LimitDecision d = decision;
    d.retry_after_ms = WallSpan(d.retry_after_ms);
    d.reset_after_ms = WallSpan(d.reset_after_ms);
    return d;
  }
};

class KeyTransaction {
 public:
  // What a transaction works on: the node's store and what it keeps beside it.
  struct Stores {
    Store& store;
    DurableStore* durable;  // null: durable policies' keys are kept in memory only
    const PolicyTable& policies;
    RegionShares* regions;  // null without a region
    size_t sweep_budget;    // slots a reclaim pass looks at in each stripe
  };
  // Locks the entries' stripes. `s` and `stripes` (the caller's scratch) outlive it.
  KeyTransaction(const Stores& s, std::vector<LimitEntry>& entries, std::vector<size_t>& stripes);
  KeyTransaction(const KeyTransaction&) = delete;
  KeyTransaction& operator=(const KeyTransaction&) = delete;

  // Takes each entry's slot and state (until Commit or Abandon). An error (StoreError): a
  // durable key's record could not be read, or its database takes no writes now; every state
  // taken is given back.
  Status Load();
  // Reserves room for every entry to take one charge: a new key, or a sliding log's growth.
  // At the bound, expired keys in the locked stripes are reclaimed and it tries once more.
  // -1, or the policy that had no room: then nothing is reserved, every state is given back,
  // and the refusal is counted against that policy.
  int Reserve(int64_t now);
  // Global keys: each state moved to its region's share in force (then kept, decided or not).
  void ReconcileShares();
  // Load or ReconcileShares made a state that must be kept whatever the op decides.
  bool must_save() const { return must_save_; }
  // After Reserve: saves every entry's state (existing keys first), queues durable ones.
  void Commit();
  // After Reserve: saves nothing; states and new keys' units go back.
  void Abandon();

  // Lease books. Before an admission or a grant changes the states: each entry's charge in
  // effect. After an admission is saved: the books learn it (the least a lease's charge can
  // have fallen to). After a grant is saved: each entry's book records it.
  void NoteInEffect();
  void ClampBooks();
  void RecordGrant(uint64_t lease_id, int64_t ttl_ms, int64_t units);
  // RETURN: the entries' states taken as they are (no durable read, nothing reserved), their
  // region shares reconciled; then each entry's claim on its book and refund; then the rest
  // given back. The named limit's refund (in units), or its book's refusal.
  Result<int64_t> Return(uint64_t lease_id, int64_t leased_at, int64_t units);

  // INSPECT: the first entry's state as it is, changing nothing (a durable key not in memory
  // as its database has it). An error: its record could not be read.
  Status Peek();

  // The durable batch the op's reply must wait for (0: none).
  uint64_t durable_seq() const { return durable_seq_; }

 private:
  void Persist(const LimitEntry& e);
  void GiveBackAll();

  const Stores& s_;
  std::vector<LimitEntry>& entries_;
  Store::StripeLock lock_;
  bool must_save_ = false;
  uint64_t durable_seq_ = 0;
};

// The stripes of the entries, sorted and once each: the order to lock them in.
std::span<const size_t> StripesOf(const Store& store, std::span<const LimitEntry> entries,
                                  std::vector<size_t>& out);

}  // namespace limiter
