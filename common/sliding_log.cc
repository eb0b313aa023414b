#include "common/sliding_log.h"

namespace limiter {

Decision SlidingLog::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  const int64_t w = rate.window_ms();
  const int64_t limit = rate.limit();
  while (!s.entries.empty() && s.entries.front().t_ms <= now - w) {
    s.total -= s.entries.front().cost;
    s.entries.pop_front();
  }
  Decision d;
  if (cost <= limit - s.total) {
    if (!s.entries.empty() && s.entries.back().t_ms == now) {
      s.entries.back().cost += cost;
    } else {
      s.entries.push_back({now, cost});
    }
    s.total += cost;
    d.allowed = true;
  } else if (cost > limit) {
    d.retry_after_ms = kNever;
  } else {
    // Entries leave the window W after they were admitted; wait until enough have left.
    int64_t left = s.total;
    for (const Entry& e : s.entries) {
      left -= e.cost;
      if (cost <= limit - left) {
        d.retry_after_ms = e.t_ms + w - now;
        break;
      }
    }
  }
  d.remaining = limit - s.total;
  d.reset_after_ms = s.entries.empty() ? 0 : s.entries.back().t_ms + w - now;
  return d;
}

}  // namespace limiter
