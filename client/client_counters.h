// What a gateway counts as it decides: shared by the client core and its parts (lease
// buckets, fallbacks), read by client::Client::counters(). Atomics, relaxed: any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "limiter/client/client.h"

namespace limiter {

struct ClientCounters {
  std::atomic<uint64_t> decisions{0}, allowed{0}, denied{0};
  std::array<std::atomic<uint64_t>, 3> by_source{};
  std::array<std::atomic<uint64_t>, 4> fallback_by_class{};
  std::atomic<uint64_t> store_calls{0}, store_errors{0}, deadline_misses{0}, wrong_owner{0};
  std::atomic<uint64_t> leases{0}, units_leased{0}, units_expired{0}, units_returned{0};
  std::atomic<uint64_t> late_grants_kept{0};
  std::atomic<uint64_t> split_redirects{0}, rings_adopted{0};
  std::atomic<uint64_t> split_changed{0}, split_fallbacks{0}, split_waits{0};
  std::atomic<uint64_t> split_waits_missed{0};
  // Billing debts: units leased back from their owners, and units admitted that will never
  // be charged, by reason (the order of client::Counters::billing_debt_units_dropped_by_reason).
  enum BillingDrop : size_t { kUnrecorded = 0, kPolicyGone = 1, kRefused = 2 };
  std::atomic<uint64_t> billing_units_paid{0};
  std::array<std::atomic<uint64_t>, 3> billing_units_dropped{};

  // One decision handed to a caller.
  void Count(const client::Decision& d) {
    decisions.fetch_add(1, std::memory_order_relaxed);
    (d.allowed ? allowed : denied).fetch_add(1, std::memory_order_relaxed);
    by_source[static_cast<size_t>(d.source)].fetch_add(1, std::memory_order_relaxed);
  }
  static void Add(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  // Into the public struct (the parts add their own).
  void CopyTo(client::Counters& c) const;
};

}  // namespace limiter
