// LimitDecision: the answer every algorithm gives for one request on one limit (a request's
// whole answer, over every limit it names, is the gateway's client::Decision).
#pragma once

#include <cstdint>

namespace limiter {

// retry_after_ms for a cost that can never be admitted (it exceeds the limit or burst).
inline constexpr int64_t kNever = INT64_MAX;

struct LimitDecision {
  bool allowed = false;
  // Cost units that would be admitted right now, after this decision was applied.
  int64_t remaining = 0;
  // 0 when allowed. When denied: the same request repeated exactly this much later, with
  // nothing in between, is admitted; kNever if it never can be.
  int64_t retry_after_ms = 0;
  // Time until the key is back to its full allowance if nothing else is admitted.
  int64_t reset_after_ms = 0;
};

}  // namespace limiter
