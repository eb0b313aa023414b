// `limiter-bench node`: drives one limiterd node with CHECK ops and reports checks/s,
// latency quantiles, allowed/denied/errors and the node's memory per key; with vs_redis, the
// same load against a redis-server token bucket, and the ratio. With durability, the local
// node keeps a durable policy's keys in a temporary data dir and the report adds the group
// commit (fsyncs, records a commit) and the database's size; several durabilities run one
// after another, each on a fresh node, and are compared. The executable only parses flags
// into NodeBenchOptions and calls RunNodeBench.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "bench/durable_bench.h"
#include "bench/load_loop.h"
#include "protocol/node_access.h"

namespace limiter::bench {

struct NodeBenchOptions {
  // The cluster secret and TLS (limiter-bench --secret-file, --tls-*, the environment).
  // Local nodes and the client library take the secret from the environment.
  NodeAccess access;
  std::string server;    // HOST:PORT; empty: start a local limiterd
  std::string limiterd;  // the local node's binary; empty: DefaultLimiterdPath()
  std::string policies;  // the local node's policy file; also the redis bucket's numbers
  int node_threads = 0;  // the local node's --threads; 0: its default
  std::string policy = "bench";
  int connections = 4;
  LoadShape shape;
  bool vs_redis = false;
  std::string redis_server = "redis-server";
  bool json = false;  // one JSON object instead of the text report (one a line per run)
  // The runs, in order, each on a fresh local node: memory-only (nullopt) runs `policy` from
  // `policies`; a durable one runs `durable_policy` from `durable_policies` on a node with a
  // temporary --data-dir under `data_parent` (empty: $TMPDIR or /tmp) and this durability.
  std::vector<NodeDurability> durability = {std::nullopt};
  std::string durable_policies;  // the bench's durable_policies.yaml by default
  std::string durable_policy = "bench_durable";
  int64_t sync_interval_ms = 0;  // the node's --sync-interval-ms; 0: its default
  std::string data_parent;
};

// Writes the report to `out`, and an error, as one line, to `err`. Returns the exit status:
// 0, or 1 when the node or redis could not be started or reached, or failed during the run.
// Errors in op replies are counted and reported, not failures.
int RunNodeBench(const NodeBenchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace limiter::bench
