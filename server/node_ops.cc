// Node's ops on the store: CHECK, LEASE, RETURN and INSPECT, each one KeyTransaction over the
// limits it touches, and the answers about a split key.
#include <algorithm>

#include "server/durable_store.h"
#include "server/node.h"
#include "server/node_internal.h"

namespace limiter {
namespace {

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

void Node::Check(Worker& w, bool dry_run, int64_t now, OpResult& r) {
  auto& entries = w.entries;
  bool charged = false;
  {
    KeyTransaction tx(TxStores(), entries, w.stripes);
    if (RedirectToSplit(w, now, r)) return;
    if (Status loaded = tx.Load(); !loaded.ok()) {
      return r.Fail(wire::Status::StoreError, loaded.error());
    }
    if (const int refused = tx.Reserve(now); refused >= 0) {
      w.counters.refusals.Add();
      r.Fail(wire::Status::KeysExhausted, KeysExhausted(store_, policies_, refused));
      return;
    }
    tx.ReconcileShares();  // with room reserved: the state moved is saved
    const bool books = store_.books() > 0;
    if (books) tx.NoteInEffect();
    bool all = true;
    if (entries.size() == 1 && !dry_run) {
      // One limit: decide in place; a denial changes nothing worth saving.
      LimitEntry& e = entries.front();
      e.decision = e.limiter.Decide(e.rate, e.now, e.cost);
      all = e.decision.allowed;
    } else {
      for (LimitEntry& e : entries) {
        e.decision = e.limiter.Peek(e.rate, e.now, e.cost);
        all = all && e.decision.allowed;
      }
      if (all && !dry_run) {
        for (LimitEntry& e : entries) e.decision = e.limiter.Decide(e.rate, e.now, e.cost);
      }
    }
    if ((all && !dry_run) || tx.must_save()) {
      tx.Commit();
      charged = all && !dry_run;
      // Before an admission is the least a lease's charge can have fallen to: its books
      // learn it.
      if (charged && books) tx.ClampBooks();
    } else {
      tx.Abandon();
    }
    r.durable_seq = tx.durable_seq();
    r.reply.allowed = all;
  }
  hot_keys_.Record(w.sampler, entries, w.own_limits, !r.reply.allowed);
  for (size_t i = 0; i < entries.size(); ++i) {
    LimitDecision d = entries[i].ReplyDecision();
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
  const Policy& leaf = table_.at(entries.front().policy);
  {
    KeyTransaction tx(TxStores(), entries, w.stripes);
    if (RedirectToSplit(w, now, r)) return;
    if (Status loaded = tx.Load(); !loaded.ok()) {
      return r.Fail(wire::Status::StoreError, loaded.error());
    }
    if (const int refused = tx.Reserve(now); refused >= 0) {
      w.counters.refusals.Add();
      r.Fail(wire::Status::KeysExhausted, KeysExhausted(store_, policies_, refused));
      return;
    }
    tx.ReconcileShares();  // with room reserved: the state moved is saved
    tx.NoteInEffect();
    int64_t grant = units;
    for (LimitEntry& e : entries) grant = std::min(grant, e.limiter.Available(e.rate, e.now));
    for (LimitEntry& e : entries) {
      e.decision =
          grant > 0 ? e.limiter.Decide(e.rate, e.now, grant) : e.limiter.Peek(e.rate, e.now, 1);
      if (grant > 0) e.in_effect = e.limiter.InEffect(e.rate, e.now);  // for its lease book
      if (grant < units) {
        // When the rest of the request could be had: the longest wait over the chain.
        LimitDecision rest = e.limiter.Peek(e.rate, e.now, units - grant);
        if (rest.retry_after_ms == kNever) rest = e.limiter.Peek(e.rate, e.now, 1);
        r.reply.retry_after_ms = std::max(r.reply.retry_after_ms, e.WallSpan(rest.retry_after_ms));
      }
    }
    if (grant > 0 || tx.must_save()) {
      // A durable key's grant is written here; what is admitted from the lease later needs
      // no write (its units were charged now).
      tx.Commit();
    } else {
      tx.Abandon();
    }
    r.durable_seq = tx.durable_seq();
    r.reply.granted = grant;
    r.reply.allowed = grant > 0;
    if (grant > 0) {
      // Each limit of the chain remembers the grant, so that a RETURN gives back no more
      // than it and no more of it than is still in effect.
      r.reply.lease_id = next_lease_id_.fetch_add(1, std::memory_order_relaxed);
      tx.RecordGrant(r.reply.lease_id, leaf.lease.ttl_ms, grant);
    }
  }
  hot_keys_.Record(w.sampler, entries, w.own_limits, !r.reply.allowed);
  r.reply.granted_at_ms = entries.front().now;  // on the named limit's clock (RETURN echoes it)
  r.reply.lease_ttl_ms = leaf.lease.ttl_ms;
  r.reply.suggested_lease = leaf.LeaseSize();
  for (size_t i = 0; i < entries.size(); ++i) {
    const LimitDecision d = entries[i].ReplyDecision();
    w.results.emplace_back(d.remaining, d.retry_after_ms, d.reset_after_ms, d.allowed);
    w.counters.decisions[static_cast<size_t>(entries[i].policy)][d.allowed ? 0 : 1].Add();
    if (!d.allowed && r.reply.denied_by < 0) r.reply.denied_by = static_cast<int>(i);
  }
}

void Node::Return(Worker& w, int64_t units, uint64_t lease_id, int64_t leased_at, OpResult& r) {
  KeyTransaction tx(TxStores(), w.entries, w.stripes);
  Result<int64_t> returned = tx.Return(lease_id, leased_at, units);
  r.durable_seq = tx.durable_seq();
  if (!returned) return r.Fail(wire::Status::BadRequest, returned.error());
  r.reply.granted = *returned;
  r.reply.allowed = true;
}

void Node::Inspect(Worker& w, int64_t now, OpResult& r) {
  LimitEntry& e = w.entries.front();
  {
    KeyTransaction tx(TxStores(), w.entries, w.stripes);
    if (Status read = tx.Peek(); !read.ok()) return r.Fail(wire::Status::StoreError, read.error());
    if (std::optional<HotKeys::View> split = hot_keys_.Inspect(e.policy, e.id, e.key, now)) {
      r.PutSplit(*split);
    }
  }
  r.inspected = true;
  r.tracked = e.slot != nullptr || !e.limiter.IsFresh(e.rate, e.now);
  e.decision = e.limiter.Peek(e.rate, e.now, 1);
  const LimitDecision d = e.ReplyDecision();
  r.reply.allowed = d.allowed;
  r.reply.retry_after_ms = d.retry_after_ms;
  w.results.emplace_back(d.allowed ? d.remaining + 1 : d.remaining, d.retry_after_ms,
                         d.reset_after_ms, d.allowed);
}

bool Node::RedirectToSplit(Worker& w, int64_t now, OpResult& r) {
  if (!store_.has_splits()) return false;
  for (size_t i = 0; i < w.own_limits; ++i) {
    const LimitEntry& e = w.entries[i];
    if (e.split_k != 0) continue;
    const std::optional<HotKeys::View> view = hot_keys_.ViewOf(e.policy, e.id, e.key, now);
    if (!view) continue;
    r.reply.status = wire::Status::Split;
    r.error = "limits[" + std::to_string(i) + "]: the key is split " + std::to_string(view->k) +
              " ways; use its sub-buckets";
    r.PutSplit(*view);
    return true;
  }
  return false;
}

void Node::SplitOp(Worker& w, int64_t reported, int64_t now, OpResult& r) {
  const LimitEntry& e = w.entries.front();
  r.reply.allowed = true;
  // Not split (any more, or reopened just now): split_k 0.
  if (std::optional<HotKeys::View> view = hot_keys_.Renew(e.policy, e.id, e.key, reported, now)) {
    r.PutSplit(*view);
  }
}

}  // namespace limiter
