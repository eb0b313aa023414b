// SimCluster: a cluster in simulated time for the client tests: real Nodes, each with its own
// options (member list, generation), and gateways of the real ClientCore, on one scheduler,
// one clock and the simulated network of the simulation library (sim/network.h), in its
// client tests' model (NetworkModel::Instant). Single threaded: everything runs inside the
// scheduler's RunUntil.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/client_core.h"
#include "common/policy.h"
#include "server/node.h"
#include "sim/network.h"
#include "sim/scheduler.h"
#include "test/support/policies.h"

namespace limiter::sim {

class SimCluster {
 public:
  explicit SimCluster(const char* policies) : policies_(testing::Policies(policies, "sim.yaml")) {}

  // A node at `address`, `latency_us` from every gateway each way; with a member list and no
  // `self`, it is `address`.
  Node& AddNode(const std::string& address, NodeOptions options = {}, int64_t latency_us = 100) {
    return AddNodeWith(policies_, address, std::move(options), latency_us);
  }
  // A node that loads another policy file than the gateways.
  Node& AddNodeWithPolicies(const char* policies, const std::string& address,
                            NodeOptions options = {}) {
    other_policies_.push_back(
        std::make_unique<PolicySet>(testing::Policies(policies, "other.yaml")));
    return AddNodeWith(*other_policies_.back(), address, std::move(options), 100);
  }
  ClientCore& AddGateway(std::vector<std::string> members, ClientCoreOptions options = {}) {
    const int number = static_cast<int>(gateways_.size());
    if (options.seed == 0) options.seed = gateways_.size() + 1;
    gateways_.push_back(std::make_unique<ClientCore>(policies_, std::move(members), sched_,
                                                     network_.Gateway(number), options));
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
  SimNetwork& network() { return network_; }
  Node& node(const std::string& address) { return *network_.endpoint(address).node; }

 private:
  Node& AddNodeWith(const PolicySet& policies, const std::string& address, NodeOptions options,
                    int64_t latency_us) {
    if (!options.members.empty() && options.self.empty()) options.self = address;
    nodes_.push_back(std::make_unique<Node>(policies, clock_, std::move(options)));
    network_.AddNode(address, *nodes_.back()).latency_us = latency_us;
    return *nodes_.back();
  }

  PolicySet policies_;
  std::vector<std::unique_ptr<PolicySet>> other_policies_;
  SimScheduler sched_;
  SimClock clock_{sched_};
  SimNetwork network_{sched_};
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<ClientCore>> gateways_;
};

}  // namespace limiter::sim
