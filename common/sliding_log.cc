#include "common/sliding_log.h"

#include <algorithm>

namespace limiter {

Decision SlidingLog::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  now = std::max(now, s.seen_ms);
  s.seen_ms = now;
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
  now = std::max(now, s.seen_ms);
  return s.entries.empty() || s.entries.back().t_ms <= now - rate.window_ms();
}

int64_t SlidingLog::InEffect(const Rate& rate, const State& s, int64_t now) {
  now = std::max(now, s.seen_ms);
  int64_t in_window = s.total;
  for (const Entry& e : s.entries) {
    if (e.t_ms > now - rate.window_ms()) break;
    in_window -= e.cost;
  }
  return in_window;
}

int64_t SlidingLog::Refund(const Rate& rate, State& s, int64_t now, int64_t amount,
                           int64_t charged_at) {
  now = std::max(now, s.seen_ms);
  if (charged_at <= now - rate.window_ms()) return 0;  // out of the window: no effect left
  for (auto it = s.entries.begin(); it != s.entries.end(); ++it) {
    if (it->t_ms != charged_at) continue;
    const int64_t back = std::min(amount, it->cost);
    it->cost -= back;
    s.total -= back;
    if (it->cost == 0) s.entries.erase(it);
    return back;
  }
  return 0;
}

}  // namespace limiter
