// Node's operations on the store: CHECK, LEASE, RETURN and INSPECT, each atomic over the
// stripes of the limits it touches (locked in ascending order), and the lease books that keep
// RETURN honest (lease_book.h).
#include <algorithm>

#include "server/durable_store.h"
#include "server/node.h"
#include "server/node_internal.h"
#include "server/policy_clock.h"
#include "server/sub_bucket.h"

namespace limiter {
namespace {

// Reserves room for every limit of the op to take one charge: a new key, or a sliding log's
// growth (Store::ReserveCharge). Before anything is decided, so that a refusal changes no
// state. At the bound, expired keys in the locked stripes are reclaimed and, if any were, it
// tries once more; if that admits it, the stripes' reclaim waits start over
// (Store::ReclaimHelped). Reclaiming moves slots, and may take the op's own keys if they had
// expired (never a log the op holds), so the slots are found again. Returns -1, or the policy
// that had no room: then nothing is reserved, the states taken are given back, and the
// refusal is counted against that policy.
template <class Entries>
int ReserveRoom(Store& store, Entries& entries, const Store::StripeLock& lock, int64_t now,
                size_t sweep_budget) {
  for (int attempt = 0;; ++attempt) {
    size_t reserved = 0;
    while (reserved < entries.size()) {
      auto& e = entries[reserved];
      if (!store.ReserveCharge(e.policy, e.slot, e.limiter)) break;
      ++reserved;
    }
    if (reserved == entries.size()) {
      if (attempt == 1) store.ReclaimHelped(lock);
      return -1;
    }
    // A log's growth stays with its slot (Pack or GiveBack settles it); new keys' go back.
    for (size_t i = 0; i < reserved; ++i) {
      if (entries[i].slot == nullptr) {
        store.Unreserve(entries[i].policy, store.NewKeyUnits(entries[i].policy));
      }
    }
    // A pass that reclaimed nothing moved no slot and freed no room: refuse at once (a flood
    // of new keys at a full budget then costs one lookup a key).
    if (attempt == 1 || store.ReclaimLocked(lock, now, sweep_budget) == 0) {
      const int refused = entries[reserved].policy;
      store.NoteRefusal(refused);
      for (auto& e : entries) store.GiveBack(e.policy, std::move(e.limiter), e.slot);
      return refused;
    }
    for (auto& e : entries) e.slot = store.Find(e.policy, e.id);
  }
}

// Ends an op that saves nothing, after ReserveRoom: the states go back, new keys' units too.
template <class Entries>
void Abandon(Store& store, Entries& entries) {
  for (auto& e : entries) {
    if (e.slot == nullptr) {
      store.Unreserve(e.policy, store.NewKeyUnits(e.policy));
    } else {
      store.GiveBack(e.policy, std::move(e.limiter), e.slot);
    }
  }
}

std::string KeysExhausted(const Store& store, const PolicySet& policies, int policy) {
  const Store::PolicyUsage u = store.usage(policy);
  const std::string& name = policies.policies()[static_cast<size_t>(policy)].name;
  if (u.budget.capped) {
    return "policy '" + name + "' holds its maximum of " + std::to_string(u.budget.cap) +
           " keys on this node; new keys are refused";
  }
  std::string message =
      "the node holds its maximum of " + std::to_string(store.max_keys()) + " keys";
  if (store.committed() > store.units()) {
    message += " (counting space reserved for other policies; policy '" + name + "' holds " +
               std::to_string(u.units) + ", its reserve is " + std::to_string(u.budget.reserve) +
               ")";
  }
  return message + "; new keys are refused";
}

}  // namespace

// With room reserved (ReserveRoom): existing keys first, as an insert may move every slot of
// its table. Cannot fail. Durable keys are queued for their database first.
bool Node::Save(Worker& w, const Store::StripeLock&) {
  for (Entry& e : w.entries) {
    if (durable_policy_[static_cast<size_t>(e.policy)]) Persist(w, e, e.limiter);
  }
  for (Entry& e : w.entries) {
    if (e.slot) store_.Pack(e.policy, std::move(e.limiter), e.slot);
  }
  for (Entry& e : w.entries) {
    if (e.slot) continue;
    store_.Pack(e.policy, std::move(e.limiter), store_.Insert(e.policy, e.id));
    if (e.split_k != 0) store_.NoteSubBucket(e.id);  // made drained: not swept while in use
  }
  for (Entry& e : w.entries) e.slot = nullptr;  // moved by the inserts
  return true;
}

// The stripes of the op's entries, sorted and once each: the order to lock them in.
void Node::CollectStripes(Worker& w) {
  w.stripes.clear();
  for (const Entry& e : w.entries) w.stripes.push_back(store_.StripeOf(e.id));
  std::sort(w.stripes.begin(), w.stripes.end());
  w.stripes.erase(std::unique(w.stripes.begin(), w.stripes.end()), w.stripes.end());
}

// With the entries' stripes locked: each entry's slot and state, taken (Store::Take) until
// Save or GiveBack. A sub-bucket not yet made starts drained: a split hands out no allowance
// the key had not already. A durable key not in memory is read from its database (the first
// use after a start); what is read is kept, decided or not.
bool Node::Load(Worker& w, OpResult& r) {
  w.must_save = false;
  for (size_t i = 0; i < w.entries.size(); ++i) {
    Entry& e = w.entries[i];
    e.slot = store_.Find(e.policy, e.id);
    e.limiter = store_.Take(e.policy, e.slot, e.now);
    if (durable_policy_[static_cast<size_t>(e.policy)]) {
      // A durable key whose change cannot be written now (a full disk) is refused at once.
      Result<std::optional<KeyLimiter>> stored = std::optional<KeyLimiter>();
      if (std::optional<std::string> down = durable_->Unavailable()) {
        stored = Error{*down};
      } else if (e.slot == nullptr) {
        stored = durable_->Read(e.policy, e.id, e.now);
      }
      if (!stored) {
        for (size_t j = 0; j <= i; ++j) {
          Entry& taken = w.entries[j];
          if (taken.slot) store_.GiveBack(taken.policy, std::move(taken.limiter), taken.slot);
        }
        r.Fail(wire::Status::StoreError, stored.error());
        return false;
      }
      if (*stored) {
        e.limiter = std::move(**stored);
        w.must_save = true;
      }
    }
    if (e.slot == nullptr && e.split_k != 0) {
      e.limiter.Decide(e.rate, e.now, FullAllowance(e.limiter.algorithm(), e.rate));
      w.must_save = true;  // must be kept, allowed or not: a fresh state is full
    }
  }
  return true;
}

void Node::Persist(Worker& w, const Entry& e, const KeyLimiter& state) {
  const DurableKeyName name{e.ancestor ? DurableKeyName::kAncestor : DurableKeyName::kLimit,
                            e.key, e.ancestor ? std::string_view() : e.tenant};
  w.durable_seq = std::max(w.durable_seq, durable_->Write(e.policy, e.id, name, state, e.now));
}

void Node::ReconcileShares(Worker& w) {
  if (!regions_) return;
  for (Entry& e : w.entries) {
    if (global_[static_cast<size_t>(e.policy)] &&
        regions_->Reconcile(e.id, e.rate, e.limiter, e.now)) {
      w.must_save = true;  // the region's share moved: this is the key's state now
    }
  }
}

void Node::NoteInEffect(Worker& w) {
  for (Entry& e : w.entries) {
    if (leased_[static_cast<size_t>(e.policy)])
      e.in_effect_before = e.limiter.InEffect(e.rate, e.now);
  }
}

void Node::ClampBooks(Worker& w) {
  for (const Entry& e : w.entries) {
    if (!leased_[static_cast<size_t>(e.policy)]) continue;
    if (LeaseBook* book = store_.FindBook(e.id)) book->Clamp(e.in_effect_before);
  }
}

void Node::Check(Worker& w, bool dry_run, int64_t now, OpResult& r) {
  auto& entries = w.entries;
  CollectStripes(w);
  bool charged = false;
  {
    Store::StripeLock lock(store_, w.stripes);
    if (RedirectToSplit(w, now, r)) return;
    if (!Load(w, r)) return;
    if (const int refused = ReserveRoom(store_, entries, lock, now, options_.sweep_budget);
        refused >= 0) {
      w.counters.refusals.Add();
      r.Fail(wire::Status::KeysExhausted, KeysExhausted(store_, policies_, refused));
      return;
    }
    ReconcileShares(w);  // with room reserved: the state moved is saved
    const bool books = store_.books() > 0;
    if (books) NoteInEffect(w);
    bool all = true;
    if (entries.size() == 1 && !dry_run) {
      // One limit: decide in place; a denial changes nothing worth saving.
      Entry& e = entries.front();
      e.decision = e.limiter.Decide(e.rate, e.now, e.cost);
      all = e.decision.allowed;
    } else {
      for (Entry& e : entries) {
        e.decision = e.limiter.Peek(e.rate, e.now, e.cost);
        all = all && e.decision.allowed;
      }
      if (all && !dry_run) {
        for (Entry& e : entries) e.decision = e.limiter.Decide(e.rate, e.now, e.cost);
      }
    }
    if ((all && !dry_run) || w.must_save) {
      Save(w, lock);
      charged = all && !dry_run;
      // Before an admission is the least a lease's charge can have fallen to: its books
      // learn it.
      if (charged && books) ClampBooks(w);
    } else {
      Abandon(store_, entries);
    }
    r.reply.allowed = all;
  }
  Record(w, !r.reply.allowed);
  for (size_t i = 0; i < entries.size(); ++i) {
    Decision d = entries[i].ReplyDecision();
    // Nothing was charged: a limit that passed still has its whole remaining.
    if (d.allowed && !charged) d.remaining += entries[i].cost;
    w.results.emplace_back(d.remaining, d.retry_after_ms, d.reset_after_ms, d.allowed);
    w.counters.decisions[static_cast<size_t>(entries[i].policy)][d.allowed ? 0 : 1].Add();
    if (!d.allowed) {
      if (r.reply.denied_by < 0) r.reply.denied_by = static_cast<int>(i);
      r.reply.retry_after_ms = std::max(r.reply.retry_after_ms, d.retry_after_ms);
    }
  }
}

void Node::Lease(Worker& w, int64_t units, int64_t now, OpResult& r) {
  auto& entries = w.entries;
  CollectStripes(w);
  const Policy& leaf = policies_.policies()[static_cast<size_t>(entries.front().policy)];
  {
    Store::StripeLock lock(store_, w.stripes);
    if (RedirectToSplit(w, now, r)) return;
    if (!Load(w, r)) return;
    if (const int refused = ReserveRoom(store_, entries, lock, now, options_.sweep_budget);
        refused >= 0) {
      w.counters.refusals.Add();
      r.Fail(wire::Status::KeysExhausted, KeysExhausted(store_, policies_, refused));
      return;
    }
    ReconcileShares(w);  // with room reserved: the state moved is saved
    NoteInEffect(w);
    int64_t grant = units;
    for (Entry& e : entries) grant = std::min(grant, e.limiter.Available(e.rate, e.now));
    for (Entry& e : entries) {
      e.decision =
          grant > 0 ? e.limiter.Decide(e.rate, e.now, grant) : e.limiter.Peek(e.rate, e.now, 1);
      if (grant > 0) e.in_effect = e.limiter.InEffect(e.rate, e.now);  // for its lease book
      if (grant < units) {
        // When the rest of the request could be had: the longest wait over the chain.
        Decision rest = e.limiter.Peek(e.rate, e.now, units - grant);
        if (rest.retry_after_ms == kNever) rest = e.limiter.Peek(e.rate, e.now, 1);
        r.reply.retry_after_ms = std::max(r.reply.retry_after_ms, e.WallSpan(rest.retry_after_ms));
      }
    }
    if (grant > 0 || w.must_save) {
      // A durable key's grant is written here; what is admitted from the lease later needs
      // no write (its units were charged now).
      Save(w, lock);
    } else {
      Abandon(store_, entries);
    }
    r.reply.granted = grant;
    r.reply.allowed = grant > 0;
    if (grant > 0) {
      // Each limit of the chain remembers the grant, so that a RETURN gives back no more
      // than it and no more of it than is still in effect.
      r.reply.lease_id = next_lease_id_.fetch_add(1, std::memory_order_relaxed);
      for (const Entry& e : entries) {
        LeaseBook& book = store_.AddBook(e.id);
        book.Clamp(e.in_effect_before);
        book.Grant(r.reply.lease_id, e.now, e.now + leaf.lease.ttl_ms, grant, e.in_effect);
      }
    }
  }
  Record(w, !r.reply.allowed);
  r.reply.granted_at_ms = entries.front().now;  // on the named limit's clock (RETURN echoes it)
  r.reply.lease_ttl_ms = leaf.lease.ttl_ms;
  r.reply.suggested_lease = leaf.LeaseSize();
  for (size_t i = 0; i < entries.size(); ++i) {
    const Decision d = entries[i].ReplyDecision();
    w.results.emplace_back(d.remaining, d.retry_after_ms, d.reset_after_ms, d.allowed);
    w.counters.decisions[static_cast<size_t>(entries[i].policy)][d.allowed ? 0 : 1].Add();
    if (!d.allowed && r.reply.denied_by < 0) r.reply.denied_by = static_cast<int>(i);
  }
}

// Accepted only for an outstanding lease of the named limit (its book says so); each limit
// of the chain then gets back what its book says is still in effect of that lease's charge.
void Node::Return(Worker& w, int64_t units, uint64_t lease_id, int64_t leased_at, int64_t,
                  OpResult& r) {
  auto& entries = w.entries;
  CollectStripes(w);
  Store::StripeLock lock(store_, w.stripes);
  for (Entry& e : entries) {
    e.slot = store_.Find(e.policy, e.id);
    e.limiter = store_.Take(e.policy, e.slot, e.now);
    if (e.slot && regions_ && global_[static_cast<size_t>(e.policy)] &&
        regions_->Reconcile(e.id, e.rate, e.limiter, e.now)) {
      store_.Pack(e.policy, KeyLimiter(e.limiter), e.slot);  // the region's share moved
      if (durable_policy_[static_cast<size_t>(e.policy)]) Persist(w, e, e.limiter);
    }
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    Entry& e = entries[i];
    LeaseBook* book = store_.FindBook(e.id);
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
        r.Fail(wire::Status::BadRequest, claim.error());
        break;
      }
      continue;  // an ancestor whose book has forgotten the lease: its units lapse
    }
    const int64_t given = e.slot ? e.limiter.Refund(e.rate, e.now, *claim, leased_at) : 0;
    book->Settle(lease_id, given);
    if (i == 0) r.reply.granted = given / scale;
    if (given == 0) continue;
    if (durable_policy_[static_cast<size_t>(e.policy)]) Persist(w, e, e.limiter);
    // A sub-bucket stays (it would come back drained); the sweep takes it once idle.
    if (e.limiter.IsFresh(e.rate, e.now) && e.split_k == 0 && store_.FindSplit(e.id) == nullptr) {
      store_.Erase(e.policy, e.id);
    } else {
      store_.Pack(e.policy, std::move(e.limiter), e.slot);
    }
    e.slot = nullptr;  // done with (the entries are in different tables: no slot moved)
  }
  for (Entry& e : entries) store_.GiveBack(e.policy, std::move(e.limiter), e.slot);
  if (r.reply.status == wire::Status::Ok) r.reply.allowed = true;
}

