// The one I1 checker, for the tests and limiter-bench cluster: did a key admit more than
// B + L*t/W cost units in some interval of length t?
//
// Each admission is known only to have been charged somewhere between the request's arrival
// (`start_us`) and its decision (`end_us`); an interval is over the promise only when it is
// over however the charges are placed in those spans, so network jitter alone never counts
// as a violation while a real overshoot always does. Pure arithmetic, no state.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace limiter {

struct Admission {
  int64_t start_us = 0;
  int64_t end_us = 0;  // at or after start_us
  int64_t cost = 1;
};

struct PromiseBound {
  int64_t limit = 1;      // L
  int64_t window_us = 1;  // W
  int64_t burst = 1;      // B
  // The resolution of the clock that charged: a node decides in whole milliseconds, so two
  // charges it placed t ms apart may be up to 1 ms less apart in microseconds.
  int64_t resolution_us = 0;
};

// The interval of a key's admissions that comes closest to (or goes furthest over) the bound.
struct WorstWindow {
  int64_t admitted = 0;     // cost units admitted in it
  int64_t interval_us = 0;  // its length: from the first one's arrival to the last's decision
  double allowed = 0;       // B + L*interval/W
  bool over = false;        // admitted > allowed (decided in integers)
};

// `admissions` sorted by end_us. An empty span gives an empty window (admitted 0).
WorstWindow FindWorstWindow(std::span<const Admission> admissions, const PromiseBound& bound);

// Admissions of one unit each, known to the millisecond (sorted).
std::vector<Admission> UnitAdmissionsAtMs(std::span<const int64_t> times_ms);

}  // namespace limiter
