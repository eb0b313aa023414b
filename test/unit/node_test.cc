#include "server/node.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "protocol/request_builder.h"
#include "protocol/ring.h"
#include "protocol/wire.h"
#include "test/support/node_harness.h"

namespace limiter {
namespace {

const char* kPolicies = R"(
policies:
  - {name: tenant, algorithm: gcra, limit: 300, window: 1h, class: contract}
  - {name: api_key, algorithm: token_bucket, limit: 100, window: 1h, class: contract,
     parent: tenant, costs: {report: 20}}
  - {name: ip, algorithm: fixed_window, limit: 5, window: 1s, class: security}
  - {name: user, algorithm: sliding_log, limit: 3, window: 1s, class: contract}
  - {name: leased, algorithm: token_bucket, limit: 10, window: 1s, class: contract,
     lease: {size: 4, ttl: 2s}}
)";

class NodeTest : public ::testing::Test {
 protected:
  explicit NodeTest(int64_t max_keys = 1000, size_t stripes = 8)
      : node_(kPolicies, Options(max_keys, stripes)) {}

  static NodeOptions Options(int64_t max_keys, size_t stripes) {
    NodeOptions options;
    options.store.max_keys = max_keys;
    options.store.stripes = stripes;
    return options;
  }

  // One op that must fail with `expected`: its error.
  std::string ErrorOf(RequestBuilder& b, wire::Status expected) {
    const wire::OpReply& r = node_.One(b);
    EXPECT_EQ(r.status(), expected);
    EXPECT_FALSE(r.allowed());
    return testing::ErrorOf(r);
  }

