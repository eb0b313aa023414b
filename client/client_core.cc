#include "client/client_core.h"

#include <algorithm>
#include <future>
#include <random>

#include "common/limits.h"
#include "common/protocol.h"

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
      fallbacks_(policies_, options.gateways, options.probe_max_us / 1000,
                 options.max_billing_debts, scheduler, counters_) {}

ClientCore::~ClientCore() = default;

void ClientCore::Answer(ClientDecision d, const Done& done) {
  counters_.Count(d);
  done(std::move(d));
}

void ClientCore::Fallback(const ResolvedRequest& r, Done done) {
  fallbacks_.Decide(r, routing_.OwnerOf(r.routing()), std::move(done));
}

bool ClientCore::TryLocal(const client::Request& req, ClientDecision* out) {
  // Only keys that already have a bucket, found by their identity without resolving the
  // policy (a request naming a tenant for a policy that does not nest takes the slow path).
  if (req.key.empty() || req.key.size() > kMaxKeyBytes || req.tenant.size() > kMaxKeyBytes ||
      req.policy.size() > kMaxNameBytes || req.operation.size() > kMaxNameBytes) {
    return false;
  }
  const KeyId id = protocol::LimitIdOfRequest(req.policy, req.key, req.tenant);
  bool refill = false;
  if (!buckets_.TrySpend(id, req.operation, req.cost, scheduler_.NowCoarseUs(), out, &refill)) {
    return false;
  }
  if (refill) scheduler_.Post([this, id] { StartLease(id); });
  return true;
}

ClientDecision ClientCore::Decide(const client::Request& req) {
  ClientDecision d;
  if (TryLocal(req, &d)) return d;
  std::promise<ClientDecision> answer;
  std::future<ClientDecision> result = answer.get_future();
  DecideAsync(req, [&answer](ClientDecision decided) { answer.set_value(std::move(decided)); });
  return result.get();  // the deadline timers guarantee an answer
}

void ClientCore::DecideAsync(const client::Request& req, Done done) {
  ResolvedRequest r;
  if (auto error = resolver_.Resolve(req, r)) {
    return Answer(resolver_.Denied(r, std::move(*error)), done);
  }
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
      owner = routing_.OwnerOf(r.routing());
      return !owner.empty() && !routing_.IsDown(owner);
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
  if (target.node.empty() || routing_.IsDown(target.node)) {
    fallbacks_.Decide(r, target.node, std::move(done));
    return;
  }
  scheduler_.Post([this, req = Own(r), done = std::make_shared<Done>(std::move(done)),
                   target = std::move(target)]() mutable {
    StartCheck(req, done, 0, scheduler_.NowUs() + options_.deadline_us, std::move(target));
  });
}

// ----- leases -----

void ClientCore::StartLease(const KeyId& id, int attempt, Target via) {
  if (attempt > 0) Settle(id, buckets_.OnRetry(id));
  const std::optional<LeaseBuckets::Ask> ask = buckets_.NextLease(id, scheduler_.NowUs());
  if (!ask) return;
  const Policy& p = policies_.policies()[static_cast<size_t>(ask->policy)];
  SubBucket sub = via.sub;
  if (via.node.empty()) {
    if (std::optional<SubBucket> picked = PickSplit(p, ask->key)) sub = *picked;
  }
  const std::string owner = via.node.empty() ? OwnerFor(p, ask->key, ask->tenant, sub) : via.node;
  const int64_t wanted = ask->units;
  if (owner.empty() || routing_.IsDown(owner)) {
    OnLease(id, wanted, 2, sub, CallResult{CallStatus::kConnection, "owner is down", {}});
    return;
  }
  OpSpec op;
  op.kind = OpKind::kLease;
  op.policy = p.name;
  op.key = ask->key;
  op.tenant = ask->tenant;
  op.cost = wanted;
  op.split_k = sub.k;
  op.split_index = sub.index;
  op.split_epoch = sub.epoch;
  op.split_token = sub.token;
  op.split_token_bytes = sub.token_bytes;
  Call(
      owner, std::move(op), options_.deadline_us,
      [this, id, wanted, attempt, sub](CallResult result) {
        OnLease(id, wanted, attempt, sub, std::move(result));
      },
      [this, id, ask = *ask, sub](CallResult result) { OnLateLease(id, ask, sub, result); });
}

namespace {

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
  Settle(id, buckets_.OnLateGrant(id, ask,
                                  GrantOf(result.answer, ask.units, sub, policies_),
                                  scheduler_.NowUs()));
}

