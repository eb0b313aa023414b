#include "common/sliding_log.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace limiter {

SlidingLog::Entries::Entries(const Entries& other) { *this = other; }

SlidingLog::Entries& SlidingLog::Entries::operator=(const Entries& other) {
  if (this == &other) return *this;
  buf_.reset(other.capacity_ ? new Entry[other.capacity_] : nullptr);
  capacity_ = other.capacity_;
  head_ = 0;
  size_ = other.size_;
  for (size_t i = 0; i < size_; ++i) buf_[i] = other[i];
  return *this;
}

SlidingLog::Entries::Entries(Entries&& other) noexcept { *this = std::move(other); }

SlidingLog::Entries& SlidingLog::Entries::operator=(Entries&& other) noexcept {
  if (this == &other) return *this;
  buf_ = std::move(other.buf_);
  head_ = std::exchange(other.head_, 0);
  size_ = std::exchange(other.size_, 0);
  capacity_ = std::exchange(other.capacity_, 0);
  return *this;
}

void SlidingLog::Entries::Grow() { Reallocate(std::max(kMinCapacity, capacity_ * 2)); }

void SlidingLog::Entries::erase(size_t i) {
  for (; i + 1 < size_; ++i) (*this)[i] = (*this)[i + 1];
  --size_;
}

void SlidingLog::Entries::Reallocate(size_t capacity) {
  assert(capacity >= size_ && (capacity & (capacity - 1)) == 0);
  std::unique_ptr<Entry[]> buf(capacity ? new Entry[capacity] : nullptr);
  for (size_t i = 0; i < size_; ++i) buf[i] = (*this)[i];
  buf_ = std::move(buf);
  head_ = 0;
  capacity_ = capacity;
}

namespace {

// When a denied cost (at most L) fits: entries leave the window W after they were admitted,
// so wait until enough have left. The entries in the window are entries[first...], summing
// `total`; `now` is the log's own time.
int64_t RetryAfter(const Rate& rate, const SlidingLog::State& s, size_t first, int64_t total,
                   int64_t now, int64_t cost) {
  int64_t left = total;
  for (size_t i = first; i < s.entries.size(); ++i) {
    left -= s.entries[i].cost;
    if (cost <= rate.limit() - left) return s.entries[i].t_ms + rate.window_ms() - now;
  }
  return 0;  // unreachable: with every entry gone, a cost of at most L fits
}

// The answer when `cost` is not admitted.
LimitDecision Denial(const Rate& rate, const SlidingLog::State& s, size_t first, int64_t total,
                     int64_t now, int64_t cost) {
  LimitDecision d;
  d.retry_after_ms = cost > rate.limit() ? kNever : RetryAfter(rate, s, first, total, now, cost);
  d.remaining = rate.limit() - total;
  d.reset_after_ms = first == s.entries.size() ? 0 : s.entries.back().t_ms + rate.window_ms() - now;
  return d;
}

// The answer when it is: remaining after the charge; the newest entry is now's.
LimitDecision Admission(const Rate& rate, int64_t total_after) {
  LimitDecision d;
  d.allowed = true;
  d.remaining = rate.limit() - total_after;
  d.reset_after_ms = rate.window_ms();
  return d;
}

}  // namespace

int64_t SlidingLog::MaxEntries(const Rate& rate) {
  return std::min(rate.limit(), rate.window_ms());
}

void SlidingLog::Advance(const Rate& rate, State& s, int64_t now) {
  now = std::max(now, s.seen_ms);
  s.seen_ms = now;
  const int64_t w = rate.window_ms();
  while (!s.entries.empty() && s.entries.front().t_ms <= now - w) {
    s.total -= s.entries.front().cost;
    s.entries.pop_front();
  }
}

LimitDecision SlidingLog::Decide(const Rate& rate, State& s, int64_t now, int64_t cost) {
  Advance(rate, s, now);
  now = s.seen_ms;
  if (cost > rate.limit() - s.total) return Denial(rate, s, 0, s.total, now, cost);
  if (!s.entries.empty() && s.entries.back().t_ms == now) {
    s.entries.back().cost += cost;
  } else {
    s.entries.push_back({now, cost});
  }
  s.total += cost;
  return Admission(rate, s.total);
}

LimitDecision SlidingLog::Peek(const Rate& rate, const State& s, int64_t now, int64_t cost) {
  now = std::max(now, s.seen_ms);
  size_t first = 0;
  int64_t total = s.total;
  while (first < s.entries.size() && s.entries[first].t_ms <= now - rate.window_ms()) {
    total -= s.entries[first++].cost;
  }
  if (cost > rate.limit() - total) return Denial(rate, s, first, total, now, cost);
  return Admission(rate, total + cost);
}

bool SlidingLog::IsFresh(const Rate& rate, const State& s, int64_t now) {
  now = std::max(now, s.seen_ms);
  return s.entries.empty() || s.entries.back().t_ms <= now - rate.window_ms();
}

int64_t SlidingLog::InEffect(const Rate& rate, const State& s, int64_t now) {
  now = std::max(now, s.seen_ms);
  int64_t in_window = s.total;
  for (size_t i = 0; i < s.entries.size(); ++i) {
    if (s.entries[i].t_ms > now - rate.window_ms()) break;
    in_window -= s.entries[i].cost;
  }
  return in_window;
}

int64_t SlidingLog::Refund(const Rate& rate, State& s, int64_t now, int64_t amount,
                           int64_t charged_at) {
  now = std::max(now, s.seen_ms);
  if (charged_at <= now - rate.window_ms()) return 0;  // out of the window: no effect left
  for (size_t i = 0; i < s.entries.size(); ++i) {
    Entry& e = s.entries[i];
    if (e.t_ms != charged_at) continue;
    const int64_t back = std::min(amount, e.cost);
    e.cost -= back;
    s.total -= back;
    if (e.cost == 0) s.entries.erase(i);
    return back;
  }
  return 0;
}

}  // namespace limiter
