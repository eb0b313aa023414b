#include "server/key_transaction.h"

#include <algorithm>

#include "server/durable_store.h"
#include "server/policy_table.h"
#include "server/region_shares.h"
#include "server/sub_rates.h"

namespace limiter {

std::span<const size_t> StripesOf(const Store& store, std::span<const LimitEntry> entries,
                                  std::vector<size_t>& out) {
  out.clear();
  if (entries.size() == 1) {  // most ops: one limit
    out.push_back(store.StripeOf(entries.front().id));
    return out;
  }
  for (const LimitEntry& e : entries) out.push_back(store.StripeOf(e.id));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

KeyTransaction::KeyTransaction(const Stores& s, std::vector<LimitEntry>& entries,
                               std::vector<size_t>& stripes)
    : s_(s), entries_(entries), lock_(s.store, StripesOf(s.store, entries, stripes)) {}

// A sub-bucket not yet made starts drained: a split hands out no allowance the key had not
// already. A durable key not in memory is read from its database (its first use since the
// node started); what is read is kept, decided or not.
Status KeyTransaction::Load() {
  Store& store = s_.store;
  must_save_ = false;
  for (size_t i = 0; i < entries_.size(); ++i) {
    LimitEntry& e = entries_[i];
    e.slot = store.Find(e.policy, e.id);
    e.limiter = store.Take(e.policy, e.slot, e.now);
    if (s_.policies.durable(e.policy)) {
      // A durable key whose change cannot be written now (a full disk) is refused at once.
      Result<std::optional<KeyLimiter>> stored = std::optional<KeyLimiter>();
      if (Status writable = s_.durable->Writable(); !writable.ok()) {
        stored = writable;
      } else if (e.slot == nullptr) {
        stored = s_.durable->Read(e.policy, e.id, e.now);
      }
      if (!stored) {
        for (size_t j = 0; j <= i; ++j) {
          LimitEntry& taken = entries_[j];
          if (taken.slot) store.GiveBack(taken.policy, std::move(taken.limiter), taken.slot);
        }
        return stored.status();
      }
      if (*stored) {
        e.limiter = std::move(**stored);
        must_save_ = true;
      }
    }
    if (e.slot == nullptr && e.split_k != 0) {
      e.limiter.Decide(e.rate, e.now, FullAllowance(e.limiter.algorithm(), e.rate));
      must_save_ = true;  // must be kept, allowed or not: a fresh state is full
    }
  }
  return Status::Ok();
}

// Before anything is decided, so that a refusal changes no state. Reclaiming moves slots, and
// may take the op's own keys if they had expired (never a log the op holds), so the slots are
// found again. A pass that admits it starts the stripes' reclaim waits over
// (Store::ReclaimHelped).
int KeyTransaction::Reserve(int64_t now) {
  Store& store = s_.store;
  for (int attempt = 0;; ++attempt) {
    size_t reserved = 0;
    while (reserved < entries_.size()) {
      LimitEntry& e = entries_[reserved];
      if (!store.ReserveCharge(e.policy, e.slot, e.limiter)) break;
      ++reserved;
    }
    if (reserved == entries_.size()) {
      if (attempt == 1) store.ReclaimHelped(lock_);
      return -1;
    }
    // A log's growth stays with its slot (Pack or GiveBack settles it); new keys' go back.
    for (size_t i = 0; i < reserved; ++i) {
      if (entries_[i].slot == nullptr) {
        store.Unreserve(entries_[i].policy, store.NewKeyUnits(entries_[i].policy));
      }
    }
    // A pass that reclaimed nothing moved no slot and freed no room: refuse at once (a flood
    // of new keys at a full budget then costs one lookup a key).
    if (attempt == 1 || store.ReclaimLocked(lock_, now, s_.sweep_budget) == 0) {
      const int refused = entries_[reserved].policy;
      store.NoteRefusal(refused);
      for (LimitEntry& e : entries_) store.GiveBack(e.policy, std::move(e.limiter), e.slot);
      return refused;
    }
    for (LimitEntry& e : entries_) e.slot = store.Find(e.policy, e.id);
  }
}

void KeyTransaction::ReconcileShares() {
  if (s_.regions == nullptr) return;
  for (LimitEntry& e : entries_) {
    if (s_.policies.global(e.policy) && s_.regions->Reconcile(e.id, e.rate, e.limiter, e.now)) {
      must_save_ = true;  // the region's share moved: this is the key's state now
    }
  }
}

// Existing keys first, as an insert may move every slot of its table. Durable keys are queued
// for their database first.
void KeyTransaction::Commit() {
  Store& store = s_.store;
  for (LimitEntry& e : entries_) {
    if (s_.policies.durable(e.policy)) Persist(e);
  }
  for (LimitEntry& e : entries_) {
    if (e.slot) store.Pack(e.policy, std::move(e.limiter), e.slot);
  }
  for (LimitEntry& e : entries_) {
    if (e.slot) continue;
    store.Pack(e.policy, std::move(e.limiter), store.Insert(e.policy, e.id));
    if (e.split_k != 0) store.NoteSubBucket(e.id);  // made drained: not swept while in use
  }
  for (LimitEntry& e : entries_) e.slot = nullptr;  // moved by the inserts
}

void KeyTransaction::Abandon() {
  Store& store = s_.store;
  for (LimitEntry& e : entries_) {
    if (e.slot == nullptr) {
      store.Unreserve(e.policy, store.NewKeyUnits(e.policy));
    } else {
      store.GiveBack(e.policy, std::move(e.limiter), e.slot);
    }
  }
}

void KeyTransaction::Persist(const LimitEntry& e) {
  const DurableKeyName name{e.ancestor ? DurableKeyName::kAncestor : DurableKeyName::kLimit, e.key,
                            e.ancestor ? std::string_view() : e.tenant};
  durable_seq_ = std::max(durable_seq_, s_.durable->Write(e.policy, e.id, name, e.limiter, e.now));
}

void KeyTransaction::NoteInEffect() {
  for (LimitEntry& e : entries_) {
    if (s_.policies.leased(e.policy)) e.in_effect_before = e.limiter.InEffect(e.rate, e.now);
  }
}

void KeyTransaction::ClampBooks() {
  for (const LimitEntry& e : entries_) {
    if (!s_.policies.leased(e.policy)) continue;
    if (LeaseBook* book = s_.store.FindBook(e.id)) book->Clamp(e.in_effect_before);
  }
}

void KeyTransaction::RecordGrant(uint64_t lease_id, int64_t ttl_ms, int64_t units) {
  for (const LimitEntry& e : entries_) {
    LeaseBook& book = s_.store.AddBook(e.id);
    book.Clamp(e.in_effect_before);
    book.Grant(lease_id, e.now, e.now + ttl_ms, units, e.in_effect);
  }
}

// Accepted only for an outstanding lease of the named limit (its book says so); each limit
// of the chain then gets back what its book says is still in effect of that lease's charge.
Result<int64_t> KeyTransaction::Return(uint64_t lease_id, int64_t leased_at, int64_t units) {
  Store& store = s_.store;
  for (LimitEntry& e : entries_) {
    e.slot = store.Find(e.policy, e.id);
    e.limiter = store.Take(e.policy, e.slot, e.now);
    if (e.slot && s_.regions && s_.policies.global(e.policy) &&
        s_.regions->Reconcile(e.id, e.rate, e.limiter, e.now)) {
      store.Pack(e.policy, KeyLimiter(e.limiter), e.slot);  // the region's share moved
      if (s_.policies.durable(e.policy)) Persist(e);
    }
  }
  Result<int64_t> returned = int64_t{0};
  for (size_t i = 0; i < entries_.size(); ++i) {
    LimitEntry& e = entries_[i];
    LeaseBook* book = store.FindBook(e.id);
    const int64_t scale = e.limiter.ChargeScale(e.rate);
    Result<int64_t> claim = Error{"lease " + std::to_string(lease_id) +
                                  " is not outstanding on this node (never granted here, "
                                  "lapsed, or granted before the node restarted)"};
    if (book != nullptr) {
      book->Clamp(e.limiter.InEffect(e.rate, e.now));
      claim = book->Claim(lease_id, leased_at, units, scale, e.now);
    }
    if (!claim) {
      if (i == 0) {  // the named limit: the return is refused
        returned = claim.status();
        break;
      }
      continue;  // an ancestor whose book has forgotten the lease: its units lapse
    }
    const int64_t given = e.slot ? e.limiter.Refund(e.rate, e.now, *claim, leased_at) : 0;
    book->Settle(lease_id, given);
    if (i == 0) returned = given / scale;
    if (given == 0) continue;
    if (s_.policies.durable(e.policy)) Persist(e);
    // A sub-bucket stays (it would come back drained); the sweep takes it once idle.
    if (e.limiter.IsFresh(e.rate, e.now) && e.split_k == 0 && store.FindSplit(e.id) == nullptr) {
      store.Erase(e.policy, e.id);
    } else {
      store.Pack(e.policy, std::move(e.limiter), e.slot);
    }
    e.slot = nullptr;  // done with (the entries are in different tables: no slot moved)
  }
  GiveBackAll();
  return returned;
}

Status KeyTransaction::Peek() {
  LimitEntry& e = entries_.front();
  e.slot = s_.store.Find(e.policy, e.id);
  e.limiter = s_.store.Unpack(e.policy, e.slot);
  if (e.slot == nullptr && s_.policies.durable(e.policy)) {
    // Looked at, not loaded: INSPECT changes nothing.
    Result<std::optional<KeyLimiter>> stored = s_.durable->Read(e.policy, e.id, e.now);
    if (!stored) return stored.status();
    if (*stored) e.limiter = std::move(**stored);
  }
  return Status::Ok();
}

void KeyTransaction::GiveBackAll() {
  for (LimitEntry& e : entries_) s_.store.GiveBack(e.policy, std::move(e.limiter), e.slot);
}

}  // namespace limiter
