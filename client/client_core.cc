#include "client/client_core.h"

#include <algorithm>
#include <future>
#include <random>

#include "common/limits.h"
#include "protocol/rules.h"

namespace limiter {

using ClientDecision = client::Decision;
using client::Source;

namespace {

uint64_t SeedOr(uint64_t seed) {
  if (seed != 0) return seed;
  std::random_device rd;
  return (uint64_t{rd()} << 32) | rd();
}

}  // namespace

ClientCore::ClientCore(PolicySet policies, std::vector<std::string> members, Scheduler& scheduler,
                       Transport& transport, ClientCoreOptions options)
    : policies_(std::move(policies)),
      resolver_(policies_),
      scheduler_(scheduler),
      transport_(transport),
      options_(options),
      routing_(std::move(members), options.generation, scheduler,
               {options.down_after_misses, options.probe_first_us, options.probe_max_us},
               SeedOr(options.seed)),
      buckets_(policies_, {options.gateways, options.deadline_us}, counters_),
      splits_(SeedOr(options.seed)),
      fallbacks_(policies_, options.gateways, options.probe_max_us / 1000,
                 options.max_billing_debts, scheduler, counters_) {}

ClientCore::~ClientCore() = default;

void ClientCore::Answer(ClientDecision d, const Done& done) {
  counters_.Count(d);
  done(std::move(d));
}

ClientCore::Target ClientCore::OwnerTarget(uint32_t slot) const {
  Target t;
  if (const Routing::Node* owner = routing_.Current().OwnerOfSlot(slot)) {
    t.node = owner->address;
    t.down = Routing::IsDown(*owner);
  }
  return t;
}

void ClientCore::Fallback(const ResolvedRequest& r, Done done) {
  fallbacks_.Decide(r, OwnerTarget(r.slot()).node, std::move(done));
}

bool ClientCore::TryLocal(const client::Request& req, ClientDecision* out) {
  ResolvedRequest r;
  if (!resolver_.Resolve(req, r).ok() || r.never || !r.lease) return false;
  return SpendHeld(r, out);
}

bool ClientCore::SpendHeld(const ResolvedRequest& r, ClientDecision* out) {
  bool refill = false;
  if (!buckets_.TrySpend(r, scheduler_.NowCoarseUs(), out, &refill)) return false;
  if (refill) scheduler_.Post([this, id = r.id] { StartLease(id); });
  return true;
}

ClientDecision ClientCore::Decide(const client::Request& req) {
  // Resolved once (its policy, identity and ring slot): every step below works from it.
  ResolvedRequest r;
  ClientDecision d;  // the one object returned (no copy)
  if (Status s = resolver_.Resolve(req, r); !s.ok()) {
    d = resolver_.Denied(r, s.error());
    counters_.Count(d);
  } else if (!r.lease || r.never || !SpendHeld(r, &d)) {
    std::promise<ClientDecision> answer;
    std::future<ClientDecision> result = answer.get_future();
    DecideResolved(r, [&answer](ClientDecision decided) { answer.set_value(std::move(decided)); });
    d = result.get();  // the deadline timers guarantee an answer
  }
  return d;
}

void ClientCore::DecideAsync(const client::Request& req, Done done) {
  ResolvedRequest r;
  if (Status s = resolver_.Resolve(req, r); !s.ok()) {
    return Answer(resolver_.Denied(r, s.error()), done);
  }
  DecideResolved(r, std::move(done));
}

void ClientCore::DecideResolved(const ResolvedRequest& r, Done done) {
  if (r.never) return Answer(resolver_.Never(r), done);
  const int64_t now_us = scheduler_.NowUs();
  if (r.lease) {
    // One look at the bucket: its units answer at once (they were subtracted at the store,
    // so they are spent even while the owner is away); the owner is looked up only when the
    // request has to wait for a lease.
    ClientDecision d;
    bool refill = false, start_lease = false;
    std::string owner;
    const auto owner_up = [&] {
      const Target t = OwnerTarget(r.slot());
      owner = t.node;
      return !t.node.empty() && !t.down;
    };
    switch (buckets_.SpendOrQueue(r, now_us, done, &d, &refill, &start_lease, owner_up)) {
      case LeaseBuckets::Step::kAnswered:
        if (refill) scheduler_.Post([this, id = r.id] { StartLease(id); });
        done(std::move(d));
        return;
      case LeaseBuckets::Step::kQueued:
        if (start_lease) scheduler_.Post([this, id = r.id] { StartLease(id); });
        return;
      case LeaseBuckets::Step::kOwnerAway:
        fallbacks_.Decide(r, owner, std::move(done));
        return;
    }
  }
  // A strict check: its owner and health looked up once; the check goes there as it is.
  Target target = TargetOf(r);
  if (target.node.empty() || target.down) {
    fallbacks_.Decide(r, target.node, std::move(done));
    return;
  }
  scheduler_.Post([this, req = Own(r), done = std::make_shared<Done>(std::move(done)),
                   target = std::move(target)]() mutable {
    StartCheck(req, done, CallTries{}, scheduler_.NowUs() + options_.deadline_us,
               std::move(target));
  });
}

// ----- leases -----

void ClientCore::StartLease(const KeyId& id, CallTries tries, Target via) {
  if (tries.calls > 0) Settle(id, buckets_.OnRetry(id));
  const std::optional<LeaseBuckets::Ask> ask = buckets_.NextLease(id, scheduler_.NowUs());
  if (!ask) return;
  const Policy& p = policies_.policies()[static_cast<size_t>(ask->policy)];
  Target target = std::move(via);
  if (target.node.empty()) {
    const std::optional<SubBucket> picked = PickSplit(p, id);
    target = picked ? SubBucketTarget(ask->key, *picked) : OwnerTarget(RingSlotOf(id));
  } else {
    target.down = routing_.IsDown(target.node);
  }
  const int64_t wanted = ask->units;
  if (target.node.empty() || target.down) {
    return Settle(id, buckets_.OnFailed(id));  // the owner is down: the class decides
  }
  const SubBucket& sub = target.sub;
  OpSpec op = OpSpec::Lease(p.name, ask->key, ask->tenant, wanted, sub);
  const std::string node = target.node;
  tries.sent_us = scheduler_.NowUs();
  Call(
      node, std::move(op), options_.deadline_us,
      [this, id, wanted, tries, target = std::move(target)](CallResult result) {
        OnLease(id, wanted, tries, target, std::move(result));
      },
      [this, id, ask = *ask, sub](CallResult result) { OnLateLease(id, ask, sub, result); });
}

namespace {

// How long one unit takes to come back on a bucket of L/k (k 0: the key itself), at least
// the node's millisecond.
int64_t OneUnitMs(const Policy& p, uint16_t k) {
  const int64_t ways = std::max<int64_t>(k, 1);
  return std::max<int64_t>(1, (p.rate.window_ms() * ways + p.rate.limit() - 1) / p.rate.limit());
}

LeaseBuckets::Grant GrantOf(const OpAnswer& a, int64_t wanted, const SubBucket& sub,
                            const PolicySet& policies) {
  LeaseBuckets::Grant g;
  g.granted = a.granted;
  g.wanted = wanted;
  g.granted_at_ms = a.granted_at_ms;
  g.lease_ttl_ms = a.lease_ttl_ms;
  g.lease_id = a.lease_id;
  g.suggested_lease = a.suggested_lease;
  g.store_remaining = a.results.empty() ? 0 : a.results.front().remaining;
  g.retry_after_ms = a.retry_after_ms;
  g.denied_by = a.denied_policy.empty() ? nullptr : policies.Find(a.denied_policy);
  g.sub = sub;
  return g;
}

}  // namespace

void ClientCore::OnLateLease(const KeyId& id, const LeaseBuckets::Ask& ask, SubBucket sub,
                             const CallResult& result) {
  if (result.status != CallStatus::kOk || result.answer.status != OpAnswer::Status::kOk) return;
  Settle(id, buckets_.OnLateGrant(id, ask, GrantOf(result.answer, ask.units, sub, policies_),
                                  scheduler_.NowUs()));
}

void ClientCore::OnLease(const KeyId& id, int64_t wanted, CallTries tries, const Target& target,
                         CallResult result) {
  if (result.status != CallStatus::kOk) return Settle(id, buckets_.OnFailed(id));
  const OpAnswer& a = result.answer;
  const SubBucket& sub = target.sub;
  const int64_t now_us = scheduler_.NowUs();
  ++tries.calls;
  const bool on_other = std::exchange(tries.on_other, false);
  // The split could not answer: the waiting requests fall back by class, counted.
  const auto split_failed = [&] {
    LeaseBuckets::Settled s = buckets_.OnFailed(id);
    ClientCounters::Add(counters_.split_fallbacks, s.fallbacks.size());
    Settle(id, std::move(s));
  };
  switch (a.status) {
    case OpAnswer::Status::kOk:
      break;
    case OpAnswer::Status::kBadRequest:
      if (sub.k == 0) {  // this client and the node disagree: say so
        return Settle(id,
                      buckets_.OnRefused(id, "the owner refused the lease: " + a.error, 0, now_us));
      }
      [[fallthrough]];  // a sub-bucket refused this gateway's view of the split
    case OpAnswer::Status::kSplitChanged: {
      const std::optional<std::pair<const Policy*, std::string>> bucket = buckets_.KeyOf(id);
      if (!bucket) return;
      if (RefreshSplit(*bucket->first, bucket->second, sub, a, tries)) return StartLease(id, tries);
      return split_failed();
    }
    case OpAnswer::Status::kSplit: {
      // The key got hot and was split: lease from one of its sub-buckets instead.
      ClientCounters::Add(counters_.split_redirects);
      const std::optional<std::pair<const Policy*, std::string>> bucket = buckets_.KeyOf(id);
      if (!bucket) return;
      splits_.Learn(*bucket->first, bucket->second, a, now_us);
      if (a.split_valid_ms > 0 && tries.redirects < 2) {
        ++tries.redirects;
        return StartLease(id, tries);
      }
      return split_failed();  // between two views while it merges back
    }
    case OpAnswer::Status::kWrongOwner:
      if (!tries.followed_owner) {
        tries.followed_owner = true;
        if (std::optional<std::string> owner = FollowWrongOwner(a)) {
          return StartLease(id, tries, Target{*owner, sub});  // to the owner its ring names
        }
      }
      [[fallthrough]];
    default:  // wrong owner after a retry, unknown policy, a full node: the class decides
      ClientCounters::Add(counters_.store_errors);
      if (sub.k != 0) return split_failed();
      return Settle(id, buckets_.OnFailed(id));
  }
  LeaseBuckets::Grant grant = GrantOf(a, wanted, sub, policies_);
  if (sub.k != 0 || splits_.AnyReopening()) {
    const std::optional<std::pair<const Policy*, std::string>> bucket = buckets_.KeyOf(id);
    if (!bucket) return;
    const Policy& p = *bucket->first;
    // An empty sub-bucket: when one unit is back there, not the whole lease (LeaseBuckets).
    if (sub.k != 0 && a.granted == 0) {
      grant.retry_after_ms = std::min(grant.retry_after_ms, OneUnitMs(p, sub.k));
    }
    const std::string& key = bucket->second;
    if (on_other) splits_.NoteOther(p, key, a.granted > 0);
    if (a.granted > 0) {
      splits_.NoteOpened(p, key, sub);
    } else if (std::optional<int64_t> at = WaitForNewSubBucket(
                   p, key, sub, a, tries.sent_us + options_.deadline_us, tries, true)) {
      Settle(id, buckets_.OnRetry(id));  // the waiting requests keep their deadlines
      scheduler_.After(*at - now_us, [this, id, tries, target] { StartLease(id, tries, target); });
      return;
    } else if (sub.k != 0 && !tries.other && splits_.TryOther(p, key)) {
      tries.other = tries.on_other = true;
      return StartLease(id, tries);  // one sub-bucket is empty: try one other before denying
    }
  }
  Settle(id, buckets_.OnGrant(id, grant, now_us));
}

void ClientCore::Settle(const KeyId& id, LeaseBuckets::Settled s) {
  for (auto& [done, d] : s.answers) Answer(std::move(d), done);
  if (!s.fallbacks.empty()) {
    ResolvedRequest r;
    r.index = s.policy;
    r.policy = &policies_.policies()[static_cast<size_t>(s.policy)];
    r.key = s.key;
    r.tenant = s.tenant;
    r.lease = true;
    r.id = id;
    for (auto& [done, cost] : s.fallbacks) {
      r.cost = cost;
      Fallback(r, std::move(done));
    }
  }
  if (s.lease_again) StartLease(id);
  if (s.arm_timer) ArmWaiterTimer(id, s.timer_at_us);
}

void ClientCore::ArmWaiterTimer(const KeyId& id, int64_t at_us) {
  scheduler_.After(std::max<int64_t>(0, at_us - scheduler_.NowUs()),
                   [this, id] { Settle(id, buckets_.OnDeadline(id, scheduler_.NowUs())); });
}

// ----- strict checks -----

ClientCore::Target ClientCore::TargetOf(const ResolvedRequest& r) {
  const std::optional<SubBucket> picked = PickSplit(*r.policy, r.id);
  return picked ? SubBucketTarget(r.key, *picked) : OwnerTarget(r.slot());
}

ClientCore::Target ClientCore::SubBucketTarget(std::string_view key, const SubBucket& sub) const {
  Target t = OwnerTarget(Ring::SlotOf(protocol::SubBucketRoutingKey(key, sub.index)));
  t.sub = sub;
  return t;
}

void ClientCore::StartCheck(const SharedRequest& req, const SharedDone& done, CallTries tries,
                            int64_t deadline_at_us, Target target) {
  const ResolvedRequest& r = **req;
  const int64_t now_us = scheduler_.NowUs();
  const int64_t left = deadline_at_us - now_us;
  if (target.node.empty()) {
    target = TargetOf(r);
    if (target.node.empty() || target.down) return Fallback(r, std::move(*done));
  }
  if (left <= 0) return Fallback(r, std::move(*done));
  const SubBucket sub = target.sub;
  OpSpec op = OpSpec::Check(r.policy->name, std::string(r.key), std::string(r.tenant),
                            std::string(r.operation), r.cost, sub);
  Call(target.node, std::move(op), std::min(options_.deadline_us, left),
       [this, req, done, tries, deadline_at_us, sub](CallResult result) {
         OnCheck(req, done, tries, deadline_at_us, sub, std::move(result));
       });
}

void ClientCore::OnCheck(const SharedRequest& req, const SharedDone& done, CallTries tries,
                         int64_t deadline_at_us, const SubBucket& sub, CallResult result) {
  const ResolvedRequest& r = **req;
  const OpAnswer& a = result.answer;
  if (result.status != CallStatus::kOk) return Fallback(r, std::move(*done));
  ++tries.calls;
  const bool on_other = std::exchange(tries.on_other, false);
  switch (a.status) {
    case OpAnswer::Status::kOk:
      break;
    case OpAnswer::Status::kBadRequest:
      if (sub.k == 0) return Answer(resolver_.Denied(r, a.error), *done);
      [[fallthrough]];  // a sub-bucket refused this gateway's view of the split
    case OpAnswer::Status::kSplitChanged:
      if (RefreshSplit(*r.policy, r.key, sub, a, tries)) {
        return StartCheck(req, done, tries, deadline_at_us);
      }
      return SplitFallback(r, std::move(*done));
    case OpAnswer::Status::kWrongOwner:
      if (!tries.followed_owner) {
        tries.followed_owner = true;
        if (std::optional<std::string> owner = FollowWrongOwner(a)) {
          return StartCheck(req, done, tries, deadline_at_us, Target{*owner, sub});
        }
      }
      [[fallthrough]];
    case OpAnswer::Status::kUnknownPolicy:
    case OpAnswer::Status::kKeysExhausted:
    case OpAnswer::Status::kMoving:
    case OpAnswer::Status::kStoreError:
      // The owner cannot answer for this key now (a ring or policy change under way, the
      // key being handed to it, a full node, its stored state unreadable): the class
      // decides, as when it is down (I4).
      ClientCounters::Add(counters_.store_errors);
      if (sub.k != 0) return SplitFallback(r, std::move(*done));
      return Fallback(r, std::move(*done));
    case OpAnswer::Status::kSplit:
      ClientCounters::Add(counters_.split_redirects);
      splits_.Learn(*r.policy, r.key, a, scheduler_.NowUs());
      if (a.split_valid_ms > 0 && tries.redirects < 2) {
        ++tries.redirects;
        return StartCheck(req, done, tries, deadline_at_us);  // to a sub-bucket
      }
      // Between two views while it merges back: its owner reopens it soon; until then the
      // class decides, as while a key is handed over.
      return SplitFallback(r, std::move(*done));
  }
  // A sub-bucket, or a key whose split this gateway saw end (it reopens drained).
  if (sub.k != 0 || splits_.AnyReopening()) {
    if (on_other) splits_.NoteOther(*r.policy, r.key, a.allowed);
    if (a.allowed) {
      splits_.NoteOpened(*r.policy, r.key, sub);
    } else if (std::optional<int64_t> at =
                   WaitForNewSubBucket(*r.policy, r.key, sub, a, deadline_at_us, tries, false)) {
      const Target again = sub.k != 0 ? SubBucketTarget(r.key, sub) : OwnerTarget(r.slot());
      scheduler_.After(*at - scheduler_.NowUs(),
                       [this, req, done, tries, deadline_at_us, again = std::move(again)] {
                         StartCheck(req, done, tries, deadline_at_us, again);
                       });
      return;
    } else if (sub.k != 0 && !tries.other && splits_.TryOther(*r.policy, r.key)) {
      tries.other = tries.on_other = true;
      return StartCheck(req, done, tries, deadline_at_us);  // denied by one: try one other
    }
  }
  Answer(resolver_.FromAnswer(r, a), *done);
}

void ClientCore::SplitFallback(const ResolvedRequest& r, Done done) {
  ClientCounters::Add(counters_.split_fallbacks);
  Fallback(r, std::move(done));
}

// ----- routing, splits -----

std::optional<std::string> ClientCore::FollowWrongOwner(const OpAnswer& a) {
  ClientCounters::Add(counters_.wrong_owner);
  const uint64_t ours = generation();
  if (!a.members.empty()) routing_.Offer(a.members, a.generation);
  // A node with an older member list than ours is the stale one: do not follow it.
  if (a.generation < ours || a.owner.empty()) return std::nullopt;
  if (std::find(a.members.begin(), a.members.end(), a.owner) == a.members.end()) {
    return std::nullopt;
  }
  return a.owner;
}

std::string ClientCore::OwnerFor(const Policy& p, std::string_view key, std::string_view tenant,
                                 const SubBucket& sub) const {
  if (sub.k == 0) return routing_.OwnerOf(protocol::RoutingKey(p, key, tenant));
  return routing_.OwnerOf(protocol::SubBucketRoutingKey(key, sub.index));
}

std::optional<SubBucket> ClientCore::PickSplit(const Policy& p, const KeyId& id) {
  bool renew = false;
  std::optional<SubBucket> sub = splits_.Pick(p, id, scheduler_.NowUs(), &renew);
  if (renew) scheduler_.Post([this, id] { RenewSplit(id); });
  return sub;
}

void ClientCore::RenewSplit(const KeyId& split_id) {
  std::optional<SplitViews::Renewal> renewal = splits_.TakeRenewal(split_id);
  if (!renewal) return;
  const std::string owner = routing_.OwnerOf(renewal->key);
  if (owner.empty() || routing_.IsDown(owner)) {
    // Asked again with a later op; the view lapses by itself meanwhile.
    return splits_.RenewalFailed(split_id);
  }
  Call(owner, OpSpec::Split(renewal->policy->name, renewal->key, renewal->sent),
       options_.deadline_us,
       [this, split_id, policy = renewal->policy, key = renewal->key](CallResult result) {
         if (result.status == CallStatus::kOk && result.answer.status == OpAnswer::Status::kOk) {
           splits_.Learn(*policy, key, result.answer, scheduler_.NowUs());
         } else {
           splits_.RenewalFailed(split_id);
         }
       });
}

bool ClientCore::RefreshSplit(const Policy& p, std::string_view key, const SubBucket& stale,
                              const OpAnswer& a, CallTries& tries) {
  if (a.split_k != 0) {
    splits_.Learn(p, key, a, scheduler_.NowUs());  // the owner's split now
  } else {
    splits_.Forget(p, key, stale);  // the next try asks the key's owner
  }
  if (tries.refreshed) return false;
  tries.refreshed = true;
  ClientCounters::Add(counters_.split_changed);
  return true;
}

std::optional<int64_t> ClientCore::WaitForNewSubBucket(const Policy& p, std::string_view key,
                                                       const SubBucket& sub, const OpAnswer& a,
                                                       int64_t deadline_at_us, CallTries& tries,
                                                       bool lease) {
  if (a.retry_after_ms < 0) return std::nullopt;
  const int64_t now_us = scheduler_.NowUs();
  if (!splits_.MayBeNew(p, key, sub, now_us)) return std::nullopt;
  const auto missed = [&] {
    ClientCounters::Add(counters_.split_waits_missed);
    return std::nullopt;
  };
  if (tries.waited) return missed();  // denied after its wait too
  int64_t wait_us = a.retry_after_ms * 1000;
  // A lease's retry_after is for the whole lease; one unit is what the requests waiting on it
  // need first.
  if (lease) wait_us = std::min(wait_us, OneUnitMs(p, sub.k) * 1000);
  // The wait must end before the deadline; the try after it gets what is left. When that is
  // less than a round trip, the try misses the deadline and the class decides, as for any
  // answer too late (I4); the store still decides every try that answers in time (I1).
  // Waiting only with a whole round trip to spare denied keys within their limit by their
  // sub-bucket's drained start whenever round trips neared half the deadline. A shorter wait
  // than retry_after (which counts whole milliseconds of the node's clock) was tried: its
  // tries came back after the deadline more often, and the fallbacks they caused admitted
  // more than the key's limit in the simulation (test/sim/hot_key_test.cc).
  if (wait_us >= deadline_at_us - now_us) return missed();
  tries.waited = true;
  ClientCounters::Add(counters_.split_waits);
  return now_us + wait_us;
}

// ----- calls and health -----

void ClientCore::Call(const std::string& address, OpSpec op, int64_t timeout_us,
                      Transport::Callback done, Transport::Callback late) {
  ClientCounters::Add(counters_.store_calls);
  struct State {
    bool finished = false;
    uint64_t timer = 0;
    Transport::Callback done;
    Transport::Callback late;
  };
  auto state = std::make_shared<State>();
  state->done = std::move(done);
  state->late = std::move(late);
  const bool counts = timeout_us >= options_.deadline_us;
  state->timer = scheduler_.After(timeout_us, [this, state, address, counts] {
    if (state->finished) return;
    state->finished = true;
    ClientCounters::Add(counters_.deadline_misses);
    ClientCounters::Add(counters_.store_errors);
    if (counts && routing_.NoteMiss(address)) StartProbing(address);
    state->done(CallResult{CallStatus::kDeadline, "no answer within the deadline", {}});
  });
  transport_.Send(address, std::move(op), [this, state, address](CallResult result) {
    if (state->finished) {  // too late: the deadline has answered
      if (state->late) state->late(std::move(result));
      return;
    }
    state->finished = true;
    scheduler_.Cancel(state->timer);
    if (result.status == CallStatus::kConnection) {
      ClientCounters::Add(counters_.store_errors);
      if (routing_.MarkDown(address)) {
        StartProbing(address);
        AskMembers(address);
      }
    } else {
      routing_.NoteOk(address);
    }
    state->done(std::move(result));
  });
}

void ClientCore::AskMembers(const std::string& down) {
  // A node that refuses connections may have left the cluster (a scale-in, a node drained
  // while this gateway sent it nothing): another member has the list without it, if so.
  const std::shared_ptr<const Routing::View> m = routing_.membership();
  const auto& members = m->ring->members();
  if (members.size() < 2) return;
  const size_t start = static_cast<size_t>(scheduler_.NowUs()) % members.size();
  for (size_t i = 0; i < members.size(); ++i) {
    const std::string& other = members[(start + i) % members.size()];
    if (other == down || routing_.IsDown(other)) continue;
    ClientCounters::Add(counters_.store_calls);
    transport_.Send(other, OpSpec::About(OpKind::kMembers), [this](CallResult result) {
      if (result.status == CallStatus::kOk && !result.answer.members.empty()) {
        routing_.Offer(result.answer.members, result.answer.generation);
      }
    });
    return;
  }
}

void ClientCore::StartProbing(const std::string& address) {
  // The connection stays: a node that is slow for a moment answers the probe on it, with no
  // reconnection and no in-flight op failed. A probe that gets no answer replaces it.
  scheduler_.After(routing_.NextProbeDelay(address), [this, address] { Probe(address); });
}

void ClientCore::Probe(const std::string& address) {
  ClientCounters::Add(counters_.store_calls);
  // A probe bypasses Call: its misses must not count against a node already down.
  auto finished = std::make_shared<bool>(false);
  auto retry = [this, address, finished] {
    if (*finished) return;
    *finished = true;
    StartProbing(address);
  };
  // No answer at all: the connection may be wedged (a peer gone without a reset); the next
  // probe goes over a new one.
  const uint64_t timer =
      scheduler_.After(options_.deadline_us * 10, [this, address, finished, retry] {
        if (*finished) return;
        transport_.Disconnect(address);
        retry();
      });
  transport_.Send(address, OpSpec::About(OpKind::kStats),
                  [this, address, finished, timer, retry](CallResult result) {
                    if (*finished) return;
                    scheduler_.Cancel(timer);
                    if (result.status != CallStatus::kOk) return retry();
                    *finished = true;
                    routing_.MarkUp(address);
                    Reconcile(address);
                  });
}

void ClientCore::Reconcile(const std::string& address) {
  if (routing_.IsDown(address)) return;
  int& in_flight = reconciling_[address];
  const size_t room = static_cast<size_t>(std::max(0, options_.reconcile_in_flight - in_flight));
  for (Fallbacks::DebtCall& debt : fallbacks_.TakeDebts(address, room, scheduler_.NowUs())) {
    ++in_flight;
    OpSpec op = OpSpec::Lease(policies_.policies()[static_cast<size_t>(debt.policy)].name,
                              std::move(debt.key), std::move(debt.tenant), debt.units);
    Call(address, std::move(op), options_.deadline_us,
         [this, id = debt.id, address](CallResult result) {
           --reconciling_[address];
           const bool answered = result.status == CallStatus::kOk;
           const OpAnswer& a = result.answer;
           const int64_t paid = answered && a.status == OpAnswer::Status::kOk ? a.granted : 0;
           // A node that refuses the lease outright (the policy is strict there) never will.
           const bool refused =
               answered && a.status != OpAnswer::Status::kOk &&
               a.status != OpAnswer::Status::kKeysExhausted &&
               a.status != OpAnswer::Status::kMoving && a.status != OpAnswer::Status::kStoreError &&
               a.status != OpAnswer::Status::kSplit && a.status != OpAnswer::Status::kSplitChanged;
           const int64_t now = scheduler_.NowUs();
           if (!fallbacks_.SettleDebt(id, paid, refused, now + options_.reconcile_retry_us)) {
             scheduler_.After(options_.reconcile_retry_us, [this, address] { Reconcile(address); });
           }
           Reconcile(address);  // the next debt, if any is due
         });
  }
}

Status ClientCore::RestoreBillingDebts(BillingJournal::Replay replay) {
  Status restored = fallbacks_.RestoreDebts(
      std::move(replay), [this](const Policy& p, std::string_view key, std::string_view tenant) {
        return OwnerFor(p, key, tenant, {});
      });
  if (!restored.ok()) return restored;
  // Paid as after an owner's return: a few calls at a time; one that is down is probed, and
  // paid when it answers.
  scheduler_.Post([this, owners = fallbacks_.Creditors()] {
    for (const std::string& owner : owners) Reconcile(owner);
  });
  return Status::Ok();
}

// ----- membership, counters, returns -----

void ClientCore::WarmUp() {
  const std::shared_ptr<const Ring> r = ring();
  scheduler_.Post([this, r] {
    for (const std::string& m : r->members()) {
      OpSpec hello;
      hello.kind = OpKind::kStats;
      transport_.Send(m, std::move(hello), [](CallResult) {});
    }
  });
}

void ClientCore::SetMembers(std::vector<std::string> members, uint64_t generation) {
  routing_.Offer(std::move(members), generation);
}

std::shared_ptr<const Ring> ClientCore::ring() const { return routing_.membership()->ring; }

uint64_t ClientCore::generation() const { return routing_.membership()->generation; }

client::Counters ClientCore::counters() const {
  client::Counters c;
  counters_.CopyTo(c);
  buckets_.AddCounters(c);
  c.nodes_down = routing_.nodes_down();
  c.fallback_limiters = fallbacks_.limiters();
  fallbacks_.AddCounters(c);
  c.rings_adopted = routing_.adopted();
  return c;
}

int64_t ClientCore::HeldUnits() const { return buckets_.HeldUnits(scheduler_.NowUs()); }

void ClientCore::ReturnLeases(std::function<void()> done) {
  std::vector<std::pair<std::string, OpSpec>> calls;
  for (LeaseBuckets::Unspent& u : buckets_.TakeUnspent(scheduler_.NowUs())) {
    const Policy& p = policies_.policies()[static_cast<size_t>(u.policy)];
    std::string owner = OwnerFor(p, u.key, u.tenant, u.sub);
    calls.emplace_back(std::move(owner),
                       OpSpec::Return(p.name, std::move(u.key), std::move(u.tenant), u.units,
                                      u.granted_at_ms, u.lease_id, u.sub));
  }
  scheduler_.Post([this, calls = std::move(calls), done = std::move(done)]() mutable {
    auto left = std::make_shared<size_t>(calls.size() + 1);
    auto finish = std::make_shared<std::function<void()>>(std::move(done));
    auto one_done = [left, finish] {
      if (--*left == 0) (*finish)();
    };
    for (auto& [owner, op] : calls) {
      if (owner.empty() || routing_.IsDown(owner)) {
        one_done();
        continue;
      }
      Call(owner, std::move(op), options_.deadline_us, [this, one_done](CallResult result) {
        if (result.status == CallStatus::kOk && result.answer.status == OpAnswer::Status::kOk) {
          ClientCounters::Add(counters_.units_returned,
                              static_cast<uint64_t>(result.answer.granted));
        }
        one_done();
      });
    }
    one_done();
  });
}

}  // namespace limiter
