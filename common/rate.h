// Rate: the numbers a limit is made of (L per W ms, burst B), validated once so that the
// algorithms can do exact 64-bit integer arithmetic, with no overflow checks and no division
// on the hot path.
#pragma once

#include <cstdint>
#include <string>

#include "limiter/status.h"

namespace limiter {

// The most one request may cost. Keeps sums of costs far from overflow; a cost above a limit's
// burst is simply never admitted.
inline constexpr int64_t kMaxCost = 1'000'000'000;

class Rate {
 public:
  // Bound on limit*window and burst*window; keeps every intermediate below 2^63.
  static constexpr int64_t kMaxScaled = int64_t{1} << 60;
  static constexpr int64_t kMaxWindowMs = int64_t{400} * 24 * 3600 * 1000;  // 400 days

  // Ok when these numbers can be a Rate, else why they cannot.
  static Status Validate(int64_t limit, int64_t window_ms, int64_t burst);

  // 1 per second, burst 1. Spelled out: default Rates are made per operation on the nodes'
  // hot path, where the validating constructor's checks would cost.
  constexpr Rate()
      : limit_(1),
        window_ms_(1000),
        burst_(1),
        capacity_scaled_(1000),
        refill_ms_(1000),
        interval_ms_(1000),
        interval_rem_(0) {}
  // Precondition: Validate(limit, window_ms, burst) is ok (checked with a crash otherwise).
  Rate(int64_t limit, int64_t window_ms, int64_t burst);

  int64_t limit() const { return limit_; }          // L: cost units per window
  int64_t window_ms() const { return window_ms_; }  // W
  int64_t burst() const { return burst_; }          // B: capacity of the bucket algorithms

  // Bucket contents are kept "scaled": one cost unit is W scaled units, and L scaled units
  // refill per ms, so continuous refill at L/W per ms is exact in integers.
  int64_t capacity_scaled() const { return capacity_scaled_; }  // B*W
  int64_t limit_scaled() const { return limit_ * window_ms_; }  // L*W
  // ceil(B*W / L): after this long without admissions, a bucket is full again.
  int64_t refill_ms() const { return refill_ms_; }
  // The emission interval T = W/L as quotient and remainder (GCRA).
  int64_t interval_ms() const { return interval_ms_; }
  int64_t interval_rem() const { return interval_rem_; }

  friend bool operator==(const Rate& a, const Rate& b) {
    return a.limit_ == b.limit_ && a.window_ms_ == b.window_ms_ && a.burst_ == b.burst_;
  }

 private:
  int64_t limit_;
  int64_t window_ms_;
  int64_t burst_;
  int64_t capacity_scaled_;
  int64_t refill_ms_;
  int64_t interval_ms_;
  int64_t interval_rem_;
};

}  // namespace limiter
