// The hand-off of keys between nodes (server/handoff.cc), in one process: real Nodes, each on
// its own manual clock (far apart, as two machines' monotonic clocks are), frames carried by
// a sink that hands each batch to the receiving node. Leaves, joins, leases in flight, split
// hot keys, a hand-off that never comes, and bad batches.
#include <gtest/gtest.h>

#include "test/unit/cluster_fixture.h"

namespace limiter {
namespace {

using namespace test_cluster;

TEST_F(Cluster, ALeavingNodesKeysGoOnFromTheirStateOnTheirNextOwner) {
  const std::vector<std::string> both = {"a:1", "b:1"};
  Add("a:1", both, 1'000'000);
  Add("b:1", both, 77'000'000);  // another machine's monotonic clock
  int on_a = 0;
  for (const std::string& k : Keys(40)) {
    const std::string owner = OwnerOf("a:1", k);
    on_a += owner == "a:1";
    EXPECT_EQ(Admitted(owner, "login", k, 12), 10) << k;  // the burst, then denied
    EXPECT_EQ(Admitted(owner, "day", k, 30), 30);
  }
  ASSERT_GT(on_a, 5);
  // b learns the list without a first (a's announcement), then a leaves.
  ASSERT_TRUE(node("b:1").ownership().SetMembers({"b:1"}, 2).ok());
  node("a:1").Leave(2);
  // Until a's keys arrive, b answers Moving for them (never a fresh key), and a WrongOwner.
  int moving = 0;
  for (const std::string& k : Keys(40)) moving += Check("b:1", "login", k) == wire::Status::Moving;
  EXPECT_EQ(moving, on_a);
  EXPECT_EQ(Check("a:1", "login", "user-0"), wire::Status::WrongOwner);

  const std::optional<HandoffStats> stats = RunHandoff("a:1");
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->keys_sent, 2 * on_a);  // login and day, each key
  EXPECT_EQ(stats->keys_lost, 0);
  EXPECT_EQ(node("a:1").store().keys(), 0);
  EXPECT_EQ(node("b:1").ownership().waiting_slots(), 0);
  EXPECT_EQ(Stat("b:1", "handoff_keys_received"), 2 * on_a);
  // Every key goes on from where it was: no fresh burst, the day's count kept.
  AdvanceAll(5'000);  // less than a token's refill (6 s)
  for (const std::string& k : Keys(40)) {
    EXPECT_EQ(Admitted("b:1", "login", k, 3), 0) << k;
    EXPECT_EQ(Admitted("b:1", "day", k, 30), 20) << k;
  }
  AdvanceAll(1'100);  // one token each
  for (const std::string& k : Keys(40)) EXPECT_EQ(Admitted("b:1", "login", k, 3), 1) << k;
}

TEST_F(Cluster, AJoiningNodeWaitsForItsKeysThenServesTheirState) {
  const std::vector<std::string> two = {"a:1", "b:1"};
  const std::vector<std::string> three = {"a:1", "b:1", "c:1"};
  Add("a:1", two, 10'000);
  Add("b:1", two, 20'000'000);
  for (const std::string& k : Keys(60)) EXPECT_EQ(Admitted(OwnerOf("a:1", k), "login", k, 11), 10);
  // c starts with the join gate: it serves nothing until it knows who holds what.
  Add("c:1", three, 5, /*join_gate=*/true);
  EXPECT_EQ(Check("c:1", "login", "user-1"), wire::Status::Moving);
  ASSERT_TRUE(node("c:1").ownership().Join(two, three, 2).ok());
  const Ring ring3(three);
  std::vector<std::string> gained;
  for (const std::string& k : Keys(60)) {
    if (ring3.Owner(k) == "c:1") gained.push_back(k);
  }
  ASSERT_FALSE(gained.empty());
  for (const std::string& k : gained) EXPECT_EQ(Check("c:1", "login", k), wire::Status::Moving);
  // The others adopt the announced list; each hands c what it gained.
  ASSERT_TRUE(node("a:1").ownership().SetMembers(three, 2).ok());
  ASSERT_TRUE(node("b:1").ownership().SetMembers(three, 2).ok());
  EXPECT_EQ(Check("a:1", "login", gained.front()), wire::Status::WrongOwner);
  ASSERT_TRUE(RunHandoff("a:1").has_value());
  EXPECT_GT(node("c:1").ownership().waiting_slots(), 0);  // b has not handed its part yet
  ASSERT_TRUE(RunHandoff("b:1").has_value());
  EXPECT_EQ(node("c:1").ownership().waiting_slots(), 0);
  for (const std::string& k : gained) EXPECT_EQ(Admitted("c:1", "login", k, 3), 0) << k;
  EXPECT_EQ(Stat("c:1", "handoff_keys_received"), static_cast<int64_t>(gained.size()));
}

TEST_F(Cluster, AHandOffThatNeverComesEndsAtTheDeadlineAndIsCounted) {
  const std::vector<std::string> both = {"a:1", "b:1"};
  Add("a:1", both, 1'000);
  Add("b:1", both, 1'000);
  std::string mine;
  for (const std::string& k : Keys(40)) {
    if (OwnerOf("a:1", k) == "a:1") mine = k;
  }
  EXPECT_EQ(Admitted("a:1", "login", mine, 12), 10);
  ASSERT_TRUE(node("b:1").ownership().SetMembers({"b:1"}, 2).ok());
  // a is killed: it never hands anything over.
  EXPECT_EQ(Check("b:1", "login", mine), wire::Status::Moving);
  clock("b:1").Advance(4'999);
  node("b:1").Tick();
  EXPECT_EQ(Check("b:1", "login", mine), wire::Status::Moving);
  clock("b:1").Advance(1);
  node("b:1").Tick();
  // The crash promise: the key starts fresh, one burst.
  EXPECT_EQ(Admitted("b:1", "login", mine, 12), 10);
  EXPECT_GT(Stat("b:1", "handoff_waits_expired"), 0);
  EXPECT_EQ(node("b:1").ownership().waiting_slots(), 0);
}

TEST_F(Cluster, ManyKeysGoInBatchesThatFitAFrame) {
  const std::vector<std::string> both = {"a:1", "b:1"};
  Add("a:1", both, 1'000);
  Add("b:1", both, 1'000);
  int on_a = 0;
  for (int i = 0; i < 30'000; ++i) {
    const std::string k = "many-" + std::to_string(i);
    if (OwnerOf("a:1", k) != "a:1") continue;
    ++on_a;
    bool allowed = false;
    ASSERT_EQ(Check("a:1", "day", k, &allowed), wire::Status::Ok);
  }
  ASSERT_TRUE(node("b:1").ownership().SetMembers({"b:1"}, 2).ok());
  node("a:1").Leave(2);
  size_t largest = 0;
  int frames = 0;
  const Handoff::Sink sink = Sink();
  const std::optional<HandoffStats> stats = node("a:1").handoff().RunNext(
      [&](const std::string& member, std::span<const uint8_t> frame) -> int64_t {
        largest = std::max(largest, frame.size());
        ++frames;
        return sink(member, frame);
      },
      std::chrono::milliseconds(0));
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->keys_sent, on_a);
  EXPECT_EQ(stats->keys_lost, 0);
  EXPECT_GT(frames, 2);
  EXPECT_LE(largest, 512u * 1024) << "a batch must fit the receiver's frame bound (1 MiB)";
  EXPECT_EQ(node("b:1").ownership().waiting_slots(), 0);
}

TEST_F(Cluster, KeysThatCannotBeDeliveredAreCountedLost) {
  const std::vector<std::string> both = {"a:1", "b:1"};
  Add("a:1", both, 1'000);
  Add("b:1", both, 1'000);
  int on_a = 0;
  for (const std::string& k : Keys(30)) {
    if (OwnerOf("a:1", k) != "a:1") continue;
    ++on_a;
    Admitted("a:1", "login", k, 1);
  }
  node("a:1").Leave(2);
  unreachable_.insert("b:1");
  const std::optional<HandoffStats> stats = RunHandoff("a:1");
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->keys_lost, on_a);
  EXPECT_EQ(stats->keys_sent, 0);
  EXPECT_EQ(Stat("a:1", "handoff_keys_lost"), on_a);
}

// A lease granted before the move stays valid at the gateway (its units were charged); the
// new owner knows nothing of it, so a RETURN of its units gives nothing back there.
TEST_F(Cluster, ALeaseInFlightStaysChargedAndItsReturnGivesNothingBackOnTheNewOwner) {
  const std::vector<std::string> both = {"a:1", "b:1"};
  Add("a:1", both, 1'000);
  Add("b:1", both, 9'000'000);
  std::string key;
  for (const std::string& k : Keys(40)) {
    if (OwnerOf("a:1", k) == "a:1") key = k;
  }
  RequestBuilder b;
  b.Lease(1, "api", key, "", 20);
  const wire::OpReply& lease = One("a:1", b);
  ASSERT_EQ(lease.status(), wire::Status::Ok);
  ASSERT_EQ(lease.granted(), 20);
  const uint64_t lease_id = lease.lease_id();
  const int64_t granted_at = lease.granted_at_ms();
  ASSERT_TRUE(node("b:1").ownership().SetMembers({"b:1"}, 2).ok());
  node("a:1").Leave(2);
  ASSERT_TRUE(RunHandoff("a:1").has_value());
  b.Return(2, "api", key, "", 20, granted_at, lease_id);
  const wire::OpReply& returned = One("b:1", b);
  EXPECT_EQ(returned.status(), wire::Status::BadRequest);
  EXPECT_EQ(returned.granted(), 0);
  EXPECT_NE(returned.error()->str().find("is not outstanding on this node"), std::string::npos);
  EXPECT_EQ(Admitted("b:1", "api", key, 5), 0);  // the burst of 20 was leased: none left
}

TEST_F(Cluster, ASplitHotKeyMovesWithItsSplit) {
  const std::vector<std::string> both = {"a:1", "b:1"};
  Add("a:1", both, 1'000);
  Add("b:1", both, 3'000'000);
  std::string key;
  for (const std::string& k : Keys(40)) {
    if (OwnerOf("a:1", k) == "a:1") key = k;
  }
  node("a:1").Tick();
  for (int i = 0; i < 2000; ++i) Check("a:1", "hot", key);
  clock("a:1").Advance(1000);
  node("a:1").Tick();
  ASSERT_EQ(Check("a:1", "hot", key), wire::Status::Split) << "the key did not split";
  ASSERT_EQ(node("a:1").store().split_count(), 1);
  ASSERT_TRUE(node("b:1").ownership().SetMembers({"b:1"}, 2).ok());
  node("a:1").Leave(2);
  const std::optional<HandoffStats> stats = RunHandoff("a:1");
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->splits_sent, 1);
  EXPECT_EQ(node("a:1").store().split_count(), 0);
  EXPECT_EQ(node("b:1").store().split_count(), 1);
  // The new owner answers for the key with the same split: clients keep its sub-buckets.
  RequestBuilder b;
  b.Check(1, "hot", key);
  const wire::OpReply& r = One("b:1", b);
  EXPECT_EQ(r.status(), wire::Status::Split);
  EXPECT_EQ(r.split_k(), 4);
}

TEST_F(Cluster, BatchesFromAnotherPolicyFileOrWithBadRecordsAreRefusedAndCounted) {
  const std::vector<std::string> both = {"a:1", "b:1"};
  Add("a:1", both, 1'000);
  Add("b:1", both, 1'000);
  std::vector<std::string> mine;
  for (const std::string& k : Keys(40)) {
    if (OwnerOf("a:1", k) == "a:1") mine.push_back(k);
  }
  for (const std::string& k : mine) Admitted("a:1", "login", k, 2);
  // A hand-off batch as a's would be, taken apart and put together with bad parts.
  std::vector<uint8_t> captured;
  node("a:1").Leave(2);
  node("a:1").handoff().RunNext(
      [&](const std::string& member, std::span<const uint8_t> frame) -> int64_t {
        if (member == "b:1" && captured.empty()) captured.assign(frame.begin(), frame.end());
        return 0;
      },
      std::chrono::milliseconds(0));
  ASSERT_FALSE(captured.empty());
  std::vector<uint64_t> aligned;
  const wire::Request* request = VerifiedRequest(captured, aligned);
  ASSERT_NE(request, nullptr);
  ASSERT_NE(request->peer(), nullptr);
  const wire::Handoff* h = request->peer()->handoff();
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(h->keys()->size(), mine.size());

  auto rebuild = [&](uint64_t policies, bool corrupt_first) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<wire::KeyRecord>> keys;
    for (flatbuffers::uoffset_t i = 0; i < h->keys()->size(); ++i) {
      const wire::KeyRecord* k = h->keys()->Get(i);
      std::vector<int64_t> state(k->state()->begin(), k->state()->end());
      if (corrupt_first && i == 0) state[0] = -7;  // tokens below zero
      keys.push_back(
          wire::CreateKeyRecord(fbb, k->id_lo(), k->id_hi(), k->policy(), fbb.CreateVector(state)));
    }
    const auto handoff =
        wire::CreateHandoff(fbb, fbb.CreateString("a:1"), 2, policies, h->key_seed(), h->now_ms(),
                            fbb.CreateVector(keys), 0, true);
    const std::span<const uint8_t> body =
        FinishPeerRequest(fbb, wire::OpType::Handoff, wire::CreatePeer(fbb, 0, 0, handoff));
    return std::vector<uint8_t>(body.begin(), body.end());
  };
  {
    const std::vector<uint8_t> other_file = rebuild(h->policies() ^ 1, false);
    const wire::Reply& r = Send("b:1", other_file);
    EXPECT_EQ(r.ops()->Get(0)->status(), wire::Status::BadRequest);
    EXPECT_NE(r.ops()->Get(0)->error()->str().find("policy file differs"), std::string::npos);
    EXPECT_EQ(Stat("b:1", "handoff_batches_refused"), 1);
    EXPECT_EQ(Stat("b:1", "handoff_keys_received"), 0);
  }
  {
    const std::vector<uint8_t> one_bad = rebuild(h->policies(), true);
    const wire::Reply& r = Send("b:1", one_bad);
    const wire::OpReply* op = r.ops()->Get(0);
    EXPECT_EQ(op->status(), wire::Status::Ok);
    EXPECT_EQ(op->granted(), static_cast<int64_t>(mine.size()) - 1);  // the others are taken
    EXPECT_NE(op->error()->str().find("keys[0]: state field tokens"), std::string::npos)
        << op->error()->str();
  }
}

TEST_F(Cluster, MemberListsThatCannotBeAdoptedAreRefusedWithTheReason) {
  Add("a:1", {"a:1", "b:1"}, 1'000);
  auto members_op = [&](std::vector<std::string> members, uint64_t generation) {
    flatbuffers::FlatBufferBuilder fbb;
    const auto list = fbb.CreateVectorOfStrings(members);
    const wire::Reply& r = Send("a:1", FinishPeerRequest(fbb, wire::OpType::Members,
                                                         wire::CreatePeer(fbb, list, generation)));
    const wire::OpReply* o = r.ops()->Get(0);
    return std::make_pair(o->status(), o->error() ? o->error()->str() : std::string());
  };
  EXPECT_EQ(members_op({"b:1", "c:1"}, 5).second,
            "members: this node (a:1) is not in the member list");
  EXPECT_NE(members_op({"a:1", ""}, 5).second.find("members[1]"), std::string::npos);
  EXPECT_NE(members_op({"a:1"}, UINT64_MAX).second.find("ahead of this node's clock"),
            std::string::npos);
  EXPECT_EQ(node("a:1").membership()->generation, 1u);  // none of them was adopted
  // An empty list asks; a newer one is adopted and answered with.
  EXPECT_EQ(members_op({}, 0).first, wire::Status::Ok);
  EXPECT_EQ(members_op({"a:1", "c:1"}, 7).first, wire::Status::Ok);
  EXPECT_EQ(node("a:1").membership()->generation, 7u);
  // What was announced corrects a lagging DNS answer: b left, c came.
  EXPECT_EQ(node("a:1").ownership().WithAnnounced({"a:1", "b:1"}),
            (std::vector<std::string>{"a:1", "c:1"}));
}

}  // namespace
}  // namespace limiter

namespace limiter {
namespace {

// The node makes ids with the slot it computed for ownership; everyone else (the node's
// split records, the gateways) with the plain functions: they must be the same ids, and each
// must carry its routing key's slot.
TEST(KeyIds, TheIdsMadeInASlotAreThePlainOnesAndCarryTheirRoutingSlot) {
  const PolicySet p = testing::Policies(kPolicies, "handoff.yaml");
  const PolicySet nested = testing::Policies(R"(
policies:
  - {name: tenant, algorithm: gcra, limit: 100, window: 1s, class: contract}
  - {name: key, algorithm: gcra, limit: 10, window: 1s, class: contract, parent: tenant}
)",
                                             "nested.yaml");
  ASSERT_FALSE(p.policies().empty() || nested.policies().empty());
  const Policy& plain = p.policies()[0];
  const Policy& tenant = nested.policies()[0];
  const Policy& child = nested.policies()[1];
  for (int i = 0; i < 200; ++i) {
    const std::string k = "k" + std::to_string(i), t = "t" + std::to_string(i % 7);
    const KeyId a = protocol::LimitId(plain, k, t);
    EXPECT_EQ(a, protocol::LimitIdInSlot(plain, k, t, Ring::SlotOf(k)));
    EXPECT_EQ(RingSlotOf(a), Ring::SlotOf(k));
    const KeyId b = protocol::LimitId(child, k, t);
    EXPECT_EQ(b, protocol::LimitIdInSlot(child, k, t, Ring::SlotOf(t)));
    EXPECT_EQ(RingSlotOf(b), Ring::SlotOf(t));
    EXPECT_EQ(protocol::AncestorId(tenant, t),
              protocol::AncestorIdInSlot(tenant, t, Ring::SlotOf(t)));
    const uint16_t index = static_cast<uint16_t>(i % 4);
    const KeyId s = protocol::SubBucketId(plain, k, 77, index);
    EXPECT_EQ(RingSlotOf(s), Ring::SlotOf(protocol::SubBucketRoutingKey(k, index)));
    EXPECT_EQ(s, protocol::SubBucketIdInSlot(plain, k, 77, index, RingSlotOf(s)));
  }
}

}  // namespace
}  // namespace limiter
