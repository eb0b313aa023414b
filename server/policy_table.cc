#include "server/policy_table.h"

#include <xxhash.h>

#include <string>

#include "protocol/rules.h"

namespace limiter {

PolicyTable::PolicyTable(const PolicySet& policies, bool durable_store, bool regions)
    : set_(policies) {
  const size_t n = policies.policies().size();
  durable_.assign(n, false);
  global_.assign(n, false);
  leased_.assign(n, false);
  parent_.assign(n, false);
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    const Policy& p = policies.policies()[i];
    index_.emplace(p.name, static_cast<int>(i));
    id_seeds_.push_back(protocol::PolicyIdSeed(p));
    durable_[i] = durable_store && p.durable;
    global_[i] = regions && p.scope == Scope::kGlobal;
    calendars_ = calendars_ || p.calendar != nullptr;
    if (p.parent_index >= 0) parent_[static_cast<size_t>(p.parent_index)] = true;
    if (p.mode == LeaseMode::kLease) {
      for (const Policy* q : policies.Chain(p)) {
        leased_[static_cast<size_t>(q - policies.policies().data())] = true;
      }
    }
    text += p.name + '\n' + std::to_string(static_cast<int>(p.algorithm)) + ' ' +
            std::to_string(static_cast<int>(p.scope)) + ' ' + std::to_string(p.rate.limit()) + ' ' +
            std::to_string(p.rate.window_ms()) + ' ' + std::to_string(p.rate.burst()) + ' ' +
            std::to_string(p.parent_index) + '\n';
  }
  digest_ = XXH3_64bits(text.data(), text.size());
}

}  // namespace limiter
