#include "common/rate.h"

namespace limiter {

Status Rate::Validate(int64_t limit, int64_t window_ms, int64_t burst) {
  if (limit <= 0) return Error{"limit must be a positive integer, got " + std::to_string(limit)};
  if (window_ms <= 0) {
    return Error{"window must be at least 1 ms, got " + std::to_string(window_ms)};
  }
  if (window_ms > kMaxWindowMs) {
    return Error{"window must be at most 400 days, got " + std::to_string(window_ms) + " ms"};
  }
  if (burst <= 0) return Error{"burst must be a positive integer, got " + std::to_string(burst)};
  if (limit > kMaxScaled / window_ms || burst > kMaxScaled / window_ms) {
    return Error{"limit (or burst) times window in ms must stay below 2^60, got " +
                 std::to_string(limit > burst ? limit : burst) + " x " + std::to_string(window_ms)};
  }
  return Status::Ok();
}

Rate::Rate(int64_t limit, int64_t window_ms, int64_t burst)
    : limit_(limit), window_ms_(window_ms), burst_(burst) {
  const Status valid = Validate(limit, window_ms, burst);
  LIMITER_CHECK(valid.ok(), "invalid Rate: " + valid.error());
  capacity_scaled_ = burst * window_ms;
  refill_ms_ = (capacity_scaled_ + limit - 1) / limit;
  interval_ms_ = window_ms / limit;
  interval_rem_ = window_ms % limit;
}

}  // namespace limiter
