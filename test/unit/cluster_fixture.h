// The fixture of the hand-off tests: real Nodes in one process, each on its own manual clock
// (far apart, as two machines' monotonic clocks are), hand-off frames carried by a sink that
// hands each batch to the receiving node's HandleFrame.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "protocol/request_builder.h"
#include "common/policy_file.h"
#include "protocol/rules.h"
#include "protocol/wire.h"
#include "server/node.h"

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
  Cluster() {
    Result<PolicySet> p = ParsePolicies(kPolicies, "handoff.yaml");
    EXPECT_TRUE(p.ok()) << p.error();
    policies_ = std::move(p).value();
  }

  struct Member {
    std::unique_ptr<ManualClock> clock;
    std::unique_ptr<Node> node;
    Node::Worker* worker = nullptr;
  };

  // A node named `name` with `members` at generation 1; its clock reads `clock_ms`.
  Node& Add(const std::string& name, std::vector<std::string> members, int64_t clock_ms,
            bool join_gate = false) {
    Member& m = members_[name];
    m.clock = std::make_unique<ManualClock>(clock_ms);
    NodeOptions o;
    o.name = name;
    o.self = name;
    o.members = std::move(members);
    o.generation = 1;
    o.handoff_deadline_ms = 5000;
    o.join_gate = join_gate;
    o.hot.split_above = 500;
    o.hot.sample_every = 1;
    m.node = std::make_unique<Node>(policies_, *m.clock, o);
    m.worker = &m.node->AddWorker();
    return *m.node;
  }
  Node& node(const std::string& name) { return *members_.at(name).node; }
  ManualClock& clock(const std::string& name) { return *members_.at(name).clock; }
  void AdvanceAll(int64_t ms) {
    for (auto& [name, m] : members_) m.clock->Advance(ms);
  }

  // One frame to a node; its verified reply (valid until the next call).
  const wire::Reply& Send(const std::string& to, std::span<const uint8_t> body) {
    Member& m = members_.at(to);
    out_.clear();
    m.node->HandleFrame(*m.worker, body, out_);
    const FrameResult f = DecodeFrame(out_, 64u << 20);
    EXPECT_EQ(f.status, FrameStatus::kFrame);
    const wire::Reply* reply = VerifiedReply(f.body, aligned_);
    EXPECT_NE(reply, nullptr);
    return *reply;
  }
  const wire::OpReply& One(const std::string& to, RequestBuilder& b) {
    const wire::Reply& r = Send(to, b.Finish());
    b.Clear();
    EXPECT_EQ(r.ops()->size(), 1u);
    return *r.ops()->Get(0);
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
    for (const auto& [n, v] : node(on).Stats()) {
      if (n == name) return v;
    }
    ADD_FAILURE() << "no stat " << name;
    return -1;
  }

  PolicySet policies_;
  std::map<std::string, Member> members_;
  std::map<std::string, int> frames_to_;
  std::set<std::string> unreachable_;
  std::string last_refusal_;
  std::vector<uint8_t> out_;
  std::vector<uint64_t> aligned_;
};

// Keys named so that each of the two nodes owns some.
inline std::vector<std::string> Keys(int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("user-" + std::to_string(i));
  return keys;
}

}  // namespace limiter::test_cluster
