// Member-list changes announced by the member they concern (server/membership_ops.cc): two
// nodes leaving at once, two joining at once, a joiner that is listed already, and changes
// that cannot be applied. Real Nodes in one process (cluster_fixture.h); the announcements go
// through the nodes' MEMBERS op, as a peer sends them.
#include <gtest/gtest.h>

#include "protocol/ring.h"
#include "test/unit/cluster_fixture.h"

namespace limiter {
namespace {

using namespace test_cluster;

class MemberChanges : public Cluster {
 protected:
  // `who` leaves (joins) at `generation`, told to `to` by a MEMBERS op; the reply's status
  // and error.
  std::pair<wire::Status, std::string> Announce(const std::string& to, bool leaving,
                                                const std::string& who, uint64_t generation) {
    flatbuffers::FlatBufferBuilder fbb;
    const auto name = fbb.CreateString(who);
    const auto peer =
        wire::CreatePeer(fbb, 0, generation, 0, leaving ? name : 0, leaving ? 0 : name);
    const wire::Reply& r = Send(to, FinishPeerRequest(fbb, wire::OpType::Members, peer));
    const wire::OpReply* o = r.ops()->Get(0);
    return {o->status(), o->error() ? o->error()->str() : std::string()};
  }
  std::vector<std::string> ListOf(const std::string& on) {
    return node(on).membership()->ring.members();
  }
  // Runs every queued hand-off, on the named nodes in turn, until none has one left.
  void RunAll(const std::vector<std::string>& order) {
    for (bool ran = true; ran;) {
      ran = false;
      for (const std::string& n : order) ran |= RunHandoff(n).has_value();
    }
  }
  // Uses up `login` (10 of 12) and part of `day` (30 of 50) on each key's owner under `list`.
  void UseKeys(const std::vector<std::string>& list, int n) {
    const Ring ring(list);
    for (const std::string& k : Keys(n)) {
      ASSERT_EQ(Admitted(ring.Owner(k), "login", k, 12), 10) << k;
      ASSERT_EQ(Admitted(ring.Owner(k), "day", k, 30), 30) << k;
    }
  }
  // Every key goes on from its state on its owner under `list`: nothing fresh.
  void ExpectKeysKept(const std::vector<std::string>& list, int n) {
    const Ring ring(list);
    for (const std::string& k : Keys(n)) {
      EXPECT_EQ(Admitted(ring.Owner(k), "login", k, 3), 0) << k << " on " << ring.Owner(k);
      EXPECT_EQ(Admitted(ring.Owner(k), "day", k, 30), 20) << k << " on " << ring.Owner(k);
    }
  }