  testing::NodeHarness node_;
  ManualClock& clock_ = node_.clock();
};

TEST_F(NodeTest, CheckAdmitsUpToTheLimitThenSaysWhenToRetry) {
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(node_.Check("ip", "10.0.0.1"));
  RequestBuilder b;
  b.Check(42, "ip", "10.0.0.1");
  const wire::OpReply& r = node_.One(b);
  EXPECT_EQ(r.id(), 42u);
  EXPECT_FALSE(r.allowed());
  EXPECT_EQ(r.denied_by(), 0);
  EXPECT_EQ(r.denied_policy()->str(), "ip");
  EXPECT_EQ(r.retry_after_ms(), 1000);  // 1,000,000 is a window start
  ASSERT_EQ(r.results()->size(), 1u);
  EXPECT_EQ(r.results()->Get(0)->remaining(), 0);
  EXPECT_TRUE(node_.Check("ip", "10.0.0.2"));  // other keys are untouched
  clock_.Advance(1000);
  EXPECT_TRUE(node_.Check("ip", "10.0.0.1"));
}

TEST_F(NodeTest, NestedLimitsChargeTheTenantToo) {
  // 50 keys of 100 each under a tenant of 300: the tenant is the limit.
  int allowed = 0;
  for (int round = 0; round < 10; ++round) {
    for (int k = 0; k < 50; ++k) {
      allowed += node_.Check("api_key", std::to_string(k) + "key", "acme");
    }
  }
  EXPECT_EQ(allowed, 300);
  RequestBuilder b;
  b.Check(1, "api_key", "0key", "acme");
  const wire::OpReply& r = node_.One(b);
  EXPECT_FALSE(r.allowed());
  EXPECT_EQ(r.denied_policy()->str(), "tenant");
  EXPECT_EQ(r.denied_by(), 1);  // results: the key, then its tenant
  ASSERT_EQ(r.results()->size(), 2u);
  EXPECT_TRUE(r.results()->Get(0)->allowed());
  EXPECT_EQ(r.results()->Get(0)->remaining(), 100 - 6);  // not charged by the denial
  EXPECT_TRUE(node_.Check("api_key", "0key", "other-tenant"));
}

TEST_F(NodeTest, AMultiLimitCheckChargesAllOrNone) {
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(node_.Check("user", "u1"));
  const std::pair<std::string_view, std::string_view> limits[] = {{"ip", "1.2.3.4"},
                                                                  {"user", "u1"}};
  RequestBuilder b;
  b.CheckMany(7, limits, "", 1);
  const wire::OpReply& r = node_.One(b);
  EXPECT_FALSE(r.allowed());
  EXPECT_EQ(r.denied_by(), 1);
  // The ip limit passed but was not charged: all five are still there.
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(node_.Check("ip", "1.2.3.4"));
  EXPECT_FALSE(node_.Check("ip", "1.2.3.4"));
}

TEST_F(NodeTest, DryRunChargesNothingAndOperationsHaveCosts) {
  RequestBuilder b;
  b.Check(1, "api_key", "k", "t", 1, "report", /*dry_run=*/true);
  const wire::OpReply& dry = node_.One(b);
  EXPECT_TRUE(dry.allowed());
  EXPECT_EQ(dry.results()->Get(0)->remaining(), 100);  // nothing was charged
  b.Check(2, "api_key", "k", "t", 1, "report");
  EXPECT_EQ(node_.One(b).results()->Get(0)->remaining(), 80);
  b.Check(3, "api_key", "k", "t", 1, "report");
  EXPECT_EQ(node_.One(b).results()->Get(0)->remaining(), 60);
}

TEST_F(NodeTest, LeaseGrantsWhatTheWholeChainHasAndReturnGivesItBack) {
  RequestBuilder b;
  b.Lease(1, "leased", "k", "", 7);
  const wire::OpReply& first = node_.One(b);
  EXPECT_EQ(first.status(), wire::Status::Ok);
  EXPECT_EQ(first.granted(), 7);
  EXPECT_EQ(first.granted_at_ms(), clock_.NowMs());
  EXPECT_EQ(first.lease_ttl_ms(), 2000);
  EXPECT_EQ(first.suggested_lease(), 4);
  const uint64_t first_lease = first.lease_id();
  EXPECT_NE(first_lease, 0u);
  b.Lease(2, "leased", "k", "", 7);
  const wire::OpReply& second = node_.One(b);
  EXPECT_EQ(second.granted(), 3);
  EXPECT_NE(second.lease_id(), first_lease);
  b.Lease(3, "leased", "k", "", 7);
  const wire::OpReply& empty = node_.One(b);
  EXPECT_EQ(empty.granted(), 0);
  EXPECT_FALSE(empty.allowed());
  EXPECT_EQ(empty.retry_after_ms(), 700);  // until all seven asked for are there again
  const int64_t leased_at = clock_.NowMs();
  b.Return(4, "leased", "k", "", 5, leased_at, first_lease);
  const wire::OpReply& returned = node_.One(b);
  EXPECT_EQ(returned.status(), wire::Status::Ok);
  EXPECT_EQ(returned.granted(), 5);  // units given back
  b.Lease(5, "leased", "k", "", 9);
  EXPECT_EQ(node_.One(b).granted(), 5);

  // Through a parent: the tenant's remaining bounds the grant.
  for (int i = 0; i < 299; ++i) ASSERT_TRUE(node_.Check("tenant", "acme"));
  b.Lease(6, "api_key", "k9", "acme", 10);
  EXPECT_EQ(node_.One(b).granted(), 1);
}

TEST_F(NodeTest, InspectShowsTheStateAndStatsTheCounters) {
  RequestBuilder b;
  b.Inspect(1, "user", "nobody");
  const wire::OpReply& fresh = node_.One(b);
  EXPECT_EQ(fresh.status(), wire::Status::Ok);
  ASSERT_NE(fresh.state(), nullptr);
  EXPECT_FALSE(fresh.state()->tracked());
  EXPECT_EQ(fresh.state()->algorithm()->str(), "sliding_log");
  EXPECT_EQ(fresh.results()->Get(0)->remaining(), 3);
  EXPECT_TRUE(node_.Check("user", "u2"));
  EXPECT_TRUE(node_.Check("user", "u2"));
  b.Inspect(2, "user", "u2");
  const wire::OpReply& used = node_.One(b);
  EXPECT_TRUE(used.state()->tracked());
  EXPECT_EQ(used.results()->Get(0)->remaining(), 1);
  bool saw_total = false;
  for (const wire::Stat* f : *used.state()->fields()) {
    if (f->name()->str() == "total") {
      saw_total = true;
      EXPECT_EQ(f->value(), 2);
    }
  }
  EXPECT_TRUE(saw_total);

  b.Stats(3);
  const wire::OpReply& stats = node_.One(b);
  ASSERT_NE(stats.stats(), nullptr);
  bool saw_keys = false;
  for (const wire::Stat* s : *stats.stats()) {
    if (s->name()->str() == "keys") {
      saw_keys = true;
      EXPECT_EQ(s->value(), 1);
    }
  }
  EXPECT_TRUE(saw_keys);
}

TEST_F(NodeTest, HelloTellsTheProtocolVersion) {
  RequestBuilder b;
  b.Hello("test");
  const wire::Reply& r = node_.Send(b);
  ASSERT_NE(r.hello(), nullptr);
  EXPECT_EQ(r.hello()->protocol_version(), kProtocolVersion);
  EXPECT_EQ(r.hello()->max_frame_bytes(), kDefaultMaxFrameBytes);
  EXPECT_EQ(r.ops()->size(), 0u);
}

TEST_F(NodeTest, BadOpsGetErrorRepliesAndTheRestOfTheFrameIsServed) {
  RequestBuilder b;
  b.Check(1, "nope", "k");
  EXPECT_EQ(ErrorOf(b, wire::Status::UnknownPolicy), "limits[0].policy: no policy named 'nope'");
  b.Check(1, "ip", "");
  EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest), "limits[0].key is empty");
  b.Check(1, "ip", std::string(257, 'k'));
  EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest),
            "limits[0].key is 257 bytes; at most 256 are allowed");
  for (int64_t cost : {int64_t{0}, int64_t{-5}, int64_t{1'000'000'001}}) {
    b.Check(1, "ip", "k", "", cost);
    EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest),
              "cost must be between 1 and 1000000000, got " + std::to_string(cost));
  }
  b.Check(1, "api_key", "k");
  EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest),
            "limits[0]: policy 'api_key' nests under 'tenant'; the request needs a tenant");
  b.Lease(1, "ip", "k", "", 1);
  EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest),
            "policy 'ip' is mode: strict; it takes CHECK, not LEASE");
  b.Return(1, "leased", "k", "", 1, clock_.NowMs() + 1, 77);
  EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest), "leased_at_ms " +
                                                      std::to_string(clock_.NowMs() + 1) +
                                                      " is not a time this node granted a lease");
  b.Return(1, "leased", "k", "", 1, clock_.NowMs(), 0);
  EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest),
            "RETURN needs the lease_id of the LEASE its units came from");
  b.Return(1, "leased", "k", "", 1, clock_.NowMs(), 77);
  EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest),
            "lease 77 is not outstanding on this node (never granted here, lapsed, or granted "
            "before the node restarted)");
  b.Return(1, "ip", "k", "", 1, clock_.NowMs(), 77);
  EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest),
            "policy 'ip' is mode: strict; nothing of it is ever leased, so nothing can be "
            "returned");
  const std::pair<std::string_view, std::string_view> twice[] = {{"ip", "a"}, {"ip", "a"}};
  b.CheckMany(1, twice, "", 1);
  EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest), "limits[1] repeats an earlier limit");
  std::vector<std::pair<std::string_view, std::string_view>> many(17, {"ip", "x"});
  b.CheckMany(1, many, "", 1);
  EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest), "the op names 17 limits; at most 16 are allowed");
  b.CheckMany(1, {}, "", 1);
  EXPECT_EQ(ErrorOf(b, wire::Status::BadRequest), "the op names no limit");

  // One frame mixing bad and good ops: each gets its own answer.
  b.Check(10, "ip", "", "", 1);
  b.Check(11, "ip", "fine");
  b.Check(12, "ip", "fine", "", 0);
  const wire::Reply& mixed = node_.Send(b);
  ASSERT_EQ(mixed.ops()->size(), 3u);
  EXPECT_EQ(mixed.ops()->Get(0)->status(), wire::Status::BadRequest);
  EXPECT_EQ(mixed.ops()->Get(1)->status(), wire::Status::Ok);
  EXPECT_TRUE(mixed.ops()->Get(1)->allowed());
  EXPECT_EQ(mixed.ops()->Get(2)->id(), 12u);
  EXPECT_EQ(mixed.ops()->Get(2)->status(), wire::Status::BadRequest);
  EXPECT_GE(node_.Stat("ops_check_error"), 10);
}

