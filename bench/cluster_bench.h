// `limiter-bench cluster`: the first seed's workload end to end. G gateways, each a full
// client (its own local buckets, leases, connections and fallback state), spread over a few
// event-loop threads, take open-loop arrivals at a constant rate and decide them through the
// cluster; the harness reports throughput, store operations, added latency from each request's
// intended arrival (no coordinated omission), accuracy against promise I1, fallbacks and node CPU
// and memory.
//
// Scenarios: `50k` (50,000 requests/s over 40 gateways) and `500k` (500,000 requests/s over
// 100 gateways); both over 200,000 API keys in 20,000 tenants with Zipf popularity, a report
// endpoint that costs 20 and a login endpoint with a strict per-account limit.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "protocol/node_access.h"

namespace limiter::bench {

struct ClusterBenchOptions {
  // The cluster secret and TLS (limiter-bench --secret-file, --tls-*, the environment).
  // Local nodes and the client library take the secret from the environment.
  NodeAccess access;
  std::string scenario = "50k";
  double duration_s = 10;
  // Arrivals before the measurement (gateways and nodes start cold); their admissions still
  // count in the accuracy check.
  double warmup_s = 2;
  int nodes = 3;                     // local nodes to start (when `cluster` is empty)
  int node_threads = 1;              // --threads of each local node
  int gateways = 0;                  // 0: the scenario's
  double rate = 0;                   // requests/s; 0: the scenario's
  std::vector<std::string> cluster;  // HOST:PORT of running nodes; empty: start local ones
  std::string limiterd;              // empty: DefaultLimiterdPath()
  std::string policies;              // the scenario's policy file (nodes and gateways)
  // Event-loop threads the gateways are spread over (each runs its share of the arrivals).
  int loops = 1;
  int64_t deadline_us = 2000;   // each gateway's store-call deadline
  std::string spread = "even";  // how the load balancer spreads requests over gateways
  std::string json_file;        // also write the report as JSON here
  std::string report_dir;       // also write report.md, per_second.tsv, chart.png here
  bool vs_redis = false;        // also run one EVALSHA per request against redis-server
  std::string redis_server = "redis-server";
  uint64_t seed = 1;
  // --part I/N: run gateways I, I+N, ... only, and write a partial report (--json) for
  // `limiter-bench merge`.
  int part = 0, parts = 1;
  // --find-max: step the rate up until p99 > 1 ms or under 99.9% achieved.
  bool find_max = false;
};

// "I/N" with 0 <= I < N, or nullopt.
std::optional<std::pair<int, int>> ParsePart(const std::string& text);

struct MergeOptions {
  std::vector<std::string> parts;  // partial reports (JSON; their .records beside them)
  std::string policies;            // the scenario's policy file
  std::string json_file, report_dir;
};

// Merges partial reports into the report of the whole run. 0, 1 when a file could not be
// read or written or the parts do not belong together, 2 for bad options.
int RunMerge(const MergeOptions& options, std::ostream& out, std::ostream& err);

// Runs the scenario, writing a progress line a second and then the report to `out`; errors,
// one line each, to `err`. Returns 0, or 1 when the cluster could not be started or reached
// or a report file could not be written, or 2 for bad options.
int RunClusterBench(const ClusterBenchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace limiter::bench
