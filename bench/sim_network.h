// The network and the nodes of `limiter-bench sim`: real Nodes, each modelled as a server
// with a FIFO queue in front of `threads` identical workers, and one Transport per gateway
// that batches the ops it is given in one simulated instant into a frame per node (as the
// TCP transport does in one turn of its loop), draws each direction's delay from a
// log-normal distribution, and hands the frame to the node when a worker is free.
//
// A frame's service time is frame_us + op_us per op (times the node's slow factor), the
// costs `limiter-bench node` measures on real processes, so a saturated node shows up as
// queueing. The node runs the frame at the end of its service, on the simulated clock.
// Faults: a node killed answers resets (kConnection) until restarted empty; a partitioned
// gateway/node pair loses its frames in both directions (the client's deadline fires).
//
// Single threaded and deterministic: everything runs on the SimScheduler, and every random
// draw comes from one seeded stream in event order.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/sim_scheduler.h"
#include "client/transport.h"
#include "common/histogram.h"
#include "server/node.h"

namespace limiter::bench {

struct NetworkModel {
  double one_way_median_us = 100;  // so a round trip's median is about 200 us
  double one_way_sigma = 0.5;      // log-normal shape: the tail
  double frame_us = 7.7;           // a node's cost per frame
  double op_us = 0.49;             // and per op in it
  int threads = 2;                 // workers per node
  size_t max_ops_per_frame = 256;  // as the TCP transport
};

class SimNetwork {
 public:
  // What one node did, for the report.
  struct NodeLoad {
    uint64_t frames = 0, ops = 0;
    double busy_us = 0;       // summed over its workers
    Histogram queue_wait_us;  // from a frame's arrival to the start of its service
    int64_t most_queued = 0;  // frames waiting at once, at worst
    std::map<int64_t, double> busy_by_second;  // simulated second -> busy us
  };

  SimNetwork(sim::SimScheduler& scheduler, const Clock& clock, const PolicySet& policies,
             NetworkModel model, uint64_t seed);
  ~SimNetwork();

  // A node at `address` (its options' `self`), serving at once.
  Node& AddNode(const std::string& address, NodeOptions options);
  // A transport for gateway number `gateway` (stable address).
  Transport& AddGateway(int gateway);

  size_t nodes() const { return nodes_.size(); }
  // Ops the gateways sent, by kind (OpKind order).
  const std::array<uint64_t, kOpKinds>& sent() const { return sent_; }
  const std::string& address(size_t node) const;
  Node& node(size_t node);
  const NodeLoad& load(size_t node) const;
  bool up(size_t node) const;

  // The process dies: queued and in-flight frames end with kConnection, and so does every
  // frame until Restart. Restart brings up an empty Node with `options`.
  void Kill(size_t node);
  void Restart(size_t node, NodeOptions options);
  // A slowdown by `factor` starts (on) or ends; while several overlap the largest holds.
  void Slow(size_t node, double factor, bool on);
  // Frames between gateways [from, to] and the node vanish while cut; cuts that overlap each
  // end on their own heal.
  void Cut(int from, int to, size_t node, bool cut);

  // The hand-off a ring change queued on `node`: its frames go to the receivers directly.
  void RunHandoffs(size_t node);
  // Runs every node's periodic work (Sweep each call; Tick when `tick`).
  void Periodic(bool tick);

 private:
  class GatewayTransport;
  struct SimNode;
  struct Pending;
  void Deliver(int gateway, size_t node, std::vector<Pending> batch);
  void Serve(int gateway, size_t node, uint64_t life, std::vector<uint8_t> frame,
             std::vector<Pending> batch);
  void Answer(int gateway, size_t node, std::vector<Pending> batch, std::vector<CallResult> results);
  int64_t OneWayUs();
  bool IsCut(int gateway, size_t node) const;
  std::optional<size_t> Find(const std::string& address) const;

  sim::SimScheduler& s_;
  const Clock& clock_;
  const PolicySet& policies_;
  const NetworkModel model_;
  std::mt19937_64 rng_;
  std::lognormal_distribution<double> delay_;
  std::vector<std::unique_ptr<SimNode>> nodes_;
  std::vector<std::unique_ptr<GatewayTransport>> gateways_;
  struct CutRange {
    int from, to;
    size_t node;
  };
  std::vector<CutRange> cut_;
  std::array<uint64_t, kOpKinds> sent_{};
};

}  // namespace limiter::bench
