// `limiter-bench node`: drives one limiterd node with CHECK ops and reports checks/s,
// latency quantiles, allowed/denied/errors and the node's memory per key; with vs_redis, the
// same load against a redis-server token bucket, and the ratio. The executable only parses
// flags into NodeBenchOptions and calls RunNodeBench.
#pragma once

#include <iosfwd>
#include <string>

#include "bench/load_loop.h"
#include "client/node_access.h"

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
  bool json = false;  // one JSON object instead of the text report
};

// Writes the report to `out`, and an error, as one line, to `err`. Returns the exit status:
// 0, or 1 when the node or redis could not be started or reached, or failed during the run.
// Errors in op replies are counted and reported, not failures.
int RunNodeBench(const NodeBenchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace limiter::bench
