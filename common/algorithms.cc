#include "common/algorithms.h"

#include <algorithm>

namespace limiter {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }  // a >= 0, b > 0

// Smallest elapsed e in [0, W) at which
//   prev*(W-e) + (used+cost-1)*W < L*W
// holds, or W when no e in the window does. The left side falls as e grows.
int64_t FirstFit(int64_t prev, int64_t used, int64_t cost, int64_t limit, int64_t w) {
  if (cost > limit - used) return w;  // (used+cost-1)*W >= L*W already
  const int64_t room = (limit - used - cost + 1) * w;
  if (prev == 0) return 0;
  // prev*(W-e) < room  <=>  W-e <= ceil(room/prev) - 1
  return std::max<int64_t>(w - CeilDiv(room, prev) + 1, 0);
}

}  // namespace

Decision FixedWindow::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  const int64_t w = rate.window_ms();
  const int64_t start = now - now % w;
  if (start != s.window_start_ms) {
    s.window_start_ms = start;
    s.count = 0;
  }
  const int64_t until_next = start + w - now;
  Decision d;
  if (cost <= rate.limit() - s.count) {
    s.count += cost;
    d.allowed = true;
  } else {
    d.retry_after_ms = cost > rate.limit() ? kNever : until_next;
  }
  d.remaining = rate.limit() - s.count;
  d.reset_after_ms = s.count == 0 ? 0 : until_next;
  return d;
}

Decision SlidingWindow::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  const int64_t w = rate.window_ms();
  const int64_t limit = rate.limit();
  const int64_t start = now - now % w;
  if (start != s.window_start_ms) {
    s.prev = start == s.window_start_ms + w ? s.curr : 0;
    s.curr = 0;
    s.window_start_ms = start;
  }
  const int64_t elapsed = now - start;
  const int64_t here = FirstFit(s.prev, s.curr, cost, limit, w);
  Decision d;
  if (here <= elapsed) {
    s.curr += cost;
    d.allowed = true;
  } else if (here < w) {
    d.retry_after_ms = here - elapsed;
  } else if (const int64_t next = FirstFit(s.curr, 0, cost, limit, w); next < w) {
    d.retry_after_ms = w + next - elapsed;  // next window: this one becomes prev
  } else {
    d.retry_after_ms = cost > limit ? kNever : 2 * w - elapsed;  // both windows empty
  }
  const int64_t room = (limit - s.curr) * w - s.prev * (w - elapsed);
  d.remaining = room > 0 ? CeilDiv(room, w) : 0;
  d.reset_after_ms = s.curr > 0 ? 2 * w - elapsed : s.prev > 0 ? w - elapsed : 0;
  return d;
}

Decision TokenBucket::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  const int64_t cap = rate.capacity_scaled();
  if (s.last_ms == kFresh) {
    s.tokens_scaled = cap;
    s.last_ms = now;
  } else if (now > s.last_ms) {
    const int64_t elapsed = now - s.last_ms;
    s.tokens_scaled = elapsed >= rate.refill_ms()
                          ? cap
                          : std::min(cap, s.tokens_scaled + elapsed * rate.limit());
    s.last_ms = now;
  }
  Decision d;
  if (cost > rate.burst()) {
    d.retry_after_ms = kNever;
  } else if (const int64_t need = cost * rate.window_ms(); s.tokens_scaled >= need) {
    s.tokens_scaled -= need;
    d.allowed = true;
  } else {
    d.retry_after_ms = CeilDiv(need - s.tokens_scaled, rate.limit());
  }
  d.remaining = s.tokens_scaled / rate.window_ms();
  d.reset_after_ms = CeilDiv(cap - s.tokens_scaled, rate.limit());
  return d;
}

Decision Gcra::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  const int64_t limit = rate.limit();
  const int64_t cap = rate.capacity_scaled();
  // The earliest a request can be scheduled: max(TAT, now).
  int64_t base_ms = s.tat_ms;
  int64_t base_frac = s.tat_frac;
  if (base_ms < now) {
    base_ms = now;
    base_frac = 0;
  }
  Decision d;
  if (cost <= rate.burst()) {
    int64_t inc_ms = rate.interval_ms();
    int64_t inc_frac = rate.interval_rem();
    if (cost != 1) {
      const int64_t scaled = cost * rate.window_ms();
      inc_ms = scaled / limit;
      inc_frac = scaled % limit;
    }
    int64_t tat_ms = base_ms + inc_ms;
    int64_t tat_frac = base_frac + inc_frac;
    if (tat_frac >= limit) {
      tat_frac -= limit;
      ++tat_ms;
    }
    // Conforming iff new TAT - now <= B*T, compared in 1/L ms.
    const int64_t ahead = (tat_ms - now) * limit + tat_frac;
    if (ahead <= cap) {
      s.tat_ms = base_ms = tat_ms;
      s.tat_frac = base_frac = tat_frac;
      d.allowed = true;
    } else {
      d.retry_after_ms = CeilDiv(ahead - cap, limit);
    }
  } else {
    d.retry_after_ms = kNever;
  }
  const int64_t ahead = (base_ms - now) * limit + base_frac;
  d.remaining = (cap - ahead) / rate.window_ms();
  d.reset_after_ms = (base_ms - now) + (base_frac > 0 ? 1 : 0);
  return d;
}

Decision LeakyBucket::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  const int64_t cap = rate.capacity_scaled();
  if (now > s.last_ms) {
    const int64_t elapsed = now - s.last_ms;
    s.level_scaled = elapsed >= rate.refill_ms()
                         ? 0
                         : std::max<int64_t>(0, s.level_scaled - elapsed * rate.limit());
    s.last_ms = now;
  }
  Decision d;
  if (cost > rate.burst()) {
    d.retry_after_ms = kNever;
  } else if (const int64_t add = cost * rate.window_ms(); s.level_scaled + add <= cap) {
    s.level_scaled += add;
    d.allowed = true;
  } else {
    d.retry_after_ms = CeilDiv(s.level_scaled + add - cap, rate.limit());
  }
  d.remaining = (cap - s.level_scaled) / rate.window_ms();
  d.reset_after_ms = CeilDiv(s.level_scaled, rate.limit());
  return d;
}

}  // namespace limiter
