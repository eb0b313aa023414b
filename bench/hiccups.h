// `limiter-bench hiccups`: what the machine itself does to a thread that must wake on time,
// with none of the limiter's processes involved. One thread pinned to each CPU this process
// may use wakes on a fixed schedule (every `period_us`, by ppoll, as the open-loop load waits
// between sends, with the same 1 ns of timer slack) for `duration_s` and records how late
// each scheduled wake-up came; a wake-up that comes after later ones were due records those
// too, each as late as it was (as the load counts sends it could not make on time). On a
// quiet dedicated machine the lateness stays in the tens of microseconds; stalls of a
// millisecond or more come from outside (the host preempting a virtual CPU, kernel threads)
// and bound the tail latency any benchmark on this machine can report. Thread-safety: one
// call at a time.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <vector>

#include "common/histogram.h"

namespace limiter::bench {

struct HiccupOptions {
  double duration_s = 10;
  int64_t period_us = 50;
  int64_t stall_us = 1000;  // a wake-up at least this late counts as a stall
};

struct CpuHiccups {
  int cpu = -1;
  Histogram::Snapshot late_us;  // one value per scheduled wake-up
  uint64_t stalls = 0;          // wake-ups late by stall_us or more
};

// The CPUs in this process's affinity mask, in order (empty when it cannot be read).
std::vector<int> CpusInAffinity();

// Measures every CPU in this process's affinity mask at once; one entry per CPU, in order.
std::vector<CpuHiccups> MeasureHiccups(const HiccupOptions& options);

// Measures and prints a line per CPU: the lateness quantiles and the share of wake-ups late
// by stall_us or more. Returns the exit status.
int RunHiccups(const HiccupOptions& options, std::ostream& out, std::ostream& err);

}  // namespace limiter::bench