TEST_F(NodeTest, UnknownOpTypeIsAnErrorReply) {
  // Build an op whose type byte is out of the enum's range.
  flatbuffers::FlatBufferBuilder fbb;
  wire::OpBuilder op(fbb);
  op.add_id(5);
  op.add_type(static_cast<wire::OpType>(10));
  const auto o = op.Finish();
  const auto ops = fbb.CreateVector(&o, 1);
  wire::RequestBuilder req(fbb);
  req.add_ops(ops);
  fbb.Finish(req.Finish());
  const wire::Reply& r = node_.Send({fbb.GetBufferPointer(), fbb.GetSize()});
  ASSERT_EQ(r.ops()->size(), 1u);
  EXPECT_EQ(r.ops()->Get(0)->id(), 5u);
  EXPECT_EQ(r.ops()->Get(0)->status(), wire::Status::BadRequest);
  EXPECT_EQ(r.ops()->Get(0)->error()->str(), "unknown op type 10");
  EXPECT_EQ(node_.Stat("ops_unknown_error"), 1);
}

TEST_F(NodeTest, ABodyThatFailsVerificationGetsAnErrorReply) {
  const std::vector<uint8_t> garbage = {0xff, 0xff, 0xff, 0x7f, 1, 2, 3, 4, 5, 6, 7, 8};
  const wire::Reply& r = node_.Send(garbage);
  ASSERT_NE(r.error(), nullptr);
  EXPECT_EQ(r.error()->str(), "frame is not a valid Request (FlatBuffers verification failed)");
  EXPECT_EQ(node_.Stat("bad_frames_invalid"), 1);
  EXPECT_TRUE(node_.Check("ip", "still-serving"));
}

