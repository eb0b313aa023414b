// The fixture of the hand-off tests: real Nodes in one process, each on its own manual clock
// (far apart, as two machines' monotonic clocks are), hand-off frames carried by a sink that
// hands each batch to the receiving node's HandleFrame.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "protocol/request_builder.h"
#include "protocol/rules.h"
#include "protocol/wire.h"
#include "server/node.h"
#include "test/support/node_harness.h"
#include "test/support/policies.h"

namespace limiter::test_cluster {

inline const char* kPolicies = R"(
policies:
  - {name: login, algorithm: token_bucket, limit: 10, window: 1m, class: security, mode: strict}
  - {name: api, algorithm: gcra, limit: 100, window: 1m, burst: 20, class: contract,
     lease: {size: 5, ttl: 2s}}
  - {name: day, algorithm: fixed_window, limit: 50, window: 1h, class: contract}
  - {name: hot, algorithm: token_bucket, limit: 100000, window: 1s, class: contract}
)";

class Cluster : public ::testing::Test {
 protected:
  // A node named `name` with `members` at generation 1; its clock reads `clock_ms`.
  Node& Add(const std::string& name, std::vector<std::string> members, int64_t clock_ms,
            bool join_gate = false) {
    NodeOptions o;
    o.name = name;
    o.self = name;
    o.members = std::move(members);
    o.generation = 1;
    o.handoff_deadline_ms = 5000;
    o.join_gate = join_gate;
    o.hot.split_above = 500;
    o.hot.sample_every = 1;
    members_[name] = std::make_unique<testing::NodeHarness>(policies_, o, clock_ms);
    return members_[name]->node();
  }
  Node& node(const std::string& name) { return members_.at(name)->node(); }
  ManualClock& clock(const std::string& name) { return members_.at(name)->clock(); }
  void AdvanceAll(int64_t ms) {
    for (auto& [name, m] : members_) m->clock().Advance(ms);
  }

  // One frame to a node; its verified reply (valid until the next frame to that node).
  const wire::Reply& Send(const std::string& to, std::span<const uint8_t> body) {
    return members_.at(to)->Send(body);
  }
  const wire::OpReply& One(const std::string& to, RequestBuilder& b) {
    return members_.at(to)->One(b);
  }
  wire::Status Check(const std::string& to, const std::string& policy, const std::string& key,
                     bool* allowed = nullptr) {
    RequestBuilder b;
    b.Check(1, policy, key);
    const wire::OpReply& r = One(to, b);
    if (allowed) *allowed = r.allowed();
    return r.status();
  }
  // How many of n checks the owner admits (every answer must be Ok).
  int Admitted(const std::string& to, const std::string& policy, const std::string& key, int n) {
    int admitted = 0;
    for (int i = 0; i < n; ++i) {
      bool allowed = false;
      EXPECT_EQ(Check(to, policy, key, &allowed), wire::Status::Ok) << key << " on " << to;
      admitted += allowed;
    }
    return admitted;
  }
  std::string OwnerOf(const std::string& via, const std::string& key) {
    return node(via).membership()->ring.Owner(key);
  }

  // Delivers hand-off frames to the named node in-process; counts what each was sent.
  Handoff::Sink Sink() {
    return [this](const std::string& member, std::span<const uint8_t> frame) -> int64_t {
      ++frames_to_[member];
      if (!members_.count(member) || unreachable_.count(member)) return -1;
      const wire::Reply& r = Send(member, frame);
      if (r.ops() == nullptr || r.ops()->size() != 1) return -1;
      const wire::OpReply* op = r.ops()->Get(0);
      if (op->status() != wire::Status::Ok) {
        last_refusal_ = op->error() ? op->error()->str() : "";
        return -1;
      }
      return op->granted();
    };
  }
  std::optional<HandoffStats> RunHandoff(const std::string& on) {
    return node(on).handoff().RunNext(Sink(), std::chrono::milliseconds(0));
  }

  int64_t Stat(const std::string& on, const std::string& name) {
    return members_.at(on)->Stat(name);
  }

  const PolicySet policies_ = testing::Policies(kPolicies, "handoff.yaml");
  std::map<std::string, std::unique_ptr<testing::NodeHarness>> members_;
  std::map<std::string, int> frames_to_;
  std::set<std::string> unreachable_;
  std::string last_refusal_;
};

// Keys named so that each of the two nodes owns some.
inline std::vector<std::string> Keys(int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("user-" + std::to_string(i));
  return keys;
}

}  // namespace limiter::test_cluster
