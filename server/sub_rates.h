// The arithmetic of splitting a key: sub-bucket i of k holds L/k and B/k, the remainders
// spread over the first sub-buckets, so that the sub-buckets' limits sum to L and B.
#pragma once

#include <optional>

#include "common/key_limiter.h"
#include "common/policy.h"
#include "common/rate.h"

namespace limiter {

// The share of sub-bucket `index` of `k`, or nullopt when the limit is too small to give
// every sub-bucket at least one unit.
inline std::optional<Rate> SubRate(const Policy& p, int k, int index) {
  const int64_t l = p.rate.limit() / k + (index < p.rate.limit() % k ? 1 : 0);
  const int64_t b = p.rate.burst() / k + (index < p.rate.burst() % k ? 1 : 0);
  if (l < 1 || b < 1 || !Rate::Validate(l, p.rate.window_ms(), b).ok()) return std::nullopt;
  return Rate(l, p.rate.window_ms(), b);
}

}  // namespace limiter