class SmallNodeTest : public NodeTest {
 protected:
  // One stripe: reclaiming at the bound looks only at the stripes an op has locked, and the
  // table's hash seed is random per process.
  SmallNodeTest() : NodeTest(/*max_keys=*/3, /*stripes=*/1) {}
};

TEST_F(SmallNodeTest, NewKeysAreRefusedAtTheBoundUntilOldOnesExpire) {
  EXPECT_TRUE(node_.Check("ip", "a"));
  EXPECT_TRUE(node_.Check("ip", "b"));
  EXPECT_TRUE(node_.Check("ip", "c"));
  RequestBuilder b;
  b.Check(1, "ip", "d");
  EXPECT_EQ(ErrorOf(b, wire::Status::KeysExhausted),
            "the node holds its maximum of 3 keys; new keys are refused");
  EXPECT_EQ(node_.Stat("refusals"), 1);
  EXPECT_TRUE(node_.Check("ip", "a"));  // known keys are still served
  // Nothing was charged for the refused op's other limits either.
  b.Check(2, "tenant", "t1");
  EXPECT_EQ(ErrorOf(b, wire::Status::KeysExhausted),
            "the node holds its maximum of 3 keys; new keys are refused");
  // A second later every fixed window has passed: the keys carry nothing and make room.
  clock_.Advance(1000);
  EXPECT_TRUE(node_.Check("ip", "d"));
  EXPECT_GE(node_.Stat("evictions"), 1);
}

TEST_F(SmallNodeTest, ReclaimingAtTheBoundCanTakeTheOpsOwnExpiredKeys) {
  EXPECT_TRUE(node_.Check("ip", "a"));
  EXPECT_TRUE(node_.Check("ip", "b"));
  EXPECT_TRUE(node_.Check("ip", "c"));
  clock_.Advance(1000);  // all three expired, still held
  // "a" is known but expired, "d" is new: reclaiming for "d" also removes "a".
  const std::pair<std::string_view, std::string_view> limits[] = {{"ip", "a"}, {"ip", "d"}};
  RequestBuilder b;
  b.CheckMany(1, limits, "", 1);
  EXPECT_TRUE(node_.One(b).allowed());
  EXPECT_GE(node_.Stat("keys"), 2);  // a and d, and whatever of b and c shared no locked stripe
  EXPECT_LE(node_.Stat("keys"), 3);
  clock_.Advance(1000);
  while (node_->Sweep() > 0) {
  }
  EXPECT_EQ(node_.Stat("keys"), 0);
}

