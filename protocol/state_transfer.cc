#include "protocol/state_transfer.h"

#include <algorithm>
#include <string>

namespace limiter {
namespace {

using Fields = std::span<const int64_t>;
using Imported = Result<std::optional<KeyLimiter>>;

Error Bad(std::string what) { return Error{"state field " + what}; }

// A window's start mapped to the receiver: windows it has passed since the sender read it
// (0: still open, 1: the one after it is open, 2 or more: both counts are history).
int64_t WindowsPassed(int64_t start_offset, int64_t w) {
  if (start_offset > 0) return 0;  // a window that starts later than now: the current one
  return (-start_offset) / w;
}

bool InRange(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

struct Exporter {
  int64_t now;
  std::vector<int64_t>& out;
  void operator()(const FixedWindow::State& s) {
    out.insert(out.end(), {s.window_start_ms - now, s.count});
  }
  void operator()(const SlidingWindow::State& s) {
    out.insert(out.end(), {s.window_start_ms - now, int64_t{s.prev}, int64_t{s.curr}});
  }
  void operator()(const TokenBucket::State& s) {
    out.insert(out.end(), {s.tokens_scaled, s.last_ms - now});
  }
  void operator()(const Gcra::State& s) { out.insert(out.end(), {s.tat_ms - now, s.tat_frac}); }
  void operator()(const LeakyBucket::State& s) {
    out.insert(out.end(), {s.level_scaled, s.last_ms - now});
  }
  void operator()(const SlidingLog::State& s) {
    out.push_back(s.seen_ms - now);
    for (size_t i = 0; i < s.entries.size(); ++i) {
      out.insert(out.end(), {s.entries[i].t_ms - now, s.entries[i].cost});
    }
  }
};

Imported ImportWindow(Algorithm a, const Rate& rate, Fields f, int64_t now) {
  const int64_t w = rate.window_ms();
  const int64_t start = now - now % w;  // the receiver's current window
  if (a == Algorithm::kFixedWindow) {
    if (f.size() != 2) return Bad("count: a fixed window has 2, got " + std::to_string(f.size()));
    if (f[1] < 0) return Bad("count: out of range");
    if (WindowsPassed(f[0], w) >= 1 || f[1] == 0) return std::optional<KeyLimiter>();
    return std::optional<KeyLimiter>(
        KeyLimiter(FixedWindow::State{start, std::min(f[1], rate.limit())}));
  }
  if (f.size() != 3) return Bad("count: a sliding window has 3, got " + std::to_string(f.size()));
  if (f[1] < 0 || f[2] < 0) return Bad("count: out of range");
  // Counts over the limit (written under a higher one) are the limit: exhausted. Clamping each
  // count admits no more than the old counts did under the old limit (docs: see README,
  // Durability).
  SlidingWindow::State s{start, static_cast<uint32_t>(std::min(f[2], rate.limit())),
                         static_cast<uint32_t>(std::min(f[1], rate.limit()))};
  switch (WindowsPassed(f[0], w)) {
    case 0:
      break;
    case 1:
      s.prev = s.curr;
      s.curr = 0;
      break;
    default:
      return std::optional<KeyLimiter>();
  }
  if (s.prev == 0 && s.curr == 0) return std::optional<KeyLimiter>();
  return std::optional<KeyLimiter>(KeyLimiter(s));
}

Imported ImportLog(const Rate& rate, Fields f, int64_t now) {
  if (f.empty() || f.size() % 2 != 1) {
    return Bad("count: a sliding log has 1 + 2 per entry, got " + std::to_string(f.size()));
  }
  const int64_t w = rate.window_ms();
  if (!InRange(f[0], -w, 0)) return Bad("seen: out of range");
  SlidingLog::State s;
  s.seen_ms = now + f[0];
  int64_t last = INT64_MIN;
  for (size_t i = 1; i < f.size(); i += 2) {
    const int64_t t = f[i], cost = f[i + 1];
    if (t <= last || t > 0) return Bad("entry " + std::to_string(i / 2) + ": time out of order");
    if (cost < 1) return Bad("entry " + std::to_string(i / 2) + ": cost out of range");
    last = t;
  }
  // More than the limit in the log (written under a higher one): the newest entries up to the
  // limit are kept, the oldest of them cut to fit. The entries in the window at any later time
  // are the newest ones, so the log then holds min(what it held, L): exhausted as long as the
  // old one would have been, and never more room than the old one had.
  size_t first = f.size();  // the oldest entry kept
  int64_t room = rate.limit(), first_cost = 0;
  for (size_t i = f.size() - 2; i >= 1 && i < f.size() && room > 0; i -= 2) {
    if (f[i] <= -w) break;  // left the window in flight, as did every older one
    first = i;
    first_cost = std::min(f[i + 1], room);
    room -= first_cost;
  }
  for (size_t i = first; i < f.size(); i += 2) {
    const int64_t cost = i == first ? first_cost : f[i + 1];
    s.entries.push_back({now + f[i], cost});
    s.total += cost;
  }
  if (s.entries.empty()) return std::optional<KeyLimiter>();
  s.seen_ms = std::max(s.seen_ms, s.entries.back().t_ms);
  return std::optional<KeyLimiter>(KeyLimiter(std::move(s)));
}

}  // namespace

// The latest time the state itself holds (GCRA's TAT is a future time, not one it was at).
int64_t StateTime(const KeyLimiter& state) {
  struct Latest {
    int64_t operator()(const FixedWindow::State& s) { return s.window_start_ms; }
    int64_t operator()(const SlidingWindow::State& s) { return s.window_start_ms; }
    int64_t operator()(const TokenBucket::State& s) { return s.last_ms; }
    int64_t operator()(const Gcra::State&) { return INT64_MIN; }
    int64_t operator()(const LeakyBucket::State& s) { return s.last_ms; }
    int64_t operator()(const SlidingLog::State& s) { return s.seen_ms; }
  };
  return std::visit(Latest{}, state.state());
}

void ExportState(const KeyLimiter& state, int64_t now_ms, std::vector<int64_t>& out) {
  // A state can be ahead of now_ms: another thread with a later clock reading moved it on (a
  // key's time never runs backwards). Its times are written from its own then, so that no
  // offset is positive; the reader takes the state as read a moment later.
  std::visit(Exporter{std::max(now_ms, StateTime(state)), out}, state.state());
}

Result<std::optional<KeyLimiter>> ImportState(Algorithm algorithm, const Rate& rate,
                                              std::span<const int64_t> f, int64_t now) {
  const int64_t cap = rate.capacity_scaled();
  // A time offset no live state has: from the distant past or future. Bounded so that the
  // receiver's arithmetic on it cannot overflow.
  const int64_t far = 2 * (rate.window_ms() + 1) * (rate.burst() + 1);
  std::optional<KeyLimiter> k;
  switch (algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindow:
      return ImportWindow(algorithm, rate, f, now);
    case Algorithm::kSlidingLog:
      return ImportLog(rate, f, now);
    case Algorithm::kTokenBucket:
      if (f.size() != 2) return Bad("count: a token bucket has 2, got " + std::to_string(f.size()));
      if (f[0] < 0) return Bad("tokens: out of range");
      if (!InRange(f[1], -far, 0)) return Bad("last: out of range");
      k.emplace(TokenBucket::State{std::min(f[0], cap), now + f[1]});  // at most a full bucket
      break;
    case Algorithm::kGcra:
      if (f.size() != 2) return Bad("count: GCRA has 2, got " + std::to_string(f.size()));
      // Beyond B*W/L ahead (a state written under a higher burst or a lower rate): the
      // furthest a state of this rate can be, exhausted. Checked before InEffect multiplies
      // the offset by L; what no state of any rate has is an error.
      if (!InRange(f[0], -far, far)) return Bad("tat: out of range");
      if (!InRange(f[1], 0, rate.limit() - 1)) return Bad("tat_frac: out of range");
      if (f[0] > cap / rate.limit() + 1) {
        k.emplace(Gcra::State{now + cap / rate.limit(), cap % rate.limit()});
      } else {
        k.emplace(Gcra::State{now + f[0], f[1]});
        if (k->InEffect(rate, now) > cap) {
          k.emplace(Gcra::State{now + cap / rate.limit(), cap % rate.limit()});
        }
      }
      break;
    case Algorithm::kLeakyBucket:
      if (f.size() != 2) return Bad("count: a leaky bucket has 2, got " + std::to_string(f.size()));
      if (f[0] < 0) return Bad("level: out of range");
      if (!InRange(f[1], -far, 0)) return Bad("last: out of range");
      k.emplace(LeakyBucket::State{std::min(f[0], cap), now + f[1]});  // at most full
      break;
  }
  if (!k || k->IsFresh(rate, now)) return std::optional<KeyLimiter>();
  return k;
}

namespace {

// v * to / from, rounded down (up: when up); saturated at `most`.
int64_t Rescale(int64_t v, int64_t to, int64_t from, bool up, int64_t most) {
  if (v <= 0) return v;
  const __int128 n = static_cast<__int128>(v) * to;
  const __int128 q = up ? (n + from - 1) / from : n / from;
  return q > most ? most : static_cast<int64_t>(q);
}

}  // namespace

void ConvertFields(Algorithm algorithm, const Rate& from, const Rate& to, std::span<int64_t> f) {
  const int64_t w1 = from.window_ms(), w2 = to.window_ms(), cap = to.capacity_scaled();
  switch (algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingWindow:
    case Algorithm::kSlidingLog:
      // Counts in cost units: ImportState keeps them within the limit.
      return;
    case Algorithm::kTokenBucket:  // tokens * W: fewer, when rounded
      if (f.size() == 2) f[0] = Rescale(f[0], w2, w1, false, cap);
      return;
    case Algorithm::kLeakyBucket:  // level * W: higher, when rounded
      if (f.size() == 2) f[0] = Rescale(f[0], w2, w1, true, cap);
      return;
    case Algorithm::kGcra: {
      // The missing tokens * W, (TAT - now) * L + frac: rescaled, rounded up, and written as
      // a TAT at the new rate. A TAT in the past is fresh at any rate.
      if (f.size() != 2 || f[0] < 0 || f[1] < 0 || f[1] >= from.limit() ||
          f[0] > 2 * (from.window_ms() + 1) * (from.burst() + 1)) {
        return;  // not a state of `from`: ImportState says what is wrong
      }
      const int64_t missing = f[0] * from.limit() + f[1];
      const int64_t m = Rescale(missing, w2, w1, true, cap);
      f[0] = m / to.limit();
      f[1] = m % to.limit();
      return;
    }
  }
}

KeyLimiter StricterOf(const Rate& rate, KeyLimiter a, KeyLimiter b, int64_t now_ms) {
  return a.InEffect(rate, now_ms) >= b.InEffect(rate, now_ms) ? std::move(a) : std::move(b);
}

}  // namespace limiter