void ClientCore::OnLease(const KeyId& id, int64_t wanted, int attempt, SubBucket sub,
                         CallResult result) {
  const OpAnswer& a = result.answer;
  const bool answered = result.status == CallStatus::kOk;
  const int64_t now_us = scheduler_.NowUs();
  if (answered && a.status == OpAnswer::Status::kWrongOwner && attempt == 0) {
    if (std::optional<std::string> owner = FollowWrongOwner(a)) {
      StartLease(id, 1, Target{*owner, sub});  // once more, to the owner its ring names
      return;
    }
  }
  if (answered && a.status == OpAnswer::Status::kSplit && attempt < 2) {
    // The key got hot and was split: lease from one of its sub-buckets instead.
    ClientCounters::Add(counters_.split_redirects);
    const std::optional<std::pair<const Policy*, std::string>> bucket = buckets_.KeyOf(id);
    if (!bucket) return;
    splits_.Learn(*bucket->first, bucket->second, a, now_us);
    if (a.split_valid_ms > 0) {
      StartLease(id, attempt + 1);
      return;
    }
  }
  if (answered && a.status == OpAnswer::Status::kOk && a.granted == 0 && sub.k != 0 &&
      attempt == 0) {
    const std::optional<std::pair<const Policy*, std::string>> bucket = buckets_.KeyOf(id);
    if (!bucket) return;
    if (splits_.TryOther(*bucket->first, bucket->second)) {
      StartLease(id, 1);  // one sub-bucket is empty: try one other before denying
      return;
    }
  }
  if (!answered) return Settle(id, buckets_.OnFailed(id));
  switch (a.status) {
    case OpAnswer::Status::kOk:
      return Settle(id, buckets_.OnGrant(id, GrantOf(a, wanted, sub, policies_), now_us));
    case OpAnswer::Status::kSplit:  // split, but between views: its owner reopens it soon
      return Settle(id, buckets_.OnRefused(id, "", a.retry_after_ms, now_us));
    case OpAnswer::Status::kBadRequest:  // this client and the node disagree: say so
      return Settle(id,
                    buckets_.OnRefused(id, "the owner refused the lease: " + a.error, 0, now_us));
    default:  // wrong owner after a retry, unknown policy, a full node: the class decides
      ClientCounters::Add(counters_.store_errors);
      return Settle(id, buckets_.OnFailed(id));
  }
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
  Target t;
  if (std::optional<SubBucket> picked = PickSplit(*r.policy, r.key)) t.sub = *picked;
  t.node = OwnerFor(*r.policy, r.key, r.tenant, t.sub);
  return t;
}

void ClientCore::StartCheck(const SharedRequest& req, const SharedDone& done, int attempt,
                            int64_t deadline_at_us, Target target) {
  const ResolvedRequest& r = **req;
  const int64_t left = deadline_at_us - scheduler_.NowUs();
  if (target.node.empty()) {
    target = TargetOf(r);
    if (target.node.empty() || routing_.IsDown(target.node)) {
      return Fallback(r, std::move(*done));
    }
  }
  if (left <= 0) return Fallback(r, std::move(*done));
  const SubBucket sub = target.sub;
  OpSpec op;
  op.kind = OpKind::kCheck;
  op.policy = r.policy->name;
  op.key = std::string(r.key);
  op.tenant = std::string(r.tenant);
  op.operation = std::string(r.operation);
  op.cost = r.operation.empty() ? r.cost : 1;
  op.split_k = sub.k;
  op.split_index = sub.index;
  op.split_epoch = sub.epoch;
  op.split_token = sub.token;
  op.split_token_bytes = sub.token_bytes;
  Call(target.node, std::move(op), std::min(options_.deadline_us, left),
       [this, req, done, attempt, deadline_at_us, sub](CallResult result) {
         OnCheck(req, done, attempt, deadline_at_us, sub, std::move(result));
       });
}