TEST_F(NodeTest, SweepReclaimsExpiredKeysOnly) {
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(node_.Check("ip", std::to_string(i) + "k"));
  EXPECT_TRUE(node_.Check("tenant", "long-lived"));
  EXPECT_EQ(node_.Stat("keys"), 21);
  EXPECT_EQ(node_->Sweep(), 0u);  // nothing has expired yet
  clock_.Advance(1000);
  EXPECT_EQ(node_->Sweep(), 20u);
  EXPECT_EQ(node_.Stat("keys"), 1);
  EXPECT_EQ(node_.Stat("evictions"), 20);
  RequestBuilder b;
  b.Inspect(1, "tenant", "long-lived");
  EXPECT_TRUE(node_.One(b).state()->tracked());
}

TEST_F(NodeTest, ConcurrentChecksOnOneKeyAdmitExactlyTheLimit) {
  // 8 threads, each with its own worker, 100 checks each at the tenant limit of 300.
  std::vector<testing::NodeHarness::Caller> callers;
  for (int t = 0; t < 8; ++t) callers.push_back(node_.NewCaller());
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      RequestBuilder b;
      for (int i = 0; i < 100; ++i) {
        b.Check(static_cast<uint64_t>(i), "tenant", "shared");
        const wire::Reply& r = callers[static_cast<size_t>(t)].Send(b);
        if (r.ops() && r.ops()->Get(0)->allowed()) allowed.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 300);
}

TEST_F(NodeTest, MetricsAreInPrometheusTextFormat) {
  EXPECT_TRUE(node_.Check("ip", "m"));
  const std::string text = node_->RenderMetrics();
  EXPECT_NE(text.find("limiter_ops_total{op=\"check\",outcome=\"allowed\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("limiter_decisions_total{policy=\"ip\",result=\"allowed\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("limiter_keys 1\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE limiter_frame_duration_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("limiter_frame_duration_seconds_count 1\n"), std::string::npos);
  EXPECT_NE(text.find("process_resident_memory_bytes "), std::string::npos);
  EXPECT_NE(text.find("limiter_bad_frames_total{reason=\"too_large\"} 0\n"), std::string::npos);
}

}  // namespace
}  // namespace limiter

namespace limiter {
namespace {

TEST(NodeRing, AKeyThisNodeDoesNotOwnGetsWrongOwnerWithTheRing) {
  NodeOptions options;
  options.members = {"n1:1", "n2:1", "n3:1"};
  options.self = "n1:1";
  testing::NodeHarness h(kPolicies, options, 1000);
  Node& node = h.node();
  const Ring ring(options.members);
  // One key of each owner; nested policies route by the tenant.
  std::string mine, theirs;
  for (int i = 0; mine.empty() || theirs.empty(); ++i) {
    const std::string k = std::to_string(i);
    (ring.Owner(k) == "n1:1" ? mine : theirs) = k;
  }
  RequestBuilder b;
  b.Hello("t");
  b.Check(1, "ip", mine);
  b.Check(2, "ip", theirs);
  b.Check(3, "api_key", theirs, /*tenant=*/mine);
  b.Check(4, "api_key", mine, /*tenant=*/theirs);
  const wire::Reply& reply = h.Send(b);
  ASSERT_NE(reply.hello(), nullptr);
  EXPECT_EQ(reply.hello()->ring_version(), ring.version());
  EXPECT_EQ(reply.hello()->members()->size(), 3u);
  const auto* ops = reply.ops();
  EXPECT_EQ(ops->Get(0)->status(), wire::Status::Ok);
  EXPECT_EQ(ops->Get(1)->status(), wire::Status::WrongOwner);
  EXPECT_EQ(ops->Get(1)->ring_version(), ring.version());
  ASSERT_EQ(ops->Get(1)->members()->size(), 3u);
  EXPECT_EQ(ops->Get(1)->members()->Get(1)->str(), "n2:1");
  EXPECT_EQ(ops->Get(1)->error()->str(), "limits[0]: n1:1 does not own '" + theirs + "'; " +
                                             ring.Owner(theirs) + " does (ring " +
                                             std::to_string(ring.version()) + ", generation 0)");
  EXPECT_EQ(ops->Get(1)->owner()->str(), ring.Owner(theirs));
  EXPECT_EQ(ops->Get(2)->status(), wire::Status::Ok);  // routed by its tenant, which is mine
  EXPECT_EQ(ops->Get(3)->status(), wire::Status::WrongOwner);

  EXPECT_FALSE(node.ownership().SetMembers({"n2:1", "n3:1"}, 1).ok());  // n1 would not be in it
  EXPECT_TRUE(node.ownership().SetMembers({"n1:1"}, 2).ok());
  EXPECT_EQ(node.membership()->generation, 2u);
  EXPECT_TRUE(node.ownership().SetMembers({"n1:1", "n2:1"}, 1).ok());  // older: ignored
  EXPECT_EQ(node.membership()->ring.members().size(), 1u);
  b.Check(5, "ip", theirs);
  // A one-node ring owns it all, but this key's last owner has not handed it over yet
  // (handoff_test.cc follows it to the end).
  EXPECT_EQ(h.One(b).status(), wire::Status::Moving);
  EXPECT_EQ(node.ownership().waiting_slots() > 0, true);
}

}  // namespace
}  // namespace limiter

