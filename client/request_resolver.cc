#include "client/request_resolver.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/key_limiter.h"
#include "common/limits.h"
#include "protocol/ring.h"
#include "protocol/rules.h"

namespace limiter {

namespace {

std::atomic<uint64_t> next_instance{1};

}  // namespace

RequestResolver::RequestResolver(const PolicySet& policies)
    : policies_(policies), instance_(next_instance.fetch_add(1)) {
  for (size_t i = 0; i < policies_.policies().size(); ++i) {
    const Policy& p = policies_.policies()[i];
    policy_index_.emplace(p.name, static_cast<int>(i));
    Facts f;
    f.id_seed = protocol::PolicyIdSeed(p);
    f.leases = policies_.LeasesAlike(p, {});
    f.most = INT64_MAX;
    for (const Policy* q = &p; q != nullptr; q = policies_.Parent(*q)) {
      f.most = std::min(f.most, FullAllowance(q->algorithm, q->rate));
    }
    facts_.push_back(f);
  }
}

namespace {

// Policy names are short: compared in place, eight bytes at a time, without a call.
bool SameName(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  const char* x = a.data();
  const char* y = b.data();
  size_t n = a.size();
  for (; n >= 8; x += 8, y += 8, n -= 8) {
    uint64_t u, v;
    std::memcpy(&u, x, 8);
    std::memcpy(&v, y, 8);
    if (u != v) return false;
  }
  for (; n > 0; --n) {
    if (*x++ != *y++) return false;
  }
  return true;
}

}  // namespace

int RequestResolver::Find(std::string_view name) const {
  // Plain values (no guard on each access); the name compared is the policy's own.
  thread_local uint64_t last_instance = 0;
  thread_local int last_index = 0;
  if (last_instance == instance_ &&
      SameName(name, policies_.policies()[static_cast<size_t>(last_index)].name)) {
    return last_index;
  }
  const auto it = policy_index_.find(name);
  if (it == policy_index_.end()) return -1;
  last_instance = instance_;
  last_index = it->second;
  return it->second;
}

Status RequestResolver::Resolve(const client::Request& req, ResolvedRequest& r) const {
  r.index = Find(req.policy);
  if (r.index < 0) {
    return Error{"no policy named '" + std::string(req.policy.substr(0, kMaxNameBytes)) + "'"};
  }
  r.policy = &policies_.policies()[static_cast<size_t>(r.index)];
  const Policy& p = *r.policy;
  const Facts& facts = facts_[static_cast<size_t>(r.index)];
  // Every bound inline; a message is made only for a request that breaks one.
  const bool plain = req.operation.empty();
  if (!protocol::KeyInBounds(req.key) || req.tenant.size() > kMaxKeyBytes ||
      (p.parent_index >= 0 && req.tenant.empty()) || req.operation.size() > kMaxNameBytes ||
      (plain && (req.cost < 1 || req.cost > kMaxCost))) {
    if (Status s = protocol::KeyError(req.key, "the key"); !s.ok()) return s;
    if (Status s = protocol::TenantError(req.tenant); !s.ok()) return s;
    if (Status s = protocol::MissingTenantError(p, req.tenant); !s.ok()) return s;
    if (Status s = protocol::OperationError(req.operation); !s.ok()) return s;
    return protocol::CostError(req.cost);
  }
  r.key = req.key;
  r.tenant = req.tenant;
  r.operation = req.operation;
  if (plain) {
    r.cost = req.cost;
    r.lease = facts.leases;
    r.never = false;
    if (r.cost > facts.most) {  // the first limit of the chain that can never hold it
      for (const Policy* q = &p; q != nullptr && !r.never; q = policies_.Parent(*q)) {
        r.never = r.cost > FullAllowance(q->algorithm, q->rate);
        r.never_by = q;
      }
    }
  } else {
    r.cost = p.CostOf(req.operation);
    r.lease = policies_.LeasesAlike(p, req.operation);
    // A cost above what some limit of the chain can ever hold is never admitted, wherever it
    // is asked.
    r.never = false;
    for (const Policy* q = &p; q != nullptr && !r.never; q = policies_.Parent(*q)) {
      if (q->CostOf(req.operation) > FullAllowance(q->algorithm, q->rate)) {
        r.never = true;
        r.never_by = q;
      }
    }
  }
  r.id = protocol::LimitIdInSlot(facts.id_seed, p, r.key, r.tenant, Ring::SlotOf(r.routing()));
  return Status::Ok();
}

client::Decision RequestResolver::Denied(const ResolvedRequest& r, std::string error) const {
  client::Decision d;
  d.allowed = false;
  if (r.policy) {
    d.policy = r.policy->name;
    d.limit = r.policy->rate.limit();
    d.window_ms = r.policy->rate.window_ms();
  }
  d.error = std::move(error);
  d.source = client::Source::kStore;
  return d;
}

client::Decision RequestResolver::Never(const ResolvedRequest& r) const {
  client::Decision d = Denied(r, "");
  d.policy = r.never_by->name;
  d.limit = r.never_by->rate.limit();
  d.window_ms = r.never_by->rate.window_ms();
  d.retry_after = client::kRetryNever;
  return d;
}

client::Decision RequestResolver::FromAnswer(const ResolvedRequest& r, const OpAnswer& a) const {
  client::Decision d;
  d.allowed = a.allowed;
  const Policy* decider = r.policy;
  size_t index = 0;
  if (!a.allowed && a.denied_by >= 0) {
    index = static_cast<size_t>(a.denied_by);
    if (const Policy* p = policies_.Find(a.denied_policy)) decider = p;
  }
  d.policy = decider->name;
  d.limit = decider->rate.limit();
  d.window_ms = decider->rate.window_ms();
  if (index < a.results.size()) {
    d.remaining = a.results[index].remaining;
    d.reset = std::chrono::milliseconds(a.results[index].reset_after_ms);
  }
  if (!a.allowed) {
    d.retry_after = a.retry_after_ms == kNever ? client::kRetryNever
                                               : std::chrono::milliseconds(a.retry_after_ms);
  }
  d.source = client::Source::kStore;
  return d;
}

}  // namespace limiter
