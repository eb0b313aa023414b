// ClientCore: the gateway library's logic over a Scheduler and a Transport (the seams), so
// that the real client (client.cc: asio thread, TCP) and the fleet simulation in the tests
// (simulated clock and transport, real Node) run the same code.
//
// It coordinates four parts, each with its own lock and each testable alone:
//   LeaseBuckets  local buckets of leased units, and the requests waiting for a lease;
//   SplitViews    hot keys split into sub-buckets;
//   Routing       the ring (with its generation) and which nodes are down;
//   Fallbacks     what each class of limit does while its owner is away.
// Per request: resolve it once (policy, cost, identity, routing key); a lease-mode key
// spends from its local bucket or waits for a lease; a strict-mode key sends one CHECK. A
// store call that misses its deadline, a node marked down, or an owner that cannot answer
// for the key (wrong owner, unknown policy) falls back by the policy's class.
//
// A split key never ends in an error: an answer that this gateway's view of the split is out
// of date refreshes the view and tries once more within the deadline, and whatever the split
// still cannot answer (it changed again, a merge between two views) falls back by class.
//
// Thread-safety: Decide, DecideAsync, TryLocal and the accessors may be called from any
// thread. Transport calls and timers run on the scheduler's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/billing_journal.h"
#include "client/client_counters.h"
#include "client/fallbacks.h"
#include "client/lease_buckets.h"
#include "client/request_resolver.h"
#include "client/resolved_request.h"
#include "client/routing.h"
#include "client/scheduler.h"
#include "client/split_views.h"
#include "client/transport.h"
#include "common/policy.h"
#include "limiter/client/client.h"
#include "protocol/ring.h"

namespace limiter {

struct ClientCoreOptions {
  int64_t deadline_us = 2000;
  int gateways = 1;           // N: contract limits fall back to L/N
  int down_after_misses = 3;  // consecutive deadline misses that mark a node down
  int64_t probe_first_us = 100'000;
  int64_t probe_max_us = 1'000'000;
  int64_t reconcile_retry_us = 500'000;
  int reconcile_in_flight = 4;  // billing debts paid back at once, per node
  uint64_t generation = 0;      // of the member list given to the constructor
  uint64_t seed = 0;            // probe jitter; 0: a random one
  // Keys that may owe billing units at once (client::Options::max_billing_debts).
  size_t max_billing_debts = 100'000;
};

// What one decision (or one lease) of a ClientCore has tried already, so that each way of
// trying again is taken at most once (a Split redirect twice), all within one deadline.
struct CallTries {
  int calls = 0;                // answered calls before this one
  int redirects = 0;            // Split answers followed to a sub-bucket
  bool followed_owner = false;  // a WrongOwner answer followed
  bool refreshed = false;       // a view of a split found out of date, refreshed
  bool waited = false;          // a sub-bucket that may be new waited for
  bool other = false;           // another sub-bucket tried after a denial
  bool on_other = false;        // this call is that try
  int64_t sent_us = 0;          // when this call went out (the scheduler's clock)
};

// Where an op goes: a node, and the bucket of the key there; whether the node was down when
// the target was chosen.
struct CallTarget {
  std::string node;
  SubBucket sub;
  bool down = false;
};

class ClientCore {
 public:
  using Done = std::function<void(client::Decision)>;

  ClientCore(PolicySet policies, std::vector<std::string> members, Scheduler& scheduler,
             Transport& transport, ClientCoreOptions options);
  ~ClientCore();
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  // Blocks until DecideAsync answers; not for use on the scheduler's own thread.
  client::Decision Decide(const client::Request& request);
  void DecideAsync(const client::Request& request, Done done);
  // The answer from local state alone (a warm lease), or false when it needs more.
  bool TryLocal(const client::Request& request, client::Decision* out);

  // Opens the connections to every member ahead of the first request; answers are ignored.
  void WarmUp();
  // A member list and its generation (a DNS refresh): adopted when the generation is newer
  // than this client's; keys follow their new owners once its ring is built.
  void SetMembers(std::vector<std::string> members, uint64_t generation);
  std::shared_ptr<const Ring> ring() const;
  uint64_t generation() const;

  client::Counters counters() const;
  // Leased units not yet spent nor lapsed, over every key.
  int64_t HeldUnits() const;
  // Billing debts read back from a journal (billing_journal.h): restored (Fallbacks) and paid
  // to the owners of their keys under this client's ring. Before the first request. An
  // error: the journal could not be rewritten.
  Status RestoreBillingDebts(BillingJournal::Replay replay);

  // RETURNs every unspent leased unit; `done` runs on the scheduler's thread when every
  // RETURN has been answered or has missed its deadline.
  void ReturnLeases(std::function<void()> done);

