#include "common/promise_check.h"

#include <limits>

namespace limiter {

// Over the pairs i <= j: admitted(i..j)*W - L*(end_j - start_i) is at most B*W when the
// promise holds. With P the running sum of costs, it is (P_j*W - L*end_j) minus
// (P_{i-1}*W - L*start_i), so one pass that keeps the smallest second term finds the worst
// pair. 128-bit: a day's window in microseconds times a large count overflows 64 bits.
WorstWindow FindWorstWindow(std::span<const Admission> admissions, const PromiseBound& bound) {
  using Wide = __int128;
  const Wide w = bound.window_us;
  Wide prefix = 0;
  Wide min_head = std::numeric_limits<int64_t>::max();
  Wide min_head_prefix = 0;
  int64_t min_head_start = 0;
  Wide worst = std::numeric_limits<int64_t>::min();
  WorstWindow result;
  for (const Admission& a : admissions) {
    const Wide head = prefix * w - Wide{bound.limit} * (a.start_us - bound.resolution_us);
    if (head < min_head) {
      min_head = head;
      min_head_prefix = prefix;
      min_head_start = a.start_us;
    }
    prefix += a.cost;
    const Wide score = prefix * w - Wide{bound.limit} * a.end_us - min_head;
    if (score > worst) {
      worst = score;
      result.admitted = static_cast<int64_t>(prefix - min_head_prefix);
      result.interval_us = a.end_us - min_head_start + bound.resolution_us;
    }
  }
  result.over = !admissions.empty() && worst > Wide{bound.burst} * w;
  result.allowed = static_cast<double>(bound.burst) + static_cast<double>(bound.limit) *
                                                          static_cast<double>(result.interval_us) /
                                                          static_cast<double>(bound.window_us);
  return result;
}

std::vector<Admission> UnitAdmissionsAtMs(std::span<const int64_t> times_ms) {
  std::vector<Admission> out;
  out.reserve(times_ms.size());
  for (int64_t t : times_ms) out.push_back({t * 1000, t * 1000, 1});
  return out;
}

}  // namespace limiter
