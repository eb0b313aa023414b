// One real-process run of a `limiter-bench cluster` scenario at one rate: the gateways of
// this part (each a whole ClientCore with its own TCP transport) on a few event loops, taking
// open-loop arrivals at a constant rate and deciding them through a running cluster. Every
// decision is recorded (bench/fleet_accounting.h), with the harness's CPU and, measured
// alone beforehand, what generating the arrivals costs.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "bench/cluster_bench.h"
#include "bench/cluster_workload.h"
#include "bench/fleet_report.h"

namespace limiter::bench {

struct ClusterRunSpec {
  Scenario scenario;  // with the rate and gateways in force
  int part = 0, parts = 1;
};

// Runs the arrivals against `members`, writing a progress line a second to `out`. An error
// when the decisions were not all in 10 s after the last arrival was due.
Result<RunTotals> RunClusterOnce(const ClusterRunSpec& spec, const ClusterBenchOptions& o,
                                 const PolicySet& policies, const Workload& workload,
                                 const std::vector<std::string>& members, std::ostream& out);

}  // namespace limiter::bench
