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

// Moves the two windows up to the one holding `now`; returns its start.
int64_t Roll(SlidingWindow::State& s, int64_t now, int64_t w) {
  const int64_t start = now - now % w;
  if (start != s.window_start_ms) {
    s.prev = start == s.window_start_ms + w ? s.curr : 0;
    s.curr = 0;
    s.window_start_ms = start;
  }
  return start;
}

// Adds what flowed in since last_ms to a bucket of `cap` filled at L scaled units per ms
// (a token bucket's tokens; a leaky bucket's free room), capped at cap.
int64_t Refilled(const Rate& rate, int64_t amount, int64_t elapsed) {
  const int64_t cap = rate.capacity_scaled();
  return elapsed >= rate.refill_ms() ? cap : std::min(cap, amount + elapsed * rate.limit());
}

void Refill(const Rate& rate, TokenBucket::State& s, int64_t now) {
  if (s.last_ms == TokenBucket::kFresh) {
    s.tokens_scaled = rate.capacity_scaled();
    s.last_ms = now;
  } else if (now > s.last_ms) {
    s.tokens_scaled = Refilled(rate, s.tokens_scaled, now - s.last_ms);
    s.last_ms = now;
  }
}

void Drain(const Rate& rate, LeakyBucket::State& s, int64_t now) {
  if (now > s.last_ms) {
    const int64_t cap = rate.capacity_scaled();
    s.level_scaled = cap - Refilled(rate, cap - s.level_scaled, now - s.last_ms);
    s.last_ms = now;
  }
}

}  // namespace

LimitDecision FixedWindow::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  now = std::max(now, s.window_start_ms);
  const int64_t w = rate.window_ms();
  const int64_t start = now - now % w;
  if (start != s.window_start_ms) {
    s.window_start_ms = start;
    s.count = 0;
  }
  const int64_t until_next = start + w - now;
  LimitDecision d;
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

bool FixedWindow::IsFresh(const Rate& rate, const State& s, int64_t now) {
  return s.count == 0 || now - s.window_start_ms >= rate.window_ms();
}

int64_t FixedWindow::InEffect(const Rate& rate, const State& s, int64_t now) {
  return IsFresh(rate, s, now) ? 0 : s.count;
}

int64_t FixedWindow::Refund(const Rate& rate, State& s, int64_t now, int64_t amount,
                            int64_t charged_at) {
  const int64_t w = rate.window_ms();
  if (charged_at - charged_at % w != s.window_start_ms || IsFresh(rate, s, now)) return 0;
  const int64_t back = std::min(amount, s.count);
  s.count -= back;
  return back;
}

