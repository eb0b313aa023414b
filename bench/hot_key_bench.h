// `limiter-bench hotkey`: what one hot key does to a cluster's throughput, before and after
// the nodes split it.
//
// It starts a local cluster twice: once with splitting off, once on. Each time, load threads
// send frames of CHECKs over `keys` keys where one key gets `hot_ratio` times the rate of each
// other, routed as the client library routes them: to the key's owner on the ring, or, once
// an owner answers "split", round robin over the sub-buckets' owners. Each node's frames are
// pipelined on their own, so a busy node slows only the checks that go to it. The report gives
// checks/s and each node's share of the checks, for both runs: before the split, the hot
// key's owner does most of the work and caps the cluster; after it, the work spreads.
#pragma once

#include <iosfwd>
#include <string>

#include "protocol/node_access.h"

namespace limiter::bench {

struct HotKeyBenchOptions {
  // The cluster secret and TLS (limiter-bench --secret-file, --tls-*, the environment).
  // Local nodes and the client library take the secret from the environment.
  NodeAccess access;
  std::string limiterd;  // empty: DefaultLimiterdPath()
  std::string policies;  // the nodes' policy file
  std::string policy = "hot";
  int nodes = 3;
  int node_threads = 1;  // --threads of each node
  int connections = 2;   // load threads, each with a connection to every node
  int batch = 128;       // checks per frame
  int depth = 4;         // frames in flight per node per load thread
  int keys = 31;         // the hot key and keys-1 others
  double hot_ratio = 30;
  double duration_s = 5;
  int split_k = 32;
  int64_t split_above = 20'000;  // ops/s of one key on one node that split it
  bool pin = false;              // each node on a CPU of its own (taskset)
  double node_cpu = 0;           // > 0: each node limited to this many CPUs (a cgroup quota)
  uint64_t seed = 1;
  bool json = false;
};

// Writes the report to `out`, an error as one line to `err`. Returns 0, or 1 when a node
// could not be started or a connection failed.
int RunHotKeyBench(const HotKeyBenchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace limiter::bench
