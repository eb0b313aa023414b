// The rate-limiting algorithms with constant-size state per key.
//
// Every algorithm is a pure function of (rate, state, now, cost): time is an argument, never
// read here, and all arithmetic is exact in 64-bit integers (see Rate for the scaling).
// Preconditions for every function: the Rate is valid, cost and units >= 1 and now_ms >= 0. A
// default-constructed State is a fresh key with its full allowance. Decide changes the state
// only when it admits, apart from bookkeeping (refill, window roll) that changes no later
// decision.
//
// Time never runs backwards for a key: a `now` earlier than the time the state was last moved
// to (a window's start, a bucket's last refill, a log's newest entry) is taken as that time,
// so a caller that read its clock before waiting for the key's lock cannot take the key back
// to an earlier window. GCRA needs no such time: its TAT is always later than its last
// admission, so an earlier `now` only makes it stricter.
//
// Besides Decide, each algorithm has:
//   IsFresh(rate, state, now): the state decides exactly like a fresh one from now on, so it
//     carries no information and can be dropped (an idle key expires by itself);
//   InEffect(rate, state, now): how much of what was charged still has an effect on later
//     decisions (a bucket's missing tokens, a window's count), in charge units: a bucket's
//     contents are scaled by W, so that a refund can give back part of a token exactly; a
//     window counts cost units (KeyLimiter::ChargeScale). It only falls as time passes,
//     until the next admission;
//   Refund(rate, state, now, amount, charged_at): gives back up to `amount` charge units that
//     were charged at charged_at and never spent, exactly as if they had never been charged,
//     and says how many it gave back: never more than is in effect, and never into a window
//     they were not charged to. Which units are still owed is the lease book's business
//     (lease_book.h).
#pragma once

#include <cstdint>

#include "common/limit_decision.h"
#include "common/rate.h"

namespace limiter {

// Windows [kW, (k+1)W) counted from t = 0; admit iff count + cost <= L.
struct FixedWindow {
  struct State {
    int64_t window_start_ms = 0;
    int64_t count = 0;
  };
  static LimitDecision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
  static bool IsFresh(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t InEffect(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t Refund(const Rate& rate, State& state, int64_t now_ms, int64_t amount,
                        int64_t charged_at_ms);
};

// Two fixed windows, the previous one weighted by how much of it the sliding window still
// overlaps: admit iff prev*(W-elapsed) + (curr+cost-1)*W < L*W.
struct SlidingWindow {
  // The counts are 32-bit so that the state fits in 16 bytes; limits above this are refused.
  static constexpr int64_t kMaxLimit = UINT32_MAX;
  struct State {
    int64_t window_start_ms = 0;
    uint32_t curr = 0;
    uint32_t prev = 0;
  };
  static LimitDecision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
  static bool IsFresh(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t InEffect(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t Refund(const Rate& rate, State& state, int64_t now_ms, int64_t amount,
                        int64_t charged_at_ms);
};

// Capacity B, refilled continuously at L per W, starts full; admit iff tokens >= cost.
struct TokenBucket {
  static constexpr int64_t kFresh = INT64_MIN;
  struct State {
    int64_t tokens_scaled = 0;  // tokens * W
    int64_t last_ms = kFresh;   // kFresh: never used, so full
  };
  static LimitDecision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
  static bool IsFresh(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t InEffect(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t Refund(const Rate& rate, State& state, int64_t now_ms, int64_t amount,
                        int64_t charged_at_ms);
};

// Generic cell rate algorithm: one theoretical arrival time (TAT) per key, emission interval
// T = W/L, tolerance (B-1)*T. Admits exactly what TokenBucket admits. The TAT is rational
// (W/L need not be an integer), so it is kept as whole ms plus a remainder in 1/L ms.
struct Gcra {
  struct State {
    int64_t tat_ms = 0;
    int64_t tat_frac = 0;  // in [0, L)
  };
  static LimitDecision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
  static bool IsFresh(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t InEffect(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t Refund(const Rate& rate, State& state, int64_t now_ms, int64_t amount,
                        int64_t charged_at_ms);
};

// Leaky bucket as a meter: the level drains at L per W; admit iff level + cost <= B.
struct LeakyBucket {
  struct State {
    int64_t level_scaled = 0;  // level * W
    int64_t last_ms = 0;
  };
  static LimitDecision Decide(const Rate& rate, State& state, int64_t now_ms, int64_t cost);
  static bool IsFresh(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t InEffect(const Rate& rate, const State& state, int64_t now_ms);
  static int64_t Refund(const Rate& rate, State& state, int64_t now_ms, int64_t amount,
                        int64_t charged_at_ms);
};

// The store keeps every state in 16 bytes.
static_assert(sizeof(FixedWindow::State) == 16 && sizeof(SlidingWindow::State) == 16 &&
              sizeof(TokenBucket::State) == 16 && sizeof(Gcra::State) == 16 &&
              sizeof(LeakyBucket::State) == 16);

}  // namespace limiter
