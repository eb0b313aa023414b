#include "bench/hiccups.h"

#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <thread>

namespace limiter::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

void SleepUntil(SteadyClock::time_point when) {
  for (;;) {
    const auto left = when - SteadyClock::now();
    if (left <= SteadyClock::duration::zero()) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    const timespec timeout{static_cast<time_t>(ns / 1'000'000'000),
                           static_cast<long>(ns % 1'000'000'000)};
    ::ppoll(nullptr, 0, &timeout, nullptr);
  }
}

void Measure(SteadyClock::time_point start, uint64_t wakeups, const HiccupOptions& o,
             CpuHiccups* result) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(result->cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);   // the calling thread
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // as the open-loop load: no 50 us of slack
  const std::chrono::microseconds period(o.period_us);
  for (uint64_t k = 0; k < wakeups; ++k) {
    const SteadyClock::time_point due = start + period * static_cast<int64_t>(k);
    SleepUntil(due);
    const auto late =
        std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - due).count();
    const uint64_t late_us = late > 0 ? static_cast<uint64_t>(late) : 0;
    result->late_us.Record(late_us);
    if (late_us >= static_cast<uint64_t>(o.stall_us)) ++result->stalls;
  }
}

}  // namespace

std::vector<int> CpusInAffinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

std::vector<CpuHiccups> MeasureHiccups(const HiccupOptions& options) {
  std::vector<CpuHiccups> results;
  for (int cpu : CpusInAffinity()) results.push_back(CpuHiccups{cpu, {}, 0});
  const uint64_t wakeups = static_cast<uint64_t>(
      std::llround(options.duration_s * 1e6 / static_cast<double>(options.period_us)));
  // Every thread starts its schedule at the same instant, a little after they are created.
  const SteadyClock::time_point start = SteadyClock::now() + std::chrono::milliseconds(20);
  std::vector<std::thread> threads;
  for (CpuHiccups& r : results) threads.emplace_back(Measure, start, wakeups, options, &r);
  for (std::thread& t : threads) t.join();
  return results;
}

int RunHiccups(const HiccupOptions& o, std::ostream& out, std::ostream& err) {
  std::vector<CpuHiccups> results = MeasureHiccups(o);
  if (results.empty()) {
    err << "limiter-bench hiccups: no CPU in this process's affinity mask\n";
    return 1;
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "hiccups: a wake-up due every %" PRId64 " us on each of %zu CPUs for %.1f s\n",
                o.period_us, results.size(), o.duration_s);
  out << line;
  for (const CpuHiccups& r : results) {
    const Histogram::Snapshot& h = r.late_us;
    const double share = h.count ? 100.0 * static_cast<double>(r.stalls) / h.count : 0;
    std::snprintf(line, sizeof line,
                  "cpu %-3d %9" PRIu64 " wake-ups   late p50 %" PRIu64 " us   p99 %" PRIu64
                  " us   p999 %" PRIu64 " us   max %" PRIu64 " us   %.3f%% late by %" PRId64
                  " us or more\n",
                  r.cpu, h.count, h.Quantile(0.50), h.Quantile(0.99), h.Quantile(0.999), h.max,
                  share, o.stall_us);
    out << line;
  }
  return 0;
}

}  // namespace limiter::bench
