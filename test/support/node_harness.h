// NodeHarness: a real Node in the test's process, driven frame by frame as a connection
// drives it: a request built with RequestBuilder goes in, the verified wire::Reply comes out.
// The node's unit tests (ops, batches, authentication, roles, budgets, durable keys, hand-off,
// regions) use it, and the simulation tests reach their nodes through a Caller (which drives
// any Node); a frame is sent as a trusted in-process caller, or on a Session from the node's
// Authenticator as a connection would (the handshake included).
//
// Ownership: the harness owns its Node and, unless given the caller's, the policies and a
// manual clock. Thread-safety: thread-compatible; for frames from several threads at once,
// each thread sends through a Caller of its own (NewCaller: its own Worker).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/policy.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"
#include "server/durable_store.h"
#include "server/node.h"

namespace limiter::testing {

// The text of a reply's or an op's error; "" when it has none.
std::string ErrorOf(const wire::Reply& reply);
std::string ErrorOf(const wire::OpReply& op);

class NodeHarness {
 public:
  static constexpr int64_t kStartMs = 1'000'000;  // a manual clock's start: a whole second

  // One caller of the node: a Worker of its own and the reply it got last, which stays valid
  // until its next Send. A reply that is not one verified frame fails the test.
  class Caller {
   public:
    explicit Caller(Node& node);

    // A frame from a trusted in-process caller (Node::HandleFrame without a session).
    const wire::Reply& Send(std::span<const uint8_t> body);
    // The builder's frame; the builder is cleared for the next one.
    const wire::Reply& Send(RequestBuilder& b);
    // A frame on a connection's session; after() then says whether the node would close it.
    const wire::Reply& Send(Session& session, std::span<const uint8_t> body);
    const wire::Reply& Send(Session& session, RequestBuilder& b);
    // A frame of one op, and that op's reply (a reply of another number of ops fails the test).
    const wire::OpReply& One(RequestBuilder& b);
    // One CHECK, which must be answered Ok (the test fails with the error otherwise): whether
    // it was allowed.
    bool Check(std::string_view policy, std::string_view key, std::string_view tenant = {},
               int64_t cost = 1);
    // One CHECK's reply, whatever its status.
    const wire::OpReply& CheckReply(std::string_view policy, std::string_view key,
                                    std::string_view tenant = {}, int64_t cost = 1);

    Node::AfterFrame after() const { return after_; }
    Node::Worker& worker() { return *worker_; }
    // The last reply frame as the node wrote it (its length prefix included).
    const std::vector<uint8_t>& reply_bytes() const { return out_; }

   private:
    const wire::Reply& Decode();

    Node* node_;
    Node::Worker* worker_;
    Node::AfterFrame after_ = Node::AfterFrame::kContinue;
    std::vector<uint8_t> out_;
    std::vector<uint64_t> aligned_;
  };

  // A node over the policies of `yaml` (Policies: a file that does not parse fails the test),
  // on a manual clock of its own reading `clock_ms`.
  explicit NodeHarness(std::string_view yaml, NodeOptions options = {},
                       int64_t clock_ms = kStartMs);
  // A node over `policies`, which must outlive the harness, on a manual clock of its own.
  explicit NodeHarness(const PolicySet& policies, NodeOptions options = {},
                       int64_t clock_ms = kStartMs);
  // A node over `policies` on the caller's `clock` (both must outlive the harness), with the
  // database of its durable policies when given.
  NodeHarness(const PolicySet& policies, const Clock& clock, NodeOptions options = {},
              std::unique_ptr<DurableStore> durable = nullptr);
  ~NodeHarness();
  NodeHarness(const NodeHarness&) = delete;
  NodeHarness& operator=(const NodeHarness&) = delete;

  Node& node() { return *node_; }
  Node* operator->() { return node_.get(); }
  const PolicySet& policies() const { return policies_; }
  // The harness's own clock (not for a harness on the caller's clock).
  ManualClock& clock();
  // The caller the harness's own Send and Check use.
  Caller& caller() { return caller_; }
  // Another caller, with a worker of its own: one per thread.
  Caller NewCaller() { return Caller(*node_); }

  // The default caller's Send, One, Check, CheckReply, after, worker and reply_bytes.
  const wire::Reply& Send(std::span<const uint8_t> body) { return caller_.Send(body); }
  const wire::Reply& Send(RequestBuilder& b) { return caller_.Send(b); }
  const wire::Reply& Send(Session& session, std::span<const uint8_t> body) {
    return caller_.Send(session, body);
  }
  const wire::Reply& Send(Session& session, RequestBuilder& b) { return caller_.Send(session, b); }
  const wire::OpReply& One(RequestBuilder& b) { return caller_.One(b); }
  Node::AfterFrame after() const { return caller_.after(); }
  Node::Worker& worker() { return caller_.worker(); }
  const std::vector<uint8_t>& reply_bytes() const { return caller_.reply_bytes(); }

  bool Check(std::string_view policy, std::string_view key, std::string_view tenant = {},
             int64_t cost = 1) {
    return caller_.Check(policy, key, tenant, cost);
  }
  const wire::OpReply& CheckReply(std::string_view policy, std::string_view key,
                                  std::string_view tenant = {}, int64_t cost = 1) {
    return caller_.CheckReply(policy, key, tenant, cost);
  }
  // The STATS counter `name` (a name the node does not count fails the test, and is -1).
  int64_t Stat(std::string_view name) const;

 private:
  NodeHarness(std::unique_ptr<PolicySet> own_policies, const PolicySet* policies,
              std::unique_ptr<ManualClock> own_clock, const Clock* clock, NodeOptions options,
              std::unique_ptr<DurableStore> durable);

  std::unique_ptr<PolicySet> own_policies_;
  const PolicySet& policies_;
  std::unique_ptr<ManualClock> own_clock_;
  const Clock& clock_;
  std::unique_ptr<Node> node_;
  Caller caller_;
};

}  // namespace limiter::testing
