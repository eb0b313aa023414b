#include "client/client_counters.h"

namespace limiter {

void ClientCounters::CopyTo(client::Counters& c) const {
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  c.decisions = get(decisions);
  c.allowed = get(allowed);
  c.denied = get(denied);
  for (size_t i = 0; i < 3; ++i) c.by_source[i] = get(by_source[i]);
  for (size_t i = 0; i < 4; ++i) c.fallback_by_class[i] = get(fallback_by_class[i]);
  c.store_calls = get(store_calls);
  c.store_errors = get(store_errors);
  c.deadline_misses = get(deadline_misses);
  c.wrong_owner = get(wrong_owner);
  c.leases = get(leases);
  c.units_leased = get(units_leased);
  c.units_returned = get(units_returned);
  c.units_expired = get(units_expired);
  c.late_grants_kept = get(late_grants_kept);
  c.split_redirects = get(split_redirects);
  c.split_changed = get(split_changed);
  c.split_fallbacks = get(split_fallbacks);
  c.split_waits = get(split_waits);
  c.split_waits_missed = get(split_waits_missed);
  c.billing_debt_units_paid = get(billing_units_paid);
  c.billing_debt_units_dropped = 0;
  for (size_t i = 0; i < 3; ++i) {
    c.billing_debt_units_dropped_by_reason[i] = get(billing_units_dropped[i]);
    c.billing_debt_units_dropped += c.billing_debt_units_dropped_by_reason[i];
  }
}

}  // namespace limiter