void ClientCore::OnCheck(const SharedRequest& req, const SharedDone& done, int attempt,
                         int64_t deadline_at_us, SubBucket sub, CallResult result) {
  const ResolvedRequest& r = **req;
  const OpAnswer& a = result.answer;
  if (result.status != CallStatus::kOk) return Fallback(r, std::move(*done));
  switch (a.status) {
    case OpAnswer::Status::kOk:
      break;
    case OpAnswer::Status::kBadRequest:
      return Answer(resolver_.Denied(r, a.error), *done);
    case OpAnswer::Status::kWrongOwner:
      if (attempt == 0) {
        if (std::optional<std::string> owner = FollowWrongOwner(a)) {
          return StartCheck(req, done, 1, deadline_at_us, Target{*owner, sub});
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
      return Fallback(r, std::move(*done));
    case OpAnswer::Status::kSplit: {
      ClientCounters::Add(counters_.split_redirects);
      splits_.Learn(*r.policy, r.key, a, scheduler_.NowUs());
      if (a.split_valid_ms > 0 && attempt < 2) {
        return StartCheck(req, done, attempt + 1, deadline_at_us);  // to a sub-bucket
      }
      ClientDecision d = resolver_.Denied(r, "");  // between views: its owner reopens it soon
      d.retry_after = std::chrono::milliseconds(a.retry_after_ms);
      return Answer(std::move(d), *done);
    }
  }
  if (sub.k != 0) {
    if (!a.allowed && attempt == 0 && splits_.TryOther(*r.policy, r.key)) {
      return StartCheck(req, done, 1, deadline_at_us);  // denied by one: try one other
    }
    if (attempt == 1) splits_.NoteOther(*r.policy, r.key, a.allowed);
  }
  Answer(resolver_.FromAnswer(r, a), *done);
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

std::optional<SubBucket> ClientCore::PickSplit(const Policy& p, std::string_view key) {
  bool renew = false;
  std::optional<SubBucket> sub = splits_.Pick(p, key, scheduler_.NowUs(), &renew);
  if (renew) scheduler_.Post([this, id = SplitViews::IdOf(p, key)] { RenewSplit(id); });
  return sub;
}

void ClientCore::RenewSplit(const KeyId& split_id) {
  std::optional<SplitViews::Renewal> renewal = splits_.TakeRenewal(split_id);
  if (!renewal) return;
  const std::string owner = routing_.OwnerOf(renewal->key);
  if (owner.empty() || routing_.IsDown(owner)) return;  // the view lapses by itself
  OpSpec op;
  op.kind = OpKind::kSplit;
  op.policy = renewal->policy->name;
  op.key = renewal->key;
  op.cost = renewal->sent;
  Call(owner, std::move(op), options_.deadline_us,
       [this, split_id, policy = renewal->policy, key = renewal->key](CallResult result) {
         if (result.status == CallStatus::kOk && result.answer.status == OpAnswer::Status::kOk) {
           splits_.Learn(*policy, key, result.answer, scheduler_.NowUs());
         } else {
           splits_.RenewalFailed(split_id);
         }
       });
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
  const std::shared_ptr<const Routing::Membership> m = routing_.membership();
  const auto& members = m->ring->members();
  if (members.size() < 2) return;
  const size_t start = static_cast<size_t>(scheduler_.NowUs()) % members.size();
  for (size_t i = 0; i < members.size(); ++i) {
    const std::string& other = members[(start + i) % members.size()];
    if (other == down || routing_.IsDown(other)) continue;
    OpSpec op;
    op.kind = OpKind::kMembers;
    ClientCounters::Add(counters_.store_calls);
    transport_.Send(other, std::move(op), [this](CallResult result) {
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
  OpSpec op;
  op.kind = OpKind::kStats;
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
  transport_.Send(address, op, [this, address, finished, timer, retry](CallResult result) {
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
    OpSpec op;
    op.kind = OpKind::kLease;
    op.policy = policies_.policies()[static_cast<size_t>(debt.policy)].name;
    op.key = std::move(debt.key);
    op.tenant = std::move(debt.tenant);
    op.cost = debt.units;
    Call(address, std::move(op), options_.deadline_us,
         [this, id = debt.id, address](CallResult result) {
           --reconciling_[address];
           const bool answered = result.status == CallStatus::kOk;
           const OpAnswer& a = result.answer;
           const int64_t paid = answered && a.status == OpAnswer::Status::kOk ? a.granted : 0;
           // A node that refuses the lease outright (the policy is strict there) never will.
           const bool refused = answered && a.status != OpAnswer::Status::kOk &&
                                a.status != OpAnswer::Status::kKeysExhausted &&
                                a.status != OpAnswer::Status::kMoving &&
                                a.status != OpAnswer::Status::kStoreError;
           const int64_t now = scheduler_.NowUs();
           if (!fallbacks_.SettleDebt(id, paid, refused, now + options_.reconcile_retry_us)) {
             scheduler_.After(options_.reconcile_retry_us, [this, address] { Reconcile(address); });
           }
           Reconcile(address);  // the next debt, if any is due
         });
  }
}

std::optional<std::string> ClientCore::RestoreBillingDebts(BillingJournal::Replay replay) {
  std::optional<std::string> error = fallbacks_.RestoreDebts(
      std::move(replay), [this](const Policy& p, std::string_view key, std::string_view tenant) {
        return OwnerFor(p, key, tenant, {});
      });
  if (error) return error;
  // Paid as after an owner's return: a few calls at a time; one that is down is probed, and
  // paid when it answers.
  scheduler_.Post([this, owners = fallbacks_.Creditors()] {
    for (const std::string& owner : owners) Reconcile(owner);
  });
  return std::nullopt;
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
    OpSpec op;
    op.kind = OpKind::kReturn;
    op.policy = p.name;
    op.cost = u.units;
    op.leased_at_ms = u.granted_at_ms;
    op.lease_id = u.lease_id;
    op.split_k = u.sub.k;
    op.split_index = u.sub.index;
    op.split_epoch = u.sub.epoch;
    op.split_token = u.sub.token;
    op.split_token_bytes = u.sub.token_bytes;
    std::string owner = OwnerFor(p, u.key, u.tenant, u.sub);
    op.key = std::move(u.key);
    op.tenant = std::move(u.tenant);
    calls.emplace_back(std::move(owner), std::move(op));
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