namespace limiter {
namespace {

// Hot keys on one node, driven by hand: Tick once a simulated second.
class HotNodeTest : public ::testing::Test {
 protected:
  static NodeOptions Options() {
    NodeOptions o;
    o.hot.sample_every = 1;
    o.hot.split_above = 50;
    o.hot.split_k = 4;
    o.hot.merge_below = 10;
    return o;
  }

  const wire::OpReply& Op(RequestBuilder& b) { return node_.One(b); }
  wire::Status Check(const std::string& key) { return node_.CheckReply("api", key).status(); }

  testing::NodeHarness node_{R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 100, window: 1s, class: contract}
  - {name: tenant, algorithm: gcra, limit: 1000, window: 1s, class: contract}
  - {name: key, algorithm: gcra, limit: 100, window: 1s, class: contract, parent: tenant}
)",
                             Options(), 5'000'000};
  ManualClock& clock_ = node_.clock();
};

TEST_F(HotNodeTest, AHotKeyIsSplitAndItsOwnerAnswersWithTheSplit) {
  for (int i = 0; i < 200; ++i) Check("hot");
  for (int i = 0; i < 5; ++i) Check("cold");
  clock_.Advance(1000);
  node_->Tick();
  const std::vector<HotKeys::HotKey> hot = node_->hot_keys().Top();
  ASSERT_FALSE(hot.empty());
  EXPECT_EQ(hot[0].key, "hot");
  EXPECT_EQ(hot[0].split_k, 4);
  EXPECT_EQ(hot[0].rate, 200);
  EXPECT_EQ(hot[0].denied, 100);  // 100 of 200 denied (burst 100)
  EXPECT_EQ(Check("cold"), wire::Status::Ok);

  RequestBuilder b;
  b.Check(1, "api", "hot");
  const wire::OpReply& r = Op(b);
  EXPECT_EQ(r.status(), wire::Status::Split);
  EXPECT_EQ(r.split_k(), 4);
  EXPECT_EQ(r.split_valid_ms(), 2000);
  EXPECT_FALSE(r.allowed());
  const uint32_t epoch = r.split_epoch();

  // A sub-bucket starts drained and refills at L/k: 25 per second.
  int allowed = 0;
  for (int i = 0; i < 10; ++i) {
    b.OnSubBucket(4, 1, epoch);
    b.Check(2, "api", "hot");
    const wire::OpReply& sub = Op(b);
    ASSERT_EQ(sub.status(), wire::Status::Ok) << (sub.error() ? sub.error()->str() : "");
    allowed += sub.allowed();
  }
  EXPECT_EQ(allowed, 0);
  clock_.Advance(1000);
  for (int i = 0; i < 40; ++i) {
    b.OnSubBucket(4, 1, epoch);
    b.Check(2, "api", "hot");
    allowed += Op(b).allowed();
  }
  EXPECT_EQ(allowed, 25);

  // SPLIT renews the view and takes the clients' report.
  b.Split(3, "api", "hot", 400);
  const wire::OpReply& renewed = Op(b);
  EXPECT_EQ(renewed.status(), wire::Status::Ok);
  EXPECT_EQ(renewed.split_k(), 4);
  EXPECT_EQ(renewed.split_epoch(), epoch);
}

