// A simulated network for client tests: a Transport that hands each op to a real Node after a
// simulated latency, and a cluster of real Nodes and gateways on one simulated clock
// (bench/sim_scheduler.h). Single threaded: everything runs inside RunUntil.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client/client_core.h"
#include "protocol/request_builder.h"
#include "bench/sim_scheduler.h"
#include "client/scheduler.h"
#include "client/transport.h"
#include "protocol/op.h"
#include "common/clock.h"
#include "protocol/frame_codec.h"
#include "common/policy_file.h"
#include "protocol/wire.h"
#include "server/node.h"

namespace limiter::sim {

class SimTransport final : public Transport {
 public:
  struct SimNode {
    Node* node = nullptr;
    Node::Worker* worker = nullptr;
    int64_t latency_us = 100;  // each way
    bool refuses = false;      // connections fail at once
    bool silent = false;       // accepts, never answers
  };

  explicit SimTransport(SimScheduler& s) : s_(s) {}

  void AddNode(const std::string& address, Node* node, int64_t latency_us = 100) {
    SimNode& n = nodes_[address];
    n.node = node;
    n.worker = &node->AddWorker();
    n.latency_us = latency_us;
  }
  SimNode& node(const std::string& address) { return nodes_.at(address); }
  uint64_t sent() const { return sent_; }
  uint64_t sent(OpKind kind) const { return by_kind_[static_cast<size_t>(kind)]; }
  uint64_t sent(const std::string& policy) const {
    auto it = by_policy_.find(policy);
    return it == by_policy_.end() ? 0 : it->second;
  }

  // Ops on sub-buckets of split keys, by the node they went to.
  const std::map<std::string, uint64_t>& sub_bucket_ops() const { return sub_bucket_ops_; }

  // Sees every op sent, with the simulated time (before it is delivered).
  std::function<void(int64_t now_us, const std::string& address, const OpSpec& op)> on_send;
  // The most ops that were in flight to one node at once.
  int64_t max_in_flight(const std::string& address) const {
    auto it = max_in_flight_.find(address);
    return it == max_in_flight_.end() ? 0 : it->second;
  }

  void Send(const std::string& address, OpSpec op, Callback done) override {
    if (on_send) on_send(s_.NowUs(), address, op);
    ++sent_;
    ++by_kind_[static_cast<size_t>(op.kind)];
    ++by_policy_[op.policy];
    if (op.sub.k != 0) ++sub_bucket_ops_[address];
    auto it = nodes_.find(address);
    if (it == nodes_.end() || it->second.refuses) {
      s_.Post([done] { done(CallResult{CallStatus::kConnection, "refused", {}}); });
      return;
    }
    if (it->second.silent) return;
    SimNode* n = &it->second;
    int64_t& in_flight = in_flight_[address];
    max_in_flight_[address] = std::max(max_in_flight_[address], ++in_flight);
    done = [this, address, done](CallResult r) {
      --in_flight_[address];
      done(std::move(r));
    };
    s_.After(n->latency_us, [this, n, op = std::move(op), done] {
      RequestBuilder b;
      AddOp(b, 1, op);
      std::vector<uint8_t> out;
      n->node->HandleFrame(*n->worker, b.Finish(), out);
      const FrameResult f = DecodeFrame(out, 64u << 20);
      std::vector<uint64_t> aligned;
      const wire::Reply* reply = VerifiedReply(f.body, aligned);
      CallResult result;
      if (reply && reply->ops() && reply->ops()->size() == 1) {
        result.answer = FromWire(*reply->ops()->Get(0));
      } else {
        result.status = CallStatus::kConnection;
        result.message = "bad reply";
      }
      s_.After(n->latency_us, [done, result = std::move(result)] { done(result); });
    });
  }
  void Disconnect(const std::string& address) override { ++disconnects_[address]; }
  uint64_t disconnects(const std::string& address) const {
    auto it = disconnects_.find(address);
    return it == disconnects_.end() ? 0 : it->second;
  }

 private:
  SimScheduler& s_;
  std::map<std::string, SimNode> nodes_;
  uint64_t sent_ = 0;
  uint64_t by_kind_[kOpKinds] = {};  // by OpKind
  std::map<std::string, uint64_t> by_policy_;
  std::map<std::string, uint64_t> sub_bucket_ops_;
  std::map<std::string, uint64_t> disconnects_;
  std::map<std::string, int64_t> in_flight_, max_in_flight_;
};

// A cluster in simulated time: real Nodes, each with its own options (member list,
// generation), and gateways of the real ClientCore, on one scheduler, clock and transport.
class SimCluster {
 public:
  explicit SimCluster(const char* policies) {
    Result<PolicySet> p = ParsePolicies(policies, "sim.yaml");
    EXPECT_TRUE(p.ok()) << p.error();
    policies_ = std::move(p).value();
  }

  Node& AddNode(const std::string& address, NodeOptions options = {}, int64_t latency_us = 100) {
    return AddNodeWith(policies_, address, std::move(options), latency_us);
  }
  // A node that loads another policy file than the gateways.
  Node& AddNodeWithPolicies(const char* policies, const std::string& address,
                            NodeOptions options = {}) {
    Result<PolicySet> p = ParsePolicies(policies, "other.yaml");
    EXPECT_TRUE(p.ok()) << p.error();
    other_policies_.push_back(std::make_unique<PolicySet>(std::move(p).value()));
    return AddNodeWith(*other_policies_.back(), address, std::move(options), 100);
  }
  ClientCore& AddGateway(std::vector<std::string> members, ClientCoreOptions options = {}) {
    if (options.seed == 0) options.seed = gateways_.size() + 1;
    gateways_.push_back(std::make_unique<ClientCore>(policies_, std::move(members), sched_,
                                                     transport_, options));
    return *gateways_.back();
  }

  // Runs the scheduler until the decision is made (at most 10 s of simulated time).
  client::Decision Decide(ClientCore& gateway, const client::Request& r) {
    std::optional<client::Decision> out;
    gateway.DecideAsync(r, [&](client::Decision d) { out = std::move(d); });
    for (int i = 0; i < 100'000 && !out; ++i) sched_.RunFor(100);
    EXPECT_TRUE(out.has_value()) << "no decision within 10 s of simulated time";
    return out ? std::move(*out) : client::Decision{};
  }

  const PolicySet& policies() const { return policies_; }
  SimScheduler& sched() { return sched_; }
  SimTransport& transport() { return transport_; }

 private:
  Node& AddNodeWith(const PolicySet& policies, const std::string& address, NodeOptions options,
                    int64_t latency_us) {
    if (!options.members.empty() && options.self.empty()) options.self = address;
    nodes_.push_back(std::make_unique<Node>(policies, clock_, std::move(options)));
    transport_.AddNode(address, nodes_.back().get(), latency_us);
    return *nodes_.back();
  }

  PolicySet policies_;
  std::vector<std::unique_ptr<PolicySet>> other_policies_;
  SimScheduler sched_;
  SimClock clock_{sched_};
  SimTransport transport_{sched_};
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<ClientCore>> gateways_;
};

}  // namespace limiter::sim
