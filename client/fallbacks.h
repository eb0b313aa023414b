// Fallbacks: what a gateway decides by itself while a key's owner is slow or down, by the
// policy's class (docs/design.md): security to its strict local limit (or deny), contract to a
// local bucket at L/N (or L with overshoot), billing open with the usage owed to the owner,
// capacity to a local shedder. Every fallback decision is counted by class.
//
// Billing debts are merged per key and bounded: at most max_debts keys owe units at once; a
// request of another key is still admitted (billing fails open) but its units are dropped,
// counted (billing_debt_units_dropped). With a journal (billing_journal.h) every change to a
// debt is appended before the decision returns, so a restarted gateway pays what the last
// one owed. Debts are paid back by leasing the owed units from the owner once it is back,
// paced: at most a few calls in flight per node, so that a returning node is not stormed. A
// payment in flight when the process dies is paid again after the restart: at least once.
//
// Thread-safety: any thread. The local limits share one mutex, the debts (and the order of
// their journal records) another; each capacity shedder has its own. Callbacks run with no
// lock held.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client/billing_journal.h"
#include "client/client_counters.h"
#include "client/resolved_request.h"
#include "client/scheduler.h"
#include "common/key_limiter.h"
#include "common/mutex.h"
#include "common/policy.h"
#include "limiter/client/client.h"
#include "protocol/key_id.h"

namespace limiter {

class Fallbacks {
 public:
  using Done = std::function<void(client::Decision)>;

  Fallbacks(const PolicySet& policies, int gateways, int64_t deny_retry_ms, size_t max_debts,
            Scheduler& scheduler, ClientCounters& counters);
  ~Fallbacks();
  Fallbacks(const Fallbacks&) = delete;
  Fallbacks& operator=(const Fallbacks&) = delete;

  // Decides `r` by its class; `owner` is where a billing debt is owed. `done` runs now, or
  // (a capacity request waiting for a slot) later on the scheduler's thread.
  void Decide(const ResolvedRequest& r, const std::string& owner, Done done);

  // A lease that pays back part of a debt.
  struct DebtCall {
    KeyId id;
    int policy = 0;
    std::string key, tenant;
    int64_t units = 0;
  };
  // The debts owed to `owner` that are due and have no call in flight, at most `max` of
  // them, now in flight.
  std::vector<DebtCall> TakeDebts(const std::string& owner, size_t max, int64_t now_us);
  // The answer to a debt's lease: `paid` units (0 on failure); `refused`: the owner never
  // will take it (the policy is strict there). A debt not paid in full is due again at
  // retry_at_us. True when the debt is settled or dropped.
  bool SettleDebt(const KeyId& id, int64_t paid, bool refused, int64_t retry_at_us);

  size_t limiters() const;

  // Debts read back from a journal: each owed to `owner_of` its key now; those whose policy is
  // gone from the policy file (or now needs a tenant they do not name), and any beyond
  // max_debts, are dropped, counted and logged. The journal is rewritten to the debts kept,
  // records every change from now on, and is compacted in the background. Before the first
  // request. An error: the journal could not be rewritten.
  using OwnerOf =
      std::function<std::string(const Policy&, std::string_view key, std::string_view tenant)>;
  Status RestoreDebts(BillingJournal::Replay replay, const OwnerOf& owner_of);
  // The owners that are owed something.
  std::vector<std::string> Creditors() const;
  // Rewrites the journal to the debts owed now (nothing without a journal). Holds the debts'
  // lock while it encodes them, not while it writes. An error: it failed (counted, logged),
  // or another rewrite is under way.
  Status CompactJournal();
  void AddCounters(client::Counters& c) const;

 private:
  struct LocalLimit {
    KeyLimiter limiter;
    const Rate* rate;  // into contract_ or a policy's fallback
  };
  struct Debt {
    uint64_t number = 0;  // in the journal
    int policy = 0;
    std::string key, tenant, owner;
    int64_t units = 0;
    bool in_flight = false;
    int64_t due_us = 0;
  };
  struct Shedder;
  void LocalLimits(const ResolvedRequest& r, client::Decision d, Done done);
  void Shed(const ResolvedRequest& r, client::Decision d, Done done);
  void GrantSlot(int policy, const std::shared_ptr<Done>& done);
  void ReleaseSlot(int policy);
  void Finish(client::Decision d, const Done& done);
  void Owe(const ResolvedRequest& r, const std::string& owner);
  void Drop(size_t reason, int64_t units) LIMITER_REQUIRES(debts_mu_);

  const PolicySet& policies_;
  Scheduler& scheduler_;
  ClientCounters& counters_;
  const int64_t deny_retry_ms_;
  std::vector<Rate> contract_;  // per policy: L/N (or L with overshoot)
  mutable Mutex mu_;
  std::unordered_map<KeyId, LocalLimit, KeyIdHash> limits_ LIMITER_GUARDED_BY(mu_);
  size_t sweep_at_ LIMITER_GUARDED_BY(mu_) = 64;
  std::vector<std::unique_ptr<Shedder>> shedders_;  // per policy; own mutexes

  const size_t max_debts_;
  mutable Mutex debts_mu_;
  std::unordered_map<KeyId, Debt, KeyIdHash> debts_ LIMITER_GUARDED_BY(debts_mu_);
  int64_t owed_units_ LIMITER_GUARDED_BY(debts_mu_) = 0;  // over debts_
  uint64_t next_number_ LIMITER_GUARDED_BY(debts_mu_) = 1;
  bool full_logged_ LIMITER_GUARDED_BY(debts_mu_) = false;
  // Appended to under debts_mu_. Last: destroyed first, its thread (which compacts from
  // debts_) stopped before the debts go.
  std::unique_ptr<BillingJournal> journal_;
};

}  // namespace limiter
