// The rate-limiting algorithms with constant-size state per key.
//
// Every algorithm is a pure function of (rate, state, now, cost): time is an argument, never
// read here, and all arithmetic is exact in 64-bit integers (see Rate for the scaling).
// Preconditions for every Decide: the Rate is valid, cost >= 1, now_ms >= 0 and now_ms does
// not decrease for one state. A default-constructed State is a fresh key with its full
// allowance. The state is changed only when the request is admitted, apart from bookkeeping
// (refill, window roll) that does not change any later decision.
#pragma once

#include <cstdint>

#include "common/decision.h"
#include "common/rate.h"

namespace limiter {

// Windows [kW, (k+1)W) counted from t = 0; admit iff count + cost <= L.
struct FixedWindow {
  struct State {
    int64_t window_start_ms = 0;
    int64_t count = 0;
  };
  static Decision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
};

// Two fixed windows, the previous one weighted by how much of it the sliding window still
// overlaps: admit iff prev*(W-elapsed) + (curr+cost-1)*W < L*W.
struct SlidingWindow {
  struct State {
    int64_t window_start_ms = 0;
    int64_t curr = 0;
    int64_t prev = 0;
  };
  static Decision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
};

// Capacity B, refilled continuously at L per W, starts full; admit iff tokens >= cost.
struct TokenBucket {
  static constexpr int64_t kFresh = INT64_MIN;
  struct State {
    int64_t tokens_scaled = 0;  // tokens * W
    int64_t last_ms = kFresh;   // kFresh: never used, so full
  };
  static Decision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
};

// Generic cell rate algorithm: one theoretical arrival time (TAT) per key, emission interval
// T = W/L, tolerance (B-1)*T. Admits exactly what TokenBucket admits. The TAT is rational
// (W/L need not be an integer), so it is kept as whole ms plus a remainder in 1/L ms.
struct Gcra {
  struct State {
    int64_t tat_ms = 0;
    int64_t tat_frac = 0;  // in [0, L)
  };
  static Decision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
};

// Leaky bucket as a meter: the level drains at L per W; admit iff level + cost <= B.
struct LeakyBucket {
  struct State {
    int64_t level_scaled = 0;  // level * W
    int64_t last_ms = 0;
  };
  static Decision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
};

static_assert(sizeof(TokenBucket::State) <= 16 && sizeof(Gcra::State) <= 16);

}  // namespace limiter