TEST_F(HotNodeTest, ACooledKeyMergesBackDrained) {
  for (int i = 0; i < 200; ++i) Check("hot");
  clock_.Advance(1000);
  node_->Tick();
  RequestBuilder b;
  b.Check(1, "api", "hot");
  EXPECT_EQ(Op(b).status(), wire::Status::Split);  // a client's view: valid for 2 s
  // Quiet seconds: no reports. A renewal at 2 s extends the view to 4 s.
  clock_.Advance(1000);
  node_->Tick();
  clock_.Advance(1000);
  node_->Tick();
  b.Split(1, "api", "hot", 0);
  EXPECT_EQ(Op(b).split_valid_ms(), 2000);
  clock_.Advance(1000);
  node_->Tick();  // the third cool second: it merges, but a view is still valid
  EXPECT_TRUE(node_->store().has_splits());
  b.Check(1, "api", "hot");
  const wire::OpReply& merging = Op(b);
  EXPECT_EQ(merging.status(), wire::Status::Split);
  EXPECT_EQ(merging.split_valid_ms(), 1000);  // what is left of the last view, no more
  b.Split(1, "api", "hot", 0);
  EXPECT_EQ(Op(b).split_valid_ms(), 1000);  // renewals no longer extend it
  // Between the last view's end and the reopening, clients wait.
  clock_.Advance(1200);
  b.Check(1, "api", "hot");
  const wire::OpReply& closed = Op(b);
  EXPECT_EQ(closed.split_valid_ms(), 0);
  EXPECT_EQ(closed.retry_after_ms(), 300);
  clock_.Advance(300);
  node_->Tick();
  EXPECT_FALSE(node_->store().has_splits());
  // Reopened drained: nothing now, 10 units a tenth of a second later.
  b.Check(1, "api", "hot");
  EXPECT_FALSE(Op(b).allowed());
  clock_.Advance(100);
  int allowed = 0;
  for (int i = 0; i < 20; ++i) {
    b.Check(1, "api", "hot");
    allowed += Op(b).allowed();
  }
  EXPECT_EQ(allowed, 10);
}

TEST_F(HotNodeTest, NestedKeysAreNotSplitAndBadSubBucketOpsAreRefused) {
  for (int i = 0; i < 200; ++i) {
    RequestBuilder b;
    b.Check(1, "key", "k", "t");
    Op(b);
  }
  clock_.Advance(1000);
  node_->Tick();
  EXPECT_FALSE(node_->store().has_splits());
  RequestBuilder b;
  b.OnSubBucket(3, 0, 1);
  b.Check(1, "api", "x");
  EXPECT_EQ(Op(b).error()->str(), "split_k must be a power of two from 2 to 64, got 3");
  b.OnSubBucket(4, 4, 1);
  b.Check(1, "api", "x");
  EXPECT_EQ(Op(b).error()->str(), "split_index 4 is not below split_k 4");
  b.OnSubBucket(4, 0, 1);
  b.Check(1, "key", "x", "t");
  EXPECT_EQ(Op(b).error()->str(), "limits[0]: policy 'key' cannot be split 4 ways");
  b.Split(1, "api", "x", -1);
  EXPECT_EQ(Op(b).error()->str(),
            "SPLIT takes the key itself and the ops sent to its sub-buckets, 0 to 1000000000");
  b.Split(1, "api", "never-split", 0);
  const wire::OpReply& none = Op(b);
  EXPECT_EQ(none.status(), wire::Status::Ok);
  EXPECT_EQ(none.split_k(), 0);
  b.HotKeys(1);
  const wire::OpReply& hot = Op(b);
  ASSERT_NE(hot.hot_keys(), nullptr);
  ASSERT_GE(hot.hot_keys()->size(), 1u);
  EXPECT_EQ(hot.hot_keys()->Get(0)->key()->str(), "k");
  EXPECT_EQ(hot.hot_keys()->Get(0)->split_k(), 0);
}

}  // namespace
}  // namespace limiter
