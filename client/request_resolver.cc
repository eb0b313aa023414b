#include "client/request_resolver.h"

#include "common/key_limiter.h"
#include "common/limits.h"
#include "protocol/rules.h"

namespace limiter {

RequestResolver::RequestResolver(const PolicySet& policies) : policies_(policies) {
  for (size_t i = 0; i < policies_.policies().size(); ++i) {
    policy_index_.emplace(policies_.policies()[i].name, static_cast<int>(i));
  }
}

Status RequestResolver::Resolve(const client::Request& req, ResolvedRequest& r) const {
  const auto it = policy_index_.find(req.policy);
  if (it == policy_index_.end()) {
    return Error{"no policy named '" + std::string(req.policy.substr(0, kMaxNameBytes)) + "'"};
  }
  r.index = it->second;
  r.policy = &policies_.policies()[static_cast<size_t>(r.index)];
  const Policy& p = *r.policy;
  if (Status s = protocol::KeyError(req.key, "the key"); !s.ok()) return s;
  if (Status s = protocol::TenantError(req.tenant); !s.ok()) return s;
  if (Status s = protocol::MissingTenantError(p, req.tenant); !s.ok()) return s;
  if (Status s = protocol::OperationError(req.operation); !s.ok()) return s;
  if (req.operation.empty()) {
    if (Status s = protocol::CostError(req.cost); !s.ok()) return s;
  }
  r.key = req.key;
  r.tenant = req.tenant;
  r.operation = req.operation;
  r.cost = req.operation.empty() ? req.cost : p.CostOf(req.operation);
  r.lease = policies_.LeasesAlike(p, req.operation);
  // A cost above what some limit of the chain can ever hold is never admitted, wherever it
  // is asked.
  for (const Policy* q = &p; q != nullptr && !r.never; q = policies_.Parent(*q)) {
    const int64_t cost = req.operation.empty() ? r.cost : q->CostOf(req.operation);
    if (cost > FullAllowance(q->algorithm, q->rate)) {
      r.never = true;
      r.never_by = q;
    }
  }
  r.id = protocol::LimitId(p, r.key, r.tenant);
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
