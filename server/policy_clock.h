// The clock a policy's keys run on. Every policy's keys use the node's monotonic clock, except
// those of a calendar window (`align: calendar`), which use their calendar's window time: the
// wall clock mapped so that calendar windows line up (common/calendar.h). The wall clock is
// read for those policies only.
#pragma once

#include <cstdint>

#include "common/calendar.h"
#include "common/clock.h"
#include "common/policy.h"

namespace limiter {

inline int64_t PolicyNowMs(const Policy& policy, const Clock& clock) {
  return policy.calendar ? policy.calendar->ToWindowTime(clock.WallMs()) : clock.NowMs();
}

// A span of the policy's time from `now` (a retry or reset wait) as wall milliseconds.
inline int64_t PolicySpanMs(const Policy& policy, int64_t now, int64_t span) {
  return policy.calendar ? policy.calendar->ToWallDuration(now, span) : span;
}

}  // namespace limiter
