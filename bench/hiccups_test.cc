#include "bench/hiccups.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/subprocess.h"
#include "test/support/build_paths.h"

namespace limiter::bench {
namespace {

int CpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
}

// Every scheduled wake-up is recorded once, on every CPU of the mask, however late the
// machine made it: the count follows from the schedule alone.
TEST(Hiccups, RecordsEveryScheduledWakeUpOnEachCpu) {
  HiccupOptions o;
  o.duration_s = 0.2;
  o.period_us = 1000;
  o.stall_us = 1;  // every wake-up that came late at all
  const std::vector<CpuHiccups> results = MeasureHiccups(o);
  ASSERT_EQ(static_cast<int>(results.size()), CpuCount());
  int previous = -1;
  for (const CpuHiccups& r : results) {
    EXPECT_GT(r.cpu, previous);
    previous = r.cpu;
    EXPECT_EQ(r.late_us.count, 200u);
    EXPECT_LE(r.late_us.Quantile(0.99), r.late_us.max);
    EXPECT_LE(r.stalls, r.late_us.count);
  }
}

// A pinned mask of one CPU measures that CPU alone, and the report names it.
TEST(Hiccups, MeasuresOnlyTheCpusOfTheMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  HiccupOptions o;
  o.duration_s = 0.05;
  o.period_us = 500;
  std::ostringstream out, err;
  const int status = RunHiccups(o, out, err);
  sched_setaffinity(0, sizeof(saved), &saved);
  EXPECT_EQ(status, 0) << err.str();
  EXPECT_NE(out.str().find("on each of 1 CPUs"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("cpu " + std::to_string(first) + " "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find(" 100 wake-ups"), std::string::npos) << out.str();
}

// A flag out of range is one error line naming it, exit status 2, and nothing is measured.
TEST(Hiccups, AFlagOutOfRangeIsOneErrorLineAndExitStatus2) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--period-us", "5"}, {"--duration", "0"}, {"--stall-us", "x"}};
  for (const auto& [flag, value] : bad) {
    SCOPED_TRACE(flag + " " + value);
    const std::string command =
        testing::LimiterBenchBin() + " hiccups " + flag + " " + value + " 2>&1";
    Result<std::unique_ptr<Subprocess>> p = Subprocess::Start({"/bin/sh", "-c", command});
    ASSERT_TRUE(p.ok()) << p.error();
    Result<std::string> line = (*p)->ReadLine(20'000);
    ASSERT_TRUE(line.ok()) << line.error();
    EXPECT_EQ(line->rfind("limiter-bench: " + flag + ": ", 0), 0u) << *line;
    EXPECT_EQ((*p)->Wait(20'000), std::optional<int>(2));
  }
}

}  // namespace
}  // namespace limiter::bench