 private:
  using SharedDone = std::shared_ptr<Done>;
  void Answer(client::Decision d, const Done& done);
  void Fallback(const ResolvedRequest& r, Done done);

  using Target = CallTarget;
  // The owner of a ring slot (empty node: no members), from the list this thread last read.
  Target OwnerTarget(uint32_t slot) const;
  // Sub-bucket `sub` of `key`: the owner of "key#index".
  Target SubBucketTarget(std::string_view key, const SubBucket& sub) const;
  // The request's held units, when its bucket can answer alone.
  bool SpendHeld(const ResolvedRequest& r, client::Decision* out);
  // Decide from a request resolved once.
  void DecideResolved(const ResolvedRequest& r, Done done);
  // Leases, on the scheduler's thread. An empty `via`: the key's own target, found now (else
  // the owner a WrongOwner reply named, or the sub-bucket asked again).
  void StartLease(const KeyId& id, CallTries tries = {}, Target via = {});
  void OnLease(const KeyId& id, int64_t wanted, CallTries tries, const Target& target,
               CallResult result);
  // A lease answered after its deadline: its units are kept, not lost (LeaseBuckets).
  void OnLateLease(const KeyId& id, const LeaseBuckets::Ask& ask, SubBucket sub,
                   const CallResult& result);
  // Runs what a bucket handed back: answers, fallbacks, another lease, its timer.
  void Settle(const KeyId& id, LeaseBuckets::Settled s);
  void ArmWaiterTimer(const KeyId& id, int64_t at_us);

  // The key's bucket for the next op (its own, or a sub-bucket in turn when it is split) and
  // that bucket's owner.
  Target TargetOf(const ResolvedRequest& r);
  // Strict checks, on the scheduler's thread, all within the decision's deadline. An empty
  // target: the key's, found now.
  void StartCheck(const SharedRequest& req, const SharedDone& done, CallTries tries,
                  int64_t deadline_at_us, Target target = {});
  void OnCheck(const SharedRequest& req, const SharedDone& done, CallTries tries,
               int64_t deadline_at_us, const SubBucket& sub, CallResult result);
  // A request the split could not answer (counted): its class decides.
  void SplitFallback(const ResolvedRequest& r, Done done);

  // A WrongOwner answer: offers its member list, and says where to retry once (the owner
  // it names), or nullopt when the answer is not to be followed (an older member list).
  std::optional<std::string> FollowWrongOwner(const OpAnswer& a);
  std::string OwnerFor(const Policy& p, std::string_view key, std::string_view tenant,
                       const SubBucket& sub) const;
  std::optional<SubBucket> PickSplit(const Policy& p, const KeyId& id);
  void RenewSplit(const KeyId& split_id);
  // An answer from a sub-bucket that this gateway's view of the split is out of date (a
  // SplitChanged status, or any refusal): the view is replaced by the split the answer
  // carries, or forgotten so that the next try asks the owner. True when the op is to be
  // tried once more (the first time).
  bool RefreshSplit(const Policy& p, std::string_view key, const SubBucket& stale,
                    const OpAnswer& a, CallTries& tries);
  // After a denial (or an empty grant) by sub-bucket `sub`, or by a key whose split ended
  // (sub.k 0): when it may be new (it starts drained) and its retry_after (for a lease, the
  // time one unit takes) ends before `deadline_at_us`, the time to ask it again (the try
  // after it gets the time left, and falls back by class when it misses that); else nullopt,
  // counted as a missed wait when it may be new.
  std::optional<int64_t> WaitForNewSubBucket(const Policy& p, std::string_view key,
                                             const SubBucket& sub, const OpAnswer& a,
                                             int64_t deadline_at_us, CallTries& tries, bool lease);

  // Sends op with a deadline; `done` runs once on the scheduler's thread. A miss counts
  // against the node's health only when the call had the whole deadline. `late`, when set,
  // gets the answer that comes after the deadline has answered `done` (a lease's units).
  void Call(const std::string& address, OpSpec op, int64_t timeout_us, Transport::Callback done,
            Transport::Callback late = nullptr);
  void StartProbing(const std::string& address);
  // Asks another member for its member list (a node that went down may have left).
  void AskMembers(const std::string& down);
  void Probe(const std::string& address);
  // Pays billing debts owed to a node that is back, a few calls at a time.
  void Reconcile(const std::string& address);

  const PolicySet policies_;
  const RequestResolver resolver_;
  Scheduler& scheduler_;
  Transport& transport_;
  const ClientCoreOptions options_;
  mutable ClientCounters counters_;
  Routing routing_;
  LeaseBuckets buckets_;
  SplitViews splits_;
  Fallbacks fallbacks_;
  std::unordered_map<std::string, int> reconciling_;  // scheduler thread only: calls in flight
};

}  // namespace limiter
