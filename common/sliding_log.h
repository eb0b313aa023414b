// Sliding log: remembers every admitted cost in the last window; exact, at the price of up to
// L entries per key (fewer when requests share a millisecond or cost more than one).
#pragma once

#include <cstdint>
#include <deque>

#include "common/decision.h"
#include "common/rate.h"

namespace limiter {

// Admit iff (admitted cost in (now-W, now]) + cost <= L. Same preconditions and functions as
// the algorithms in algorithms.h.
struct SlidingLog {
  struct Entry {
    int64_t t_ms;
    int64_t cost;  // admitted cost at t_ms, merged per millisecond
  };
  struct State {
    std::deque<Entry> entries;  // oldest first, all within (now-W, now]
    int64_t total = 0;          // sum of entries[].cost
    int64_t seen_ms = 0;        // the latest time the log was moved to (entries dropped)
  };
  static Decision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
  static bool IsFresh(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t InEffect(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t Refund(const Rate& rate, State& state, int64_t now_ms, int64_t amount,
                        int64_t charged_at_ms);
};

}  // namespace limiter
