#include "common/sliding_log.h"

#include <algorithm>

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

bool SlidingLog::IsFresh(const Rate& rate, const State& s, int64_t now) {
  return s.entries.empty() || s.entries.back().t_ms <= now - rate.window_ms();
}

void SlidingLog::Return(const Rate&, State& s, int64_t, int64_t units, int64_t leased_at) {
  for (auto it = s.entries.begin(); it != s.entries.end(); ++it) {
    if (it->t_ms != leased_at) continue;
    const int64_t back = std::min(units, it->cost);
    it->cost -= back;
    s.total -= back;
    if (it->cost == 0) s.entries.erase(it);
    return;
  }
}

}  // namespace limiter
