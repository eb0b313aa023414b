#include "test/support/node_harness.h"

#include <gtest/gtest.h>

#include <utility>

#include "protocol/frame_codec.h"
#include "test/support/policies.h"

namespace limiter::testing {
namespace {

// A reply and an op reply that hold nothing, returned in place of what is missing (the test
// has failed already), so that no reference is ever bound to null.
template <class Table, class Create>
const Table& Empty(Create create) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(create(fbb));
  static thread_local std::vector<uint8_t> bytes;
  bytes.assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  return *flatbuffers::GetRoot<Table>(bytes.data());
}
const wire::Reply& EmptyReply() {
  return Empty<wire::Reply>(
      [](flatbuffers::FlatBufferBuilder& fbb) { return wire::CreateReply(fbb); });
}
const wire::OpReply& EmptyOpReply() {
  return Empty<wire::OpReply>(
      [](flatbuffers::FlatBufferBuilder& fbb) { return wire::CreateOpReply(fbb); });
}

}  // namespace

std::string ErrorOf(const wire::Reply& reply) {
  return reply.error() ? reply.error()->str() : std::string();
}
std::string ErrorOf(const wire::OpReply& op) {
  return op.error() ? op.error()->str() : std::string();
}

NodeHarness::Caller::Caller(Node& node) : node_(&node), worker_(&node.AddWorker()) {}

const wire::Reply& NodeHarness::Caller::Send(std::span<const uint8_t> body) {
  out_.clear();
  node_->HandleFrame(*worker_, body, out_);
  after_ = Node::AfterFrame::kContinue;
  return Decode();
}

const wire::Reply& NodeHarness::Caller::Send(RequestBuilder& b) {
  const wire::Reply& r = Send(b.Finish());
  b.Clear();
  return r;
}

const wire::Reply& NodeHarness::Caller::Send(Session& session, std::span<const uint8_t> body) {
  out_.clear();
  after_ = node_->HandleFrame(*worker_, session, body, out_);
  return Decode();
}

const wire::Reply& NodeHarness::Caller::Send(Session& session, RequestBuilder& b) {
  const wire::Reply& r = Send(session, b.Finish());
  b.Clear();
  return r;
}

const wire::OpReply& NodeHarness::Caller::One(RequestBuilder& b) {
  const wire::Reply& r = Send(b);
  const size_t ops = r.ops() ? r.ops()->size() : 0;
  EXPECT_EQ(ops, 1u) << "a frame of one op; the reply's error: " << ErrorOf(r);
  return ops == 1 ? *r.ops()->Get(0) : EmptyOpReply();
}

const wire::Reply& NodeHarness::Caller::Decode() {
  const FrameResult f = DecodeFrame(out_, 64u << 20);
  EXPECT_EQ(f.status, FrameStatus::kFrame);
  EXPECT_EQ(f.consumed, out_.size()) << "the node appended more than one reply frame";
  const wire::Reply* reply = VerifiedReply(f.body, aligned_);
  EXPECT_NE(reply, nullptr) << "the reply does not verify";
  return reply ? *reply : EmptyReply();
}

NodeHarness::NodeHarness(std::string_view yaml, NodeOptions options, int64_t clock_ms)
    : NodeHarness(std::make_unique<PolicySet>(Policies(yaml)), nullptr,
                  std::make_unique<ManualClock>(clock_ms), nullptr, std::move(options), nullptr) {}

NodeHarness::NodeHarness(const PolicySet& policies, NodeOptions options, int64_t clock_ms)
    : NodeHarness(nullptr, &policies, std::make_unique<ManualClock>(clock_ms), nullptr,
                  std::move(options), nullptr) {}

NodeHarness::NodeHarness(const PolicySet& policies, const Clock& clock, NodeOptions options,
                         std::unique_ptr<DurableStore> durable)
    : NodeHarness(nullptr, &policies, nullptr, &clock, std::move(options), std::move(durable)) {}

NodeHarness::NodeHarness(std::unique_ptr<PolicySet> own_policies, const PolicySet* policies,
                         std::unique_ptr<ManualClock> own_clock, const Clock* clock,
                         NodeOptions options, std::unique_ptr<DurableStore> durable)
    : own_policies_(std::move(own_policies)),
      policies_(own_policies_ ? *own_policies_ : *policies),
      own_clock_(std::move(own_clock)),
      clock_(own_clock_ ? *own_clock_ : *clock),
      node_(std::make_unique<Node>(policies_, clock_, std::move(options), std::move(durable))),
      caller_(*node_) {}

NodeHarness::~NodeHarness() = default;

ManualClock& NodeHarness::clock() {
  LIMITER_CHECK(own_clock_ != nullptr, "this harness runs on the caller's clock");
  return *own_clock_;
}

bool NodeHarness::Caller::Check(std::string_view policy, std::string_view key,
                                std::string_view tenant, int64_t cost) {
  const wire::OpReply& r = CheckReply(policy, key, tenant, cost);
  EXPECT_EQ(r.status(), wire::Status::Ok) << policy << "/" << key << ": " << ErrorOf(r);
  return r.allowed();
}

const wire::OpReply& NodeHarness::Caller::CheckReply(std::string_view policy, std::string_view key,
                                                     std::string_view tenant, int64_t cost) {
  RequestBuilder b;
  b.Check(1, policy, key, tenant, cost);
  return One(b);
}

int64_t NodeHarness::Stat(std::string_view name) const {
  for (const auto& [n, v] : node_->Stats()) {
    if (n == name) return v;
  }
  ADD_FAILURE() << "the node counts no " << name;
  return -1;
}

}  // namespace limiter::testing