  // When a hears of b's leave: before its hand-off runs, after the first job of `order` ran,
  // or once every job it knew of has run.
  enum class Hears { kBefore, kAfterFirstJob, kAtTheEnd };
  // a and b leave at once: each announces its leave to c and d and starts handing over before
  // it hears the other's.
  void TwoLeaveAtOnce(Hears when, const std::vector<std::string>& order) {
    const std::vector<std::string> four = {"a:1", "b:1", "c:1", "d:1"};
    const std::vector<std::string> two = {"c:1", "d:1"};
    Add("a:1", four, 1'000);
    Add("b:1", four, 90'000'000);
    Add("c:1", four, 5'000'000);
    Add("d:1", four, 123'456);
    UseKeys(four, 120);
    for (const std::string& n : two) {
      ASSERT_EQ(Announce(n, true, "a:1", 100).first, wire::Status::Ok);
      ASSERT_EQ(Announce(n, true, "b:1", 101).first, wire::Status::Ok);
      EXPECT_EQ(ListOf(n), two) << "neither puts the other back, on " << n;
      EXPECT_GT(node(n).ownership().waiting_slots(), 0);
    }
    node("a:1").Leave(100);
    node("b:1").Leave(101);
    ASSERT_EQ(Announce("b:1", true, "a:1", 100).first, wire::Status::Ok);
    const auto hear = [&] { ASSERT_EQ(Announce("a:1", true, "b:1", 101).first, wire::Status::Ok); };
    if (when == Hears::kBefore) hear();
    RunHandoff(order[0]);  // the first job of the first of them
    if (when == Hears::kAfterFirstJob) hear();
    RunAll(order);
    if (when == Hears::kAtTheEnd) {
      hear();
      RunAll(order);
    }
    EXPECT_EQ(ListOf("a:1"), two);
    EXPECT_EQ(ListOf("b:1"), two);
    EXPECT_EQ(node("a:1").store().keys(), 0);
    EXPECT_EQ(node("b:1").store().keys(), 0);
    for (const std::string& n : two) EXPECT_EQ(node(n).ownership().waiting_slots(), 0) << n;
    EXPECT_EQ(Stat("c:1", "handoff_waits_expired") + Stat("d:1", "handoff_waits_expired"), 0);
    AdvanceAll(5'000);  // less than a login token's refill (6 s)
    ExpectKeysKept(two, 120);
  }
};

TEST_F(MemberChanges, TwoNodesLeavingAtOnceBothLeaveAndNoKeyStartsFresh) {
  TwoLeaveAtOnce(Hears::kBefore, {"a:1", "b:1"});
}

TEST_F(MemberChanges, ALeaverHandsOnWhatAnotherLeaverSentItBeforeHearingOfIt) {
  // a hands keys to b, which leaves too: b passes them on to c and d before its last done.
  TwoLeaveAtOnce(Hears::kAfterFirstJob, {"a:1", "b:1"});
  EXPECT_GT(frames_to_["b:1"], 0);
}

TEST_F(MemberChanges, ALeaverThatHandedAllOverPassesOnKeysThatArriveLater) {
  // b has handed everything over when a's keys for it come: a new job passes them on.
  TwoLeaveAtOnce(Hears::kAtTheEnd, {"b:1", "a:1"});
  EXPECT_GE(Stat("b:1", "handoff_jobs"), 2);
}

TEST_F(MemberChanges, TwoLeaversInTheOtherOrder) {
  TwoLeaveAtOnce(Hears::kAfterFirstJob, {"b:1", "a:1"});
}

TEST_F(MemberChanges, TwoNodesJoiningAtOnceAreBothListedEverywhere) {
  const std::vector<std::string> two = {"a:1", "b:1"};
  const std::vector<std::string> four = {"a:1", "b:1", "c:1", "d:1"};
  Add("a:1", two, 1'000);
  Add("b:1", two, 2'000);
  // The announcements cross: a hears c then d, b hears d then c.
  EXPECT_EQ(Announce("a:1", false, "c:1", 10).first, wire::Status::Ok);
  EXPECT_EQ(Announce("a:1", false, "d:1", 11).first, wire::Status::Ok);
  EXPECT_EQ(Announce("b:1", false, "d:1", 11).first, wire::Status::Ok);
  EXPECT_EQ(Announce("b:1", false, "c:1", 10).first, wire::Status::Ok);
  EXPECT_EQ(ListOf("a:1"), four);
  EXPECT_EQ(ListOf("b:1"), four);
  EXPECT_GE(node("a:1").membership()->generation, 11u);
  EXPECT_GE(node("b:1").membership()->generation, 11u);
  // A leave of a member not listed (heard twice, or late) changes nothing.
  const uint64_t generation = node("a:1").membership()->generation;
  EXPECT_EQ(Announce("a:1", true, "x:1", generation + 5).first, wire::Status::Ok);
  EXPECT_EQ(ListOf("a:1"), four);
  EXPECT_EQ(node("a:1").membership()->generation, generation);
}

TEST_F(MemberChanges, AJoinerListedAlreadyWaitsForEveryMembersDoneThenServesTheKeysState) {
  const std::vector<std::string> two = {"a:1", "b:1"};
  const std::vector<std::string> three = {"a:1", "b:1", "c:1"};
  Add("a:1", two, 10'000);
  Add("b:1", two, 20'000'000);
  UseKeys(two, 90);
  // The members' DNS saw c first: they list it, and their hand-offs to it are queued.
  ASSERT_TRUE(node("a:1").ownership().SetMembers(three, 2).ok());
  ASSERT_TRUE(node("b:1").ownership().SetMembers(three, 2).ok());
  // c starts, finds itself listed, and joins all the same: it waits for each previous owner.
  Add("c:1", three, 7, /*join_gate=*/true);
  ASSERT_TRUE(node("c:1").ownership().Join(two, three, 3).ok());
  std::vector<std::string> gained;
  for (const std::string& k : Keys(90)) {
    if (Ring(three).Owner(k) == "c:1") gained.push_back(k);
  }
  ASSERT_FALSE(gained.empty());
  for (const std::string& k : gained) EXPECT_EQ(Check("c:1", "login", k), wire::Status::Moving);
  EXPECT_EQ(Announce("a:1", false, "c:1", 3).first, wire::Status::Ok);
  EXPECT_EQ(Announce("b:1", false, "c:1", 3).first, wire::Status::Ok);
  EXPECT_EQ(ListOf("a:1"), three);  // listed once
  // a's queued hand-off says done at 2: not enough for a wait at 3; the join's job then does.
  ASSERT_TRUE(RunHandoff("a:1").has_value());
  EXPECT_GT(node("c:1").ownership().waiting_slots(), 0);
  const int to_b = frames_to_["b:1"];
  ASSERT_TRUE(RunHandoff("a:1").has_value());
  EXPECT_EQ(frames_to_["b:1"], to_b) << "the join's done is for the joiner only";
  EXPECT_GT(node("c:1").ownership().waiting_slots(), 0);  // b's part
  RunAll({"b:1"});
  EXPECT_EQ(node("c:1").ownership().waiting_slots(), 0);
  for (const std::string& k : gained) {
    EXPECT_EQ(Admitted("c:1", "login", k, 3), 0) << k;
    EXPECT_EQ(Admitted("c:1", "day", k, 30), 20) << k;
  }
}

TEST_F(MemberChanges, AJoinerStopsWaitingForAMemberItCannotReach) {
  const std::vector<std::string> two = {"a:1", "b:1"};
  const std::vector<std::string> three = {"a:1", "b:1", "c:1"};
  Add("a:1", two, 10'000);
  Add("b:1", two, 10'000);
  Add("c:1", three, 7, /*join_gate=*/true);
  ASSERT_TRUE(node("c:1").ownership().Join(two, three, 3).ok());
  const int64_t waiting = node("c:1").ownership().waiting_slots();
  ASSERT_GT(waiting, 0);
  node("c:1").ownership().Handed("a:1", 3);  // a did not answer the join: its part starts fresh now
  EXPECT_GT(node("c:1").ownership().waiting_slots(), 0);
  EXPECT_LT(node("c:1").ownership().waiting_slots(), waiting);
  node("c:1").ownership().Handed("b:1", 3);
  EXPECT_EQ(node("c:1").ownership().waiting_slots(), 0);
}

TEST_F(MemberChanges, AListThatChangesBackBeforeItsJobRunsLeavesTheNodeItsKeys) {
  const std::vector<std::string> two = {"a:1", "b:1"};
  const std::vector<std::string> three = {"a:1", "b:1", "c:1"};
  Add("a:1", two, 10'000);
  Add("b:1", two, 10'000);
  UseKeys(two, 90);
  const int64_t keys = node("a:1").store().keys();
  // c comes and goes before a's hand-off to it runs (no c ever answers).
  unreachable_.insert("c:1");
  ASSERT_TRUE(node("a:1").ownership().SetMembers(three, 2).ok());
  ASSERT_TRUE(node("a:1").ownership().SetMembers(two, 3).ok());
  RunAll({"a:1"});
  EXPECT_EQ(node("a:1").store().keys(), keys) << "a gave away keys it owns again";
  EXPECT_EQ(Stat("a:1", "handoff_keys_lost"), 0);
  // It waits for c's done (c might have served them) until the deadline, then serves them
  // from the state it kept.
  clock("a:1").Advance(5'000);
  node("a:1").Tick();
  ExpectKeysKept(two, 90);
}

TEST_F(MemberChanges, ChangesThatCannotBeAppliedAreRefusedWithTheReason) {
  Add("a:1", {"a:1", "b:1"}, 1'000);
  const auto error = [&](bool leaving, const std::string& who, uint64_t generation) {
    auto [status, message] = Announce("a:1", leaving, who, generation);
    EXPECT_EQ(status, wire::Status::BadRequest) << who;
    return message;
  };
  EXPECT_NE(error(true, "a:1", 5).find("is the one named"), std::string::npos);
  EXPECT_NE(error(false, "a:1", 5).find("is the one named"), std::string::npos);
  EXPECT_NE(error(true, "", 5).find("leaving: a member is host:port"), std::string::npos);
  EXPECT_NE(error(false, std::string(200, 'x'), 5).find("joining: a member is host:port"),
            std::string::npos);
  EXPECT_NE(error(false, "c:1", UINT64_MAX).find("ahead of this node's clock"), std::string::npos);
  {
    flatbuffers::FlatBufferBuilder fbb;
    const auto b = fbb.CreateString("b:1");
    const auto c = fbb.CreateString("c:1");
    const wire::Reply& r = Send(
        "a:1", FinishPeerRequest(fbb, wire::OpType::Members, wire::CreatePeer(fbb, 0, 5, 0, b, c)));
    EXPECT_NE(r.ops()->Get(0)->error()->str().find("not several"), std::string::npos);
  }
  EXPECT_EQ(ListOf("a:1"), (std::vector<std::string>{"a:1", "b:1"}));
  EXPECT_EQ(node("a:1").membership()->generation, 1u);  // none of them was applied
  // A full ring takes no one more.
  std::vector<std::string> full = {"a:1"};
  for (size_t i = 1; i < Ring::kMaxMembers; ++i) full.push_back("n" + std::to_string(i) + ":1");
  ASSERT_TRUE(node("a:1").ownership().SetMembers(full, 2).ok());
  EXPECT_NE(error(false, "one-more:1", 5).find("the most a ring takes"), std::string::npos);
}

}  // namespace
}  // namespace limiter
