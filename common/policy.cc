#include "common/policy.h"

#include <algorithm>

namespace limiter {

std::string_view LimitClassName(LimitClass c) {
  switch (c) {
    case LimitClass::kSecurity:
      return "security";
    case LimitClass::kContract:
      return "contract";
    case LimitClass::kBilling:
      return "billing";
    case LimitClass::kCapacity:
      return "capacity";
  }
  return "unknown";
}

std::optional<LimitClass> ParseLimitClass(std::string_view name) {
  for (LimitClass c : {LimitClass::kSecurity, LimitClass::kContract, LimitClass::kBilling,
                       LimitClass::kCapacity}) {
    if (LimitClassName(c) == name) return c;
  }
  return std::nullopt;
}

std::string_view LeaseModeName(LeaseMode m) { return m == LeaseMode::kLease ? "lease" : "strict"; }

std::string_view ScopeName(Scope s) { return s == Scope::kRegion ? "region" : "global"; }

int64_t Policy::CostOf(std::string_view operation) const {
  for (const auto& [op, cost] : costs) {
    if (op == operation) return cost;
  }
  return 1;
}

int64_t Policy::LeaseSize() const {
  if (lease.size > 0) return lease.size;
  const int64_t l = rate.limit();
  const int64_t w = rate.window_ms();
  const int64_t per_second = l / w * 1000 + l % w * 1000 / w;  // no overflow for L*W < 2^60
  return std::clamp<int64_t>(per_second / 5, 1, rate.burst());
}

const Policy* PolicySet::Find(std::string_view name) const {
  for (const Policy& p : policies_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

bool PolicySet::LeasesAlike(const Policy& policy, std::string_view operation) const {
  const int64_t cost = operation.empty() ? 0 : policy.CostOf(operation);
  for (const Policy* q = &policy; q != nullptr; q = Parent(*q)) {
    if (q->mode != LeaseMode::kLease) return false;
    if (!operation.empty() && q->CostOf(operation) != cost) return false;
  }
  return true;
}

std::vector<const Policy*> PolicySet::Chain(const Policy& policy) const {
  std::vector<const Policy*> chain{&policy};
  for (int i = policy.parent_index; i >= 0; i = policies_[static_cast<size_t>(i)].parent_index) {
    chain.push_back(&policies_[static_cast<size_t>(i)]);
  }
  return chain;
}

}  // namespace limiter