LimitDecision SlidingWindow::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  now = std::max(now, s.window_start_ms);
  const int64_t w = rate.window_ms();
  const int64_t limit = rate.limit();
  const int64_t elapsed = now - Roll(s, now, w);
  const int64_t here = FirstFit(s.prev, s.curr, cost, limit, w);
  LimitDecision d;
  if (here <= elapsed) {
    s.curr = static_cast<uint32_t>(s.curr + cost);  // <= L <= kMaxLimit
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

bool SlidingWindow::IsFresh(const Rate& rate, const State& s, int64_t now) {
  const int64_t w = rate.window_ms();
  const int64_t age = std::max(now, s.window_start_ms) - s.window_start_ms;
  return (s.curr == 0 && (s.prev == 0 || age >= w)) || age >= 2 * w;
}

int64_t SlidingWindow::InEffect(const Rate& rate, const State& s, int64_t now) {
  const int64_t w = rate.window_ms();
  const int64_t age = std::max(now, s.window_start_ms) - s.window_start_ms;
  return age < w ? int64_t{s.curr} + s.prev : age < 2 * w ? int64_t{s.curr} : 0;
}

int64_t SlidingWindow::Refund(const Rate& rate, State& s, int64_t now, int64_t amount,
                              int64_t charged_at) {
  const int64_t w = rate.window_ms();
  const int64_t start = Roll(s, std::max(now, s.window_start_ms), w);
  const int64_t charged_window = charged_at - charged_at % w;
  uint32_t* count = charged_window == start       ? &s.curr
                    : charged_window == start - w ? &s.prev
                                                  : nullptr;
  if (count == nullptr) return 0;
  const int64_t back = std::min<int64_t>(amount, *count);
  *count -= static_cast<uint32_t>(back);
  return back;
}

LimitDecision TokenBucket::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  const int64_t cap = rate.capacity_scaled();
  Refill(rate, s, now);
  LimitDecision d;
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

bool TokenBucket::IsFresh(const Rate& rate, const State& s, int64_t now) {
  return s.last_ms == kFresh ||
         Refilled(rate, s.tokens_scaled, std::max<int64_t>(0, now - s.last_ms)) ==
             rate.capacity_scaled();
}

int64_t TokenBucket::InEffect(const Rate& rate, const State& s, int64_t now) {
  if (s.last_ms == kFresh) return 0;
  const int64_t elapsed = std::max<int64_t>(0, now - s.last_ms);
  return rate.capacity_scaled() - Refilled(rate, s.tokens_scaled, elapsed);
}

int64_t TokenBucket::Refund(const Rate& rate, State& s, int64_t now, int64_t amount, int64_t) {
  if (s.last_ms == kFresh) return 0;
  Refill(rate, s, now);
  const int64_t back = std::min(amount, rate.capacity_scaled() - s.tokens_scaled);
  s.tokens_scaled += back;
  return back;
}

LimitDecision Gcra::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  const int64_t limit = rate.limit();
  const int64_t cap = rate.capacity_scaled();
  // The earliest a request can be scheduled: max(TAT, now).
  int64_t base_ms = s.tat_ms;
  int64_t base_frac = s.tat_frac;
  if (base_ms < now) {
    base_ms = now;
    base_frac = 0;
  }
  LimitDecision d;
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

bool Gcra::IsFresh(const Rate&, const State& s, int64_t now) {
  return s.tat_ms < now || (s.tat_ms == now && s.tat_frac == 0);
}

// TAT - now in 1/L ms: the missing tokens, scaled by W.
int64_t Gcra::InEffect(const Rate& rate, const State& s, int64_t now) {
  return IsFresh(rate, s, now) ? 0 : (s.tat_ms - now) * rate.limit() + s.tat_frac;
}

int64_t Gcra::Refund(const Rate& rate, State& s, int64_t now, int64_t amount, int64_t) {
  const int64_t ahead = InEffect(rate, s, now);
  const int64_t back = std::min(amount, ahead);
  const int64_t left = ahead - back;
  if (back > 0) {
    s.tat_ms = now + left / rate.limit();
    s.tat_frac = left % rate.limit();
  }
  return back;
}

LimitDecision LeakyBucket::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  const int64_t cap = rate.capacity_scaled();
  Drain(rate, s, now);
  LimitDecision d;
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

bool LeakyBucket::IsFresh(const Rate& rate, const State& s, int64_t now) {
  const int64_t cap = rate.capacity_scaled();
  return Refilled(rate, cap - s.level_scaled, std::max<int64_t>(0, now - s.last_ms)) == cap;
}

int64_t LeakyBucket::InEffect(const Rate& rate, const State& s, int64_t now) {
  const int64_t cap = rate.capacity_scaled();
  const int64_t elapsed = std::max<int64_t>(0, now - s.last_ms);
  return cap - Refilled(rate, cap - s.level_scaled, elapsed);
}

int64_t LeakyBucket::Refund(const Rate& rate, State& s, int64_t now, int64_t amount, int64_t) {
  Drain(rate, s, now);
  const int64_t back = std::min(amount, s.level_scaled);
  s.level_scaled -= back;
  return back;
}

}  // namespace limiter
