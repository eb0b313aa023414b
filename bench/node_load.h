// The limiterd side of limiter-bench: a LoadChannel speaking the node's frames, the STATS
// numbers the memory report needs, and starting a local node.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "bench/load_loop.h"
#include "common/subprocess.h"
#include "limiter/status.h"
#include "protocol/node_connection.h"
#include "protocol/read_buffer.h"
#include "protocol/request_builder.h"

namespace limiter::bench {

// One TCP connection to a node carrying Request frames of CHECK ops on (policy, KeyName(n)).
// Its own socket rather than a NodeConnection: the open loop needs the descriptor to poll,
// and reads that do not block. Not thread-safe.
class NodeChannel final : public LoadChannel {
 public:
  // `timeout_ms` bounds the connect, and each blocking read and write.
  // With a secret in `access`, the connection proves it first; with TLS, it runs over TLS
  // (the closed loop only: the open loop polls the socket, which TLS buffers hide).
  static Result<std::unique_ptr<NodeChannel>> Connect(const std::string& address,
                                                      std::string policy,
                                                      const NodeAccess& access = {},
                                                      int timeout_ms = 5000);
  ~NodeChannel() override;
  NodeChannel(const NodeChannel&) = delete;
  NodeChannel& operator=(const NodeChannel&) = delete;

  void EncodeFrame(std::span<const uint64_t> keys, std::vector<uint8_t>& out) override;
  Status Send(std::span<const uint8_t> bytes) override;
  Status ReceiveFrame(size_t checks, CheckCounts& counts) override;
  Result<size_t> SendSome(std::span<const uint8_t> bytes) override;
  Status Poll(Time until, bool for_replies, bool for_send) override;
  Result<bool> TakeFrame(size_t checks, CheckCounts& counts) override;

 private:
  NodeChannel(int fd, std::string policy) : fd_(fd), policy_(std::move(policy)) {}
  NodeChannel(std::unique_ptr<NodeConnection> tls, std::string policy)
      : fd_(-1), policy_(std::move(policy)), tls_(std::move(tls)) {}
  // Reads into in_ once; `flags` 0 blocks (up to the timeout), MSG_DONTWAIT does not.
  Status Read(int flags);
  // Counts the replies of one reply frame, `body`, to a frame of `checks` checks.
  Status Count(std::span<const uint8_t> body, size_t checks, CheckCounts& counts);

  const int fd_;  // owned; -1 over TLS
  const std::string policy_;
  std::unique_ptr<NodeConnection> tls_;  // over TLS: the connection, whose reads and writes go
                                         // through OpenSSL
  // Sending side.
  RequestBuilder builder_;
  uint64_t next_id_ = 0;
  // Receiving side: op ids come back in the order they were sent.
  ReadBuffer in_;
  std::vector<uint64_t> aligned_;  // the reply being counted, copied to 8-byte alignment
  uint64_t expected_id_ = 0;
};

// A node's durable_* counters (server/durable_store.h, DurableStore::Stats).
struct NodeDurableStats {
  int64_t writes = 0;   // records queued
  int64_t commits = 0;  // batches written, each with one fsync
  int64_t reads = 0;    // read-throughs
  int64_t read_hits = 0;
  int64_t errors = 0;
  int64_t pending = 0;     // queued, not yet written
  int64_t keys = 0;        // RocksDB's estimate of the live keys
  int64_t disk_bytes = 0;  // SST and WAL files
};

// The node counters the memory report uses, from one STATS op.
struct NodeStats {
  int64_t keys = 0;
  int64_t resident_bytes = 0;
  int64_t evictions = 0;
  int64_t frames = 0;                       // request frames handled
  int64_t store_ops = 0;                    // CHECK, LEASE and RETURN ops answered
  std::optional<NodeDurableStats> durable;  // when the node has a database
};
// Takes one STATS counter into `stats`; false when it is not one NodeStats keeps.
bool ApplyNodeStat(NodeStats& stats, std::string_view name, int64_t value);
Result<NodeStats> ReadNodeStats(NodeConnection& connection);

// A limiterd this process started; stopped (SIGTERM) when destroyed.
// A CPU budget for one process: a cgroup (v1 `cpu` controller) with a CFS quota of
// `cores` CPUs. Emulates a node with cores of its own on a machine that has few: each node
// gets the same budget, the load generator the rest. Removed (after moving the process back
// to the root group, if it still runs) when destroyed. Needs root and a writable
// /sys/fs/cgroup/cpu. Not thread-safe.
class CpuBudget {
 public:
  static Result<std::unique_ptr<CpuBudget>> Apply(int pid, double cores);
  ~CpuBudget();
  CpuBudget(const CpuBudget&) = delete;
  CpuBudget& operator=(const CpuBudget&) = delete;

 private:
  CpuBudget(std::string dir, int pid) : dir_(std::move(dir)), pid_(pid) {}
  std::string dir_;
  int pid_;
};

struct LocalNode {
  std::unique_ptr<Subprocess> process;
  std::string address;                // HOST:PORT for clients
  std::string banner;                 // the line it printed on start
  std::unique_ptr<CpuBudget> budget;  // destroyed first: the process is still there to move
};

// The local nodes a run starts take their secrets from the environment, as limiterd does. A
// cluster of them with a gateway secret needs a peer secret too (limiterd refuses to start
// otherwise): when the environment holds a gateway secret and no peer secret, this sets
// $LIMITER_PEER_SECRET to a random one, which only those nodes see. Call it once, before
// starting nodes or threads.
void GivePeerSecretToLocalNodes();

struct LocalNodeOptions {
  std::string program;   // the limiterd binary
  std::string policies;  // policy file
  int64_t max_keys = 0;
  int threads = 0;                      // 0: limiterd's default
  std::vector<std::string> extra_args;  // more limiterd flags
  int start_timeout_ms = 10'000;  // until its "listening" line (a data dir's WAL replays first)
  double cpu_budget = 0;          // > 0: each node limited to this many CPUs (CpuBudget)
  // StartLocalCluster: run node i on CPU i modulo the CPU count (with taskset), so each node
  // has a core of its own where the machine has enough of them.
  bool pin = false;
};
Result<LocalNode> StartLocalNode(const LocalNodeOptions& options);
// Stops a local node as an operator would: SIGTERM, then waits up to `timeout_ms` for it to
// exit. Its exit status (128 + signal when a signal ended it), or an error when it did not
// exit in time (it is then killed when `node` is destroyed).
Result<int> StopLocalNode(LocalNode& node, int timeout_ms);

// `nodes` limiterd processes on 127.0.0.1 forming one cluster (--members, --self). Members
// must be named before they start, so their ports are picked free beforehand; a port taken
// in between fails that start, and the whole cluster is started again on new ports.
Result<std::vector<LocalNode>> StartLocalCluster(int nodes, const LocalNodeOptions& options);

// CPU seconds (user + system) a local process has used so far; nullopt when its /proc entry
// cannot be read.
std::optional<double> CpuSeconds(int pid);

// ../server/limiterd next to the directory of the running executable (the build tree's
// layout); empty when the executable's path cannot be read.
std::string DefaultLimiterdPath();

}  // namespace limiter::bench
