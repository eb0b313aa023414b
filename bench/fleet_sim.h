// `limiter-bench sim`: the whole fleet of a `cluster` scenario in simulated time, with the
// real code: a ClientCore per gateway and a Node per shard, in one process on one simulated
// clock (sim/scheduler.h), over a modelled network and nodes modelled as queues whose
// service times come from `limiter-bench node` (sim/network.h). The workload is
// `cluster`'s (bench/cluster_workload.h); faults come from a schedule (sim/faults.h).
//
// Deterministic: the same options give the same report, byte for byte (the wall time the run
// took is printed, and kept out of the report).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "sim/network.h"

namespace limiter::bench {

struct FleetSimOptions {
  std::string scenario = "50k";
  int gateways = 0;  // 0: the scenario's
  int nodes = 0;     // 0: the scenario's
  double rate = 0;   // requests/s; 0: the scenario's
  double duration_s = 10;
  double warmup_s = 2;
  uint64_t seed = 1;
  std::string faults;
  std::string policies;  // the scenario's policy file
  int64_t deadline_us = 2000;
  std::string spread = "even";
  sim::NetworkModel model;
  std::string json_file;   // also write the report as JSON here
  std::string report_dir;  // also write report.md, per_second.tsv, chart.png here
  bool quiet = false;      // no progress lines
};

// Runs the simulation, writing progress and then the report to `out`; errors, one line each,
// to `err`. Returns 0, 1 when a file could not be read or written, 2 for bad options.
int RunFleetSim(const FleetSimOptions& options, std::ostream& out, std::ostream& err);

}  // namespace limiter::bench
