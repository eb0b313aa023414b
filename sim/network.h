// SimNetwork: the simulated network between gateways and real Nodes, the one the simulation
// tests (test/sim) and `limiter-bench sim` share. Each gateway gets a Transport of its own
// (Gateway); an op it sends reaches the node's HandleFrame after a one-way delay, and the
// answer comes back after another.
//
// The model (NetworkModel) says how: each direction's delay is drawn from a log-normal
// distribution, unless the node has a fixed latency of its own; ops a gateway sends to a node
// in one simulated instant share a frame, up to max_ops_per_frame (as the TCP transport does
// in one turn of its loop); a node is a FIFO queue in front of `threads` identical workers,
// a frame's service time frame_us + op_us per op (times the node's slow factor), the costs
// `limiter-bench node` measures, so a saturated node shows up as queueing. The node runs the
// frame at the end of its service. NetworkModel::Instant() is the client tests' network: each
// op in a frame of its own, served the moment it arrives.
//
// Faults: a node killed answers resets (kConnection) until restarted empty; a partitioned
// gateway/node pair loses its frames in both directions (the client's deadline fires); a
// slowed node serves slower; a node that refuses fails every op at once, as a closed port
// does; a silent one takes ops and never answers them.
//
// Single threaded and deterministic: everything runs on the SimScheduler, and every random
// draw comes from one seeded stream in event order. Nodes are real Nodes, owned by the
// network or by the caller.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "client/transport.h"
#include "common/histogram.h"
#include "protocol/op.h"
#include "server/node.h"
#include "sim/scheduler.h"

namespace limiter::sim {

struct NetworkModel {
  double one_way_median_us = 100;  // so a round trip's median is about 200 us
  double one_way_sigma = 0.5;      // log-normal shape: the tail
  // Nodes as queues in front of workers, a frame costing frame_us + op_us per op; false: a
  // frame is served the moment it arrives, in no time.
  bool queue = true;
  double frame_us = 7.7;  // a node's cost per frame
  double op_us = 0.49;    // and per op in it
  int threads = 2;        // workers per node
  // Ops to one node in one instant share frames of up to this many; 1: each op is sent at
  // once, in a frame of its own.
  size_t max_ops_per_frame = 256;  // as the TCP transport

  // The client tests' network: each op in a frame of its own, sent at once and served on
  // arrival; a delay of 100 us each way unless the node has a latency of its own.
  static NetworkModel Instant();
};

class SimNetwork {
 public:
  // What one node did, for the report.
  struct NodeLoad {
    uint64_t frames = 0, ops = 0;
    double busy_us = 0;                        // summed over its workers
    Histogram queue_wait_us;                   // from a frame's arrival to the start of its service
    int64_t most_queued = 0;                   // frames waiting at once, at worst
    std::map<int64_t, double> busy_by_second;  // simulated second -> busy us
  };

  // A node as the network sees it. A test may change the last three at any time; each
  // applies to the ops sent (latency: the directions begun) from then on.
  struct Endpoint {
    std::string address;
    Node* node = nullptr;
    Node::Worker* worker = nullptr;
    std::optional<int64_t> latency_us;  // each way; unset: drawn from the model
    bool refuses = false;               // ops fail at once (kConnection), as at a closed port
    bool silent = false;                // ops are taken and never answered
  };

  explicit SimNetwork(SimScheduler& scheduler, NetworkModel model = NetworkModel::Instant(),
                      uint64_t seed = 1);
  ~SimNetwork();
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  // A node at `address`, serving at once: the caller's (alive as long as the network), or one
  // the network owns. A second node at an address takes the first one's place, frames in
  // flight included.
  Endpoint& AddNode(const std::string& address, Node& node);
  Endpoint& AddNode(const std::string& address, std::unique_ptr<Node> node);
  // The transport of gateway number `gateway` (0-based; partitions name gateways by it),
  // made on first use.
  Transport& Gateway(int gateway = 0);