void Node::Inspect(Worker& w, int64_t now, OpResult& r) {
  Entry& e = w.entries.front();
  const size_t stripe = store_.StripeOf(e.id);
  {
    Store::StripeLock lock(store_, {&stripe, 1});
    e.slot = store_.Find(e.policy, e.id);
    e.limiter = store_.Unpack(e.policy, e.slot);
    if (e.slot == nullptr && durable_policy_[static_cast<size_t>(e.policy)]) {
      // Looked at, not loaded: INSPECT changes nothing.
      Result<std::optional<KeyLimiter>> stored = durable_->Read(e.policy, e.id, e.now);
      if (!stored) {
        r.Fail(wire::Status::StoreError, stored.error());
        return;
      }
      if (*stored) e.limiter = std::move(**stored);
    }
    if (const Store::Split* split = store_.FindSplit(e.id)) {
      r.reply.split_k = split->k;
      r.reply.split_epoch = split->epoch;
      r.reply.split_valid_ms = std::max<int64_t>(0, split->valid_until_ms - now);
      SignSplit(policies_.policies()[static_cast<size_t>(e.policy)], e.key, split->k,
                split->epoch, r.reply.split_valid_ms, r);
    }
  }
  r.inspected = true;
  r.tracked = e.slot != nullptr || !e.limiter.IsFresh(e.rate, e.now);
  e.decision = e.limiter.Peek(e.rate, e.now, 1);
  const Decision d = e.ReplyDecision();
  r.reply.allowed = d.allowed;
  r.reply.retry_after_ms = d.retry_after_ms;
  w.results.emplace_back(d.allowed ? d.remaining + 1 : d.remaining, d.retry_after_ms,
                         d.reset_after_ms, d.allowed);
}

}  // namespace limiter
