// The chart of a load run's report (`cluster` and `sim`): per_second.tsv, chart.gp and
// chart.png drawn by gnuplot, one row a second.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "limiter/status.h"

namespace limiter::bench {

struct ChartRow {
  double t = 0;
  uint64_t decided = 0;
  uint64_t store_ops = 0;
  uint64_t p99_us = 0;
};

// Writes the three files into `dir`; an error when a file cannot be written or gnuplot fails.
Status WriteChart(const std::string& dir, const std::vector<ChartRow>& rows,
                  const std::string& title);

}  // namespace limiter::bench