  size_t nodes() const { return nodes_.size(); }
  Endpoint& endpoint(size_t node);
  Endpoint& endpoint(const std::string& address);
  const std::string& address(size_t node) const;
  const NodeLoad& load(size_t node) const;
  bool up(size_t node) const;

  // What the gateways sent: every op, by kind, by policy; ops on sub-buckets of split keys,
  // by the node they went to.
  uint64_t sent() const { return sent_total_; }
  uint64_t sent(OpKind kind) const { return sent_[static_cast<size_t>(kind)]; }
  const std::array<uint64_t, kOpKinds>& sent_by_kind() const { return sent_; }
  uint64_t sent(const std::string& policy) const;
  const std::map<std::string, uint64_t>& sub_bucket_ops() const { return sub_bucket_ops_; }
  // The most ops that were in flight to one node at once; the gateways' Disconnects from it.
  int64_t max_in_flight(const std::string& address) const;
  uint64_t disconnects(const std::string& address) const;
  // Sees every op sent, with the simulated time (before it is delivered).
  std::function<void(int64_t now_us, const std::string& address, const OpSpec& op)> on_send;

  // The process dies: queued and in-flight frames end with kConnection, and so does every
  // frame until Restart, which brings up `node` (empty, as after kill -9) in its place.
  void Kill(size_t node);
  void Restart(size_t node, std::unique_ptr<Node> replacement);
  // A slowdown by `factor` starts (on) or ends; while several overlap the largest holds.
  void Slow(size_t node, double factor, bool on);
  // Frames between gateways [from, to] and the node vanish while cut; cuts that overlap each
  // end on their own heal.
  void Cut(int from, int to, size_t node, bool cut);

  // Runs the hand-off jobs a ring change queued on `node`: their frames go to the receivers
  // directly, at once (a receiver that is down, refuses or is unknown takes nothing, and so
  // does every receiver of a sender that refuses: its process is gone). The keys sent.
  int64_t RunHandoffs(size_t node);
  int64_t RunHandoffs(const std::string& address);
  // Runs every node's periodic work (Sweep each call; Tick when `tick`).
  void Periodic(bool tick);

 private:
  class GatewayTransport;
  struct SimNode;
  struct Pending;
  // Counts an op a gateway sends; the node it goes on to, with `done` wrapped to count it in
  // flight, or nullopt when it ends here (refused, or taken by a silent node).
  std::optional<size_t> Accept(const std::string& address, const OpSpec& op,
                               Transport::Callback& done);
  void Deliver(int gateway, size_t node, std::vector<Pending> batch);
  void Arrive(int gateway, size_t node, uint64_t life, std::vector<uint8_t> frame,
              std::vector<Pending> batch);
  void Serve(int gateway, size_t node, uint64_t life, std::span<const uint8_t> frame,
             std::vector<Pending> batch);
  void Answer(int gateway, size_t node, std::vector<Pending> batch,
              std::vector<CallResult> results);
  int64_t OneWayUs(const SimNode& node);
  bool IsCut(int gateway, size_t node) const;
  std::optional<size_t> Find(const std::string& address) const;
  SimNode& Add(const std::string& address);

  SimScheduler& s_;
  const NetworkModel model_;
  std::mt19937_64 rng_;
  std::lognormal_distribution<double> delay_;
  std::vector<std::unique_ptr<SimNode>> nodes_;
  std::map<int, std::unique_ptr<GatewayTransport>> gateways_;
  struct CutRange {
    int from, to;
    size_t node;
  };
  std::vector<CutRange> cut_;
  uint64_t sent_total_ = 0;
  std::array<uint64_t, kOpKinds> sent_{};
  std::map<std::string, uint64_t> sent_by_policy_;
  std::map<std::string, uint64_t> sub_bucket_ops_;
  std::map<std::string, uint64_t> disconnects_;
  std::map<std::string, int64_t> in_flight_, max_in_flight_;
};

}  // namespace limiter::sim
