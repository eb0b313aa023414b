// Ownership alone, with no Node and no network: which member list is in force, the waits for
// keys being handed here (who ends them, at which generation, and the deadline), leaving and
// joining, changes announced at once by two members, who may hand this node which slots
// (MayHand), lagging DNS answers corrected by what was announced, the hand-off jobs, and
// readers on other threads while the list changes.
#include "server/ownership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace limiter {
namespace {

using Members = std::vector<std::string>;

const std::string& OwnerIn(const Ring& ring, uint32_t slot) {
  return ring.members()[ring.OwnerOfSlot(slot)];
}

int64_t SlotsOf(const Ring& ring, const std::string& member) {
  int64_t n = 0;
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) n += OwnerIn(ring, slot) == member;
  return n;
}

// The first slot `x` owns under `before` and `y` under `after` (a test that needs one fails
// without it).
uint32_t SlotMoving(const Ring& before, const std::string& x, const Ring& after,
                    const std::string& y) {
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) {
    if (OwnerIn(before, slot) == x && OwnerIn(after, slot) == y) return slot;
  }
  ADD_FAILURE() << "no slot goes from " << x << " to " << y;
  return 0;
}

// How many slots `x` owns under `before` and `y` under `after`.
int64_t CountMoving(const Ring& before, const std::string& x, const Ring& after,
                    const std::string& y) {
  int64_t n = 0;
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) {
    n += OwnerIn(before, slot) == x && OwnerIn(after, slot) == y;
  }
  return n;
}

int64_t CountWaiting(const Ownership& o) {
  int64_t n = 0;
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) n += o.Waiting(slot);
  return n;
}

Ownership::Options As(const std::string& self, int64_t deadline_ms = 10'000,
                      bool join_gate = false) {
  return {self, deadline_ms, join_gate};
}

Members MembersOf(const Ownership& o) { return o.current()->ring.members(); }

TEST(Ownership, ANewerListIsAdoptedAndAnOlderOrEqualOneIgnored) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1"), {"a:1", "b:1"}, 5);
  const std::shared_ptr<const ClusterRing> first = o.current();
  EXPECT_TRUE(o.SetMembers({"a:1", "b:1", "c:1"}, 4).ok());  // older: not an error, no change
  EXPECT_TRUE(o.SetMembers({"a:1", "c:1"}, 5).ok());         // equal: the same
  EXPECT_EQ(o.current(), first);
  EXPECT_EQ(o.counters().jobs.load(), 0);
  EXPECT_EQ(o.waiting_slots(), 0);
  EXPECT_TRUE(o.SetMembers({"c:1", "a:1", "b:1"}, 6).ok());
  EXPECT_EQ(o.current()->generation, 6u);
  EXPECT_EQ(MembersOf(o), (Members{"a:1", "b:1", "c:1"}));  // sorted
  EXPECT_TRUE(
      o.Owns(*o.current(), SlotMoving(Ring({"a:1", "b:1"}), "a:1", o.current()->ring, "a:1")));
  // The list it replaced is one a hand-off may still come by.
  const auto known = o.KnownLists();
  ASSERT_EQ(known.size(), 2u);
  EXPECT_EQ(known[0], o.current());
  EXPECT_EQ(known[1], first);
}

TEST(Ownership, AListWithoutThisNodeIsRefusedAndChangesNothing) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1"), {"a:1", "b:1"}, 1);
  const std::shared_ptr<const ClusterRing> first = o.current();
  const Status refused = o.SetMembers({"b:1", "c:1"}, 9);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error(), "this node (a:1) is not in the member list");
  EXPECT_EQ(o.current(), first);
  EXPECT_EQ(o.waiting_slots(), 0);
  EXPECT_EQ(o.jobs_in_progress(), 0);
  EXPECT_EQ(o.counters().jobs.load(), 0);
  EXPECT_EQ(o.KnownLists().size(), 1u);
  // A list that is not newer is ignored before it is looked at.
  EXPECT_TRUE(o.SetMembers({"b:1", "c:1"}, 1).ok());
  EXPECT_EQ(o.current(), first);
}

TEST(Ownership, GainedSlotsWaitForTheDoneOfTheirOwnerAtItsGeneration) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1"), {"a:1", "b:1", "c:1"}, 1);
  const Ring three({"a:1", "b:1", "c:1"});
  ASSERT_TRUE(o.SetMembers({"a:1"}, 2).ok());  // b and c are gone: a gains all they held
  const int64_t of_b = SlotsOf(three, "b:1"), of_c = SlotsOf(three, "c:1");
  ASSERT_GT(of_b, 0);
  ASSERT_GT(of_c, 0);
  EXPECT_EQ(o.waiting_slots(), of_b + of_c);
  const uint32_t b_slot = SlotMoving(three, "b:1", o.current()->ring, "a:1");
  const uint32_t c_slot = SlotMoving(three, "c:1", o.current()->ring, "a:1");
  const uint32_t a_slot = SlotMoving(three, "a:1", o.current()->ring, "a:1");
  EXPECT_TRUE(o.Waiting(b_slot));
  EXPECT_TRUE(o.Waiting(c_slot));
  EXPECT_FALSE(o.Waiting(a_slot));     // its own all along
  EXPECT_EQ(o.jobs_in_progress(), 0);  // it gives nothing away

  o.Handed("d:1", 2);  // a member it does not wait for
  EXPECT_EQ(o.waiting_slots(), of_b + of_c);
  o.Handed("b:1", 1);  // b's done for an older list: the keys of this change may still come
  EXPECT_EQ(o.waiting_slots(), of_b + of_c);
  EXPECT_TRUE(o.Waiting(b_slot));
  o.Handed("b:1", 2);
  EXPECT_EQ(o.waiting_slots(), of_c);
  EXPECT_FALSE(o.Waiting(b_slot));
  EXPECT_TRUE(o.Waiting(c_slot));
  o.Handed("c:1", 3);  // a later generation's done covers this one's
  EXPECT_EQ(o.waiting_slots(), 0);
  EXPECT_FALSE(o.Waiting(c_slot));
  EXPECT_EQ(CountWaiting(o), 0);
}

TEST(Ownership, ADoneThatCameBeforeTheListEndsItsWaitsAtOnce) {
  ManualClock clock(1'000);
  Ownership early(clock, As("a:1"), {"a:1", "b:1"}, 1);
  early.Handed("b:1", 2);  // b's done overtook the list that says b left
  ASSERT_TRUE(early.SetMembers({"a:1"}, 2).ok());
  EXPECT_EQ(early.waiting_slots(), 0);

  Ownership stale(clock, As("a:1"), {"a:1", "b:1"}, 1);
  stale.Handed("b:1", 1);  // a done for an older list does not cover this change
  ASSERT_TRUE(stale.SetMembers({"a:1"}, 2).ok());
  EXPECT_EQ(stale.waiting_slots(), SlotsOf(Ring({"a:1", "b:1"}), "b:1"));
}

TEST(Ownership, WaitsExpireAtTheDeadlineAndNotBefore) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1", 5'000), {"a:1", "b:1", "c:1"}, 1);
  ASSERT_TRUE(o.SetMembers({"a:1", "c:1"}, 2).ok());  // b leaves at 1 s: until 6 s
  const int64_t first = o.waiting_slots();
  ASSERT_GT(first, 0);
  o.ExpireWaits(5'999);
  EXPECT_EQ(o.waiting_slots(), first);
  // New waits at 4 s get the whole deadline, and the older ones with them: until 9 s.
  clock.Set(4'000);
  ASSERT_TRUE(o.SetMembers({"a:1"}, 3).ok());
  const int64_t both = o.waiting_slots();
  ASSERT_GT(both, first);
  o.ExpireWaits(6'000);
  EXPECT_EQ(o.waiting_slots(), both);
  EXPECT_EQ(o.counters().waits_expired.load(), 0);
  o.ExpireWaits(9'000);
  EXPECT_EQ(o.waiting_slots(), 0);
  EXPECT_EQ(CountWaiting(o), 0);
  EXPECT_EQ(o.counters().waits_expired.load(), both);
  // Expired waits stay ended: a late done changes nothing, and nothing waits to expire.
  o.Handed("b:1", 2);
  o.ExpireWaits(20'000);
  EXPECT_EQ(o.counters().waits_expired.load(), both);
}

TEST(Ownership, LeavingQueuesAJobAndLaterListsRehomeTheKeysInstead) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1"), {"a:1", "b:1", "c:1", "d:1"}, 1);
  ASSERT_TRUE(o.SetMembers({"a:1", "b:1", "c:1"}, 2).ok());  // d left: a waits for some keys
  ASSERT_GT(o.waiting_slots(), 0);
  o.Leave(2);  // announced at 2, which this node holds already: it leaves at 3
  EXPECT_TRUE(o.leaving());
  EXPECT_EQ(o.current()->generation, 3u);
  EXPECT_EQ(MembersOf(o), (Members{"b:1", "c:1"}));
  EXPECT_EQ(o.waiting_slots(), 0);  // a leaving node waits for nothing: it serves nothing
  for (uint32_t slot : {0u, 1u, 77'777u}) EXPECT_FALSE(o.Owns(*o.current(), slot));
  EXPECT_EQ(o.jobs_in_progress(), 1);
  std::optional<Ownership::Job> job = o.TakeJob(std::chrono::milliseconds(0));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->from->ring.members(), (Members{"a:1", "b:1", "c:1"}));
  EXPECT_EQ(job->to->ring.members(), (Members{"b:1", "c:1"}));
  EXPECT_TRUE(job->done_to.empty());  // every other member hears done
  o.JobDone();
  EXPECT_EQ(o.jobs_in_progress(), 0);

  // A whole list is not adopted any more (it would give this node keys again)...
  EXPECT_TRUE(o.SetMembers({"a:1", "b:1", "c:1", "e:1"}, 10).ok());
  EXPECT_EQ(MembersOf(o), (Members{"b:1", "c:1"}));
  // ...but members' own announcements change where its keys go: each queues a job.
  ASSERT_TRUE(o.MemberJoins("e:1", 11).ok());
  EXPECT_EQ(MembersOf(o), (Members{"b:1", "c:1", "e:1"}));
  EXPECT_EQ(o.waiting_slots(), 0);
  ASSERT_TRUE(o.MemberLeaves("b:1", 12).ok());
  EXPECT_EQ(MembersOf(o), (Members{"c:1", "e:1"}));
  EXPECT_EQ(o.jobs_in_progress(), 2);
  job = o.TakeJob(std::chrono::milliseconds(0));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->to->ring.members(), (Members{"b:1", "c:1", "e:1"}));
  o.JobDone();
  job = o.TakeJob(std::chrono::milliseconds(0));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->to->ring.members(), (Members{"c:1", "e:1"}));
  o.JobDone();
  // The last others leave: nobody is left to hand to, so no job.
  ASSERT_TRUE(o.MemberLeaves("c:1", 13).ok());
  ASSERT_TRUE(o.MemberLeaves("e:1", 14).ok());
  EXPECT_TRUE(o.current()->ring.empty());
  o.TakeJob(std::chrono::milliseconds(0)).reset();  // the job for c's leave, to e
  o.JobDone();
  EXPECT_EQ(o.jobs_in_progress(), 0);
}

TEST(Ownership, TheLastNodeDoesNotLeave) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1"), {"a:1"}, 1);
  const std::shared_ptr<const ClusterRing> first = o.current();
  o.Leave(2);
  EXPECT_FALSE(o.leaving());  // nobody to hand to: it serves to the end
  EXPECT_EQ(o.current(), first);
  EXPECT_EQ(o.jobs_in_progress(), 0);
}

TEST(Ownership, ANodeNamingItselfInAnotherMembersAnnouncementIsRefused) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1"), {"a:1", "b:1"}, 1);
  const std::shared_ptr<const ClusterRing> first = o.current();
  const Status leaves = o.MemberLeaves("a:1", 2);
  ASSERT_FALSE(leaves.ok());
  EXPECT_NE(leaves.error().find("a node announces its own leave"), std::string::npos)
      << leaves.error();
  const Status joins = o.MemberJoins("a:1", 2);
  ASSERT_FALSE(joins.ok());
  EXPECT_NE(joins.error().find("a node announces its own join"), std::string::npos);
  EXPECT_EQ(o.current(), first);
  EXPECT_FALSE(o.leaving());
  EXPECT_EQ(o.jobs_in_progress(), 0);
  // A member that is not listed leaving changes nothing either.
  EXPECT_TRUE(o.MemberLeaves("z:9", 3).ok());
  EXPECT_EQ(o.current(), first);
}

TEST(Ownership, TwoMembersAnnouncingAtOnceBothApplyInEitherOrder) {
  ManualClock clock(1'000);
  const Members start = {"a:1", "b:1", "c:1"};
  // b leaves and d joins, both announced at 5: each node hears them in its own order.
  Ownership x(clock, As("a:1"), start, 1);
  ASSERT_TRUE(x.MemberLeaves("b:1", 5).ok());
  ASSERT_TRUE(x.MemberJoins("d:1", 5).ok());
  Ownership y(clock, As("a:1"), start, 1);
  ASSERT_TRUE(y.MemberJoins("d:1", 5).ok());
  ASSERT_TRUE(y.MemberLeaves("b:1", 5).ok());
  EXPECT_EQ(MembersOf(x), (Members{"a:1", "c:1", "d:1"}));
  EXPECT_EQ(MembersOf(y), MembersOf(x));
  EXPECT_GT(x.current()->generation, 5u);  // newer than both announcements
  EXPECT_EQ(x.current()->generation, y.current()->generation);
  // The same slots wait for b's keys either way, and b's done at 5 ends them.
  ASSERT_GT(x.waiting_slots(), 0);
  EXPECT_EQ(x.waiting_slots(), y.waiting_slots());
  x.Handed("b:1", 5);
  y.Handed("b:1", 5);
  EXPECT_EQ(x.waiting_slots(), 0);
  EXPECT_EQ(y.waiting_slots(), 0);

  // b and c leave at once: neither leave undoes the other, and each leaver's done at the
  // generation it announced ends its waits (not the list's generation, which moved past it).
  for (const bool b_first : {true, false}) {
    Ownership o(clock, As("a:1"), start, 1);
    const std::string first = b_first ? "b:1" : "c:1", second = b_first ? "c:1" : "b:1";
    ASSERT_TRUE(o.MemberLeaves(first, 5).ok());
    ASSERT_TRUE(o.MemberLeaves(second, 5).ok());
    EXPECT_EQ(MembersOf(o), (Members{"a:1"}));
    EXPECT_EQ(o.current()->generation, 6u);
    const Ring three(start);
    EXPECT_EQ(o.waiting_slots(), SlotsOf(three, "b:1") + SlotsOf(three, "c:1"));
    // What the first leaver held and this node got by the list without it waits for the first;
    // the rest (the second's, and the first's that went to the second) for the second.
    Members without_first;
    for (const std::string& m : start) {
      if (m != first) without_first.push_back(m);
    }
    o.Handed(second, 5);
    EXPECT_EQ(o.waiting_slots(), CountMoving(three, first, Ring(without_first), "a:1"));
    o.Handed(first, 5);
    EXPECT_EQ(o.waiting_slots(), 0);
  }
}

TEST(Ownership, TwoAnnouncementsOnTwoThreadsBothApply) {
  for (int round = 0; round < 3; ++round) {
    ManualClock clock(1'000);
    Ownership o(clock, As("a:1"), {"a:1", "b:1", "c:1"}, 1);
    std::atomic<bool> go{false};
    std::thread leaver([&] {
      while (!go.load()) {
      }
      EXPECT_TRUE(o.MemberLeaves("b:1", 5).ok());
    });
    std::thread joiner([&] {
      while (!go.load()) {
      }
      EXPECT_TRUE(o.MemberJoins("d:1", 5).ok());
    });
    go.store(true);
    leaver.join();
    joiner.join();
    EXPECT_EQ(MembersOf(o), (Members{"a:1", "c:1", "d:1"}));
    EXPECT_EQ(o.current()->generation, 6u);
    EXPECT_EQ(CountWaiting(o), o.waiting_slots());
  }
}

TEST(Ownership, AJoinerListedAlreadyHearsDoneOnceTheJobsBeforeItHaveRun) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1"), {"a:1", "b:1"}, 1);
  ASSERT_TRUE(o.MemberJoins("b:1", 4).ok());  // b restarted before anyone saw it go
  EXPECT_EQ(MembersOf(o), (Members{"a:1", "b:1"}));
  EXPECT_EQ(o.current()->generation, 4u);
  std::optional<Ownership::Job> job = o.TakeJob(std::chrono::milliseconds(0));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->done_to, "b:1");                                 // only b hears this job's done
  EXPECT_EQ(job->from->ring.members(), job->to->ring.members());  // no key moves
  o.JobDone();
  // An announcement older than the list keeps the list's generation.
  ASSERT_TRUE(o.MemberJoins("b:1", 2).ok());
  EXPECT_EQ(o.current()->generation, 4u);
}

TEST(Ownership, MayHandTakesAPreviousOwnersSlotsAndNeverAThirdMembers) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1"), {"a:1", "b:1", "c:1"}, 1);
  const Ring three({"a:1", "b:1", "c:1"});
  ASSERT_TRUE(o.SetMembers({"a:1", "c:1"}, 2).ok());  // b left
  const Ring& now = o.current()->ring;
  const auto known = o.KnownLists();
  const uint32_t from_b = SlotMoving(three, "b:1", now, "a:1");
  const uint32_t b_to_c = SlotMoving(three, "b:1", now, "c:1");
  const uint32_t of_c = SlotMoving(three, "c:1", now, "c:1");
  const uint32_t of_a = SlotMoving(three, "a:1", now, "a:1");
  EXPECT_TRUE(o.MayHand("b:1", from_b, known));   // the previous owner's
  EXPECT_FALSE(o.MayHand("c:1", from_b, known));  // c never held it
  EXPECT_FALSE(o.MayHand("b:1", b_to_c, known));  // c's now: never to this node
  EXPECT_FALSE(o.MayHand("b:1", of_c, known));    // a third member's
  EXPECT_TRUE(o.MayHand("c:1", of_c, known));     // c's own, by a list this node lags behind
  EXPECT_FALSE(o.MayHand("b:1", of_a, known));    // this node's own all along
  EXPECT_FALSE(o.MayHand("c:1", of_a, known));
  // Only from the lists held lately: once kRecentLists newer lists came, b's are forgotten.
  for (uint64_t g = 3; g <= 3 + Ownership::kRecentLists; ++g) {
    ASSERT_TRUE(o.SetMembers({"a:1", "c:1"}, g).ok());
  }
  EXPECT_FALSE(o.MayHand("b:1", from_b, o.KnownLists()));
}

TEST(Ownership, MayHandLetsAMemberThatLeftPassOnWhatAnotherLeaverHeld) {
  ManualClock clock(1'000);
  const Ring four({"a:1", "b:1", "c:1", "d:1"});
  Ownership o(clock, As("a:1"), four.members(), 1);
  ASSERT_TRUE(o.SetMembers({"a:1", "c:1", "d:1"}, 2).ok());  // b left
  const Ring after_b({"a:1", "c:1", "d:1"});
  ASSERT_TRUE(o.SetMembers({"a:1", "d:1"}, 3).ok());  // then c
  const auto known = o.KnownLists();
  const uint32_t b_slot = SlotMoving(four, "b:1", after_b, "a:1");
  // c may have been handed b's keys before it heard b left; it forwards them.
  EXPECT_TRUE(o.MayHand("c:1", b_slot, known));
  EXPECT_TRUE(o.MayHand("b:1", b_slot, known));
  // A live member never held them, and may not pass them on.
  EXPECT_FALSE(o.MayHand("d:1", b_slot, known));
  // Nor may a name no list this node held lately has: it is nobody's to forward.
  EXPECT_FALSE(o.MayHand("z:9", b_slot, known));
}

TEST(Ownership, ALeavingNodeTakesOnlyTheSendersOwnSlots) {
  ManualClock clock(1'000);
  const Ring three({"a:1", "b:1", "c:1"});
  Ownership o(clock, As("a:1"), three.members(), 1);
  ASSERT_TRUE(o.MemberJoins("d:1", 2).ok());
  const Ring four({"a:1", "b:1", "c:1", "d:1"});
  o.Leave(3);
  ASSERT_TRUE(o.leaving());
  const Ring& now = o.current()->ring;  // b, c, d
  const auto known = o.KnownLists();
  // A slot b held before d came, d's since: b may send it (it did not know d yet).
  const uint32_t b_then = SlotMoving(three, "b:1", four, "d:1");
  EXPECT_TRUE(o.MayHand("b:1", b_then, known));
  EXPECT_TRUE(o.MayHand("d:1", b_then, known));   // d's own now
  EXPECT_FALSE(o.MayHand("c:1", b_then, known));  // never c's
  // This node's old slot, c's by the list it leaves by: c's to send, not b's.
  const uint32_t mine = SlotMoving(four, "a:1", now, "c:1");
  EXPECT_TRUE(o.MayHand("c:1", mine, known));
  EXPECT_FALSE(o.MayHand("b:1", mine, known));
  EXPECT_FALSE(o.MayHand("z:9", mine, known));

  // A standalone node takes nobody's keys.
  Ownership alone(clock, As(""), {}, 0);
  EXPECT_FALSE(alone.MayHand("b:1", 0, alone.KnownLists()));
}

TEST(Ownership, WhatMembersAnnouncedCorrectsALaggingDnsAnswerForAWhile) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1"), {"a:1", "b:1"}, 1);
  const ClusterRing before{Ring({"a:1", "b:1"}), 1};
  const ClusterRing after{Ring({"a:1", "c:1"}), 2};
  o.NoteAnnounced(before, after);  // b left, c came
  EXPECT_EQ(o.WithAnnounced({"a:1", "b:1"}), (Members{"a:1", "c:1"}));
  EXPECT_EQ(o.WithAnnounced({"a:1", "b:1", "c:1"}), (Members{"a:1", "c:1"}));
  EXPECT_EQ(o.WithAnnounced({"a:1", "d:1"}), (Members{"a:1", "d:1", "c:1"}));  // d is not ours
  // An unchanged list announces nothing.
  o.NoteAnnounced(after, ClusterRing{Ring({"a:1", "c:1"}), 3});
  clock.Advance(Ownership::kAnnouncedHoldMs);
  EXPECT_EQ(o.WithAnnounced({"a:1", "b:1"}), (Members{"a:1", "c:1"}));
  clock.Advance(1);  // past the hold: the DNS answer is taken as it is
  EXPECT_EQ(o.WithAnnounced({"a:1", "b:1"}), (Members{"a:1", "b:1"}));
  // A later announcement about the same member replaces the earlier one.
  o.NoteAnnounced(after, ClusterRing{Ring({"a:1"}), 4});  // c left again
  EXPECT_EQ(o.WithAnnounced({"a:1", "c:1"}), (Members{"a:1"}));
}

TEST(Ownership, AJoiningNodeWaitsForEverythingUntilItKnowsWhoHoldsWhat) {
  ManualClock clock(1'000);
  const Members three = {"a:1", "b:1", "c:1"};
  Ownership o(clock, As("a:1", 5'000, /*join_gate=*/true), three, 1);
  EXPECT_EQ(o.waiting_slots(), static_cast<int64_t>(Ring::kSlots));
  EXPECT_TRUE(o.Waiting(0));
  EXPECT_TRUE(o.Waiting(Ring::kSlots - 1));
  o.Handed("z:9", 100);  // nobody's done opens the gate
  EXPECT_EQ(o.waiting_slots(), static_cast<int64_t>(Ring::kSlots));

  // A list without this node is refused, and the gate stays shut.
  const Status refused = o.Join({"b:1", "c:1"}, {"b:1", "c:1"}, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("not in the member list it joins with"), std::string::npos);
  EXPECT_EQ(o.waiting_slots(), static_cast<int64_t>(Ring::kSlots));

  ASSERT_TRUE(o.Join({"b:1", "c:1"}, three, 2).ok());
  const Ring previous({"b:1", "c:1"}), now(three);
  EXPECT_EQ(o.current()->generation, 2u);
  EXPECT_EQ(o.waiting_slots(), SlotsOf(now, "a:1"));  // what it gains, and only that
  const uint32_t from_b = SlotMoving(previous, "b:1", now, "a:1");
  const uint32_t from_c = SlotMoving(previous, "c:1", now, "a:1");
  const uint32_t bs = SlotMoving(previous, "b:1", now, "b:1");
  EXPECT_TRUE(o.Waiting(from_b));
  EXPECT_FALSE(o.Waiting(bs));
  // The list it joined from is one a hand-off may come by.
  EXPECT_TRUE(o.MayHand("b:1", from_b, o.KnownLists()));
  EXPECT_FALSE(o.MayHand("c:1", from_b, o.KnownLists()));
  o.Handed("b:1", 2);
  EXPECT_FALSE(o.Waiting(from_b));
  EXPECT_TRUE(o.Waiting(from_c));
  o.Handed("c:1", 2);
  EXPECT_EQ(o.waiting_slots(), 0);
}

TEST(Ownership, TheJoinGateOpensByHandAtTheDeadlineOrWithAListNotNewer) {
  ManualClock clock(1'000);
  Ownership opened(clock, As("a:1", 5'000, true), {"a:1", "b:1"}, 1);
  opened.OpenGate();
  EXPECT_EQ(opened.waiting_slots(), 0);
  EXPECT_EQ(CountWaiting(opened), 0);

  Ownership expired(clock, As("a:1", 5'000, true), {"a:1", "b:1"}, 1);
  expired.ExpireWaits(5'999);
  EXPECT_EQ(expired.waiting_slots(), static_cast<int64_t>(Ring::kSlots));
  expired.ExpireWaits(6'000);
  EXPECT_EQ(expired.waiting_slots(), 0);
  EXPECT_EQ(expired.counters().waits_expired.load(), static_cast<int64_t>(Ring::kSlots));

  // A join found nothing newer than the configured list: nothing to wait for.
  Ownership same(clock, As("a:1", 5'000, true), {"a:1", "b:1"}, 7);
  ASSERT_TRUE(same.Join({"b:1"}, {"a:1", "b:1"}, 7).ok());
  EXPECT_EQ(same.waiting_slots(), 0);
  EXPECT_EQ(CountWaiting(same), 0);
}

TEST(Ownership, JobsAreCountedFromQueuedToDone) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1"), {"a:1", "b:1"}, 1);
  EXPECT_FALSE(o.TakeJob(std::chrono::milliseconds(0)).has_value());
  EXPECT_EQ(o.jobs_in_progress(), 0);
  ASSERT_TRUE(o.SetMembers({"a:1"}, 2).ok());  // gains only: no job
  EXPECT_EQ(o.jobs_in_progress(), 0);
  ASSERT_TRUE(o.SetMembers({"a:1", "b:1", "c:1"}, 3).ok());  // gives b and c some
  EXPECT_EQ(o.jobs_in_progress(), 1);
  EXPECT_EQ(o.counters().jobs.load(), 1);
  std::optional<Ownership::Job> job = o.TakeJob(std::chrono::milliseconds(0));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->from->generation, 2u);
  EXPECT_EQ(job->to->generation, 3u);
  EXPECT_EQ(o.jobs_in_progress(), 1);  // running
  EXPECT_FALSE(o.TakeJob(std::chrono::milliseconds(0)).has_value());
  o.JobDone();
  EXPECT_EQ(o.jobs_in_progress(), 0);

  // Keys that reach a leaving node go on: one job passes them on, however many batches came.
  o.Leave(4);
  EXPECT_EQ(o.jobs_in_progress(), 1);
  o.ForwardReceived();  // the job queued will send them
  EXPECT_EQ(o.jobs_in_progress(), 1);
  o.TakeJob(std::chrono::milliseconds(0)).reset();
  o.ForwardReceived();  // arrived while it runs: another job
  EXPECT_EQ(o.jobs_in_progress(), 2);
  job = o.TakeJob(std::chrono::milliseconds(0));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->from, job->to);
  EXPECT_EQ(job->to, o.current());
  o.JobDone();
  o.JobDone();
  EXPECT_EQ(o.jobs_in_progress(), 0);
  EXPECT_EQ(o.counters().jobs.load(), 3);
}

TEST(Ownership, ReadersOnOtherThreadsSeeAConsistentListWhileItChanges) {
  ManualClock clock(1'000);
  Ownership o(clock, As("a:1", 5'000), {"a:1", "b:1"}, 1);
  std::atomic<bool> done{false};
  std::atomic<int64_t> reads{0};
  std::vector<std::thread> readers;
  readers.reserve(3);
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      uint64_t last = 0;
      uint32_t slot = static_cast<uint32_t>(r) * 7919;
      while (!done.load()) {
        const std::shared_ptr<const ClusterRing> m = o.current();
        EXPECT_GE(m->generation, last);  // never backwards
        last = m->generation;
        EXPECT_FALSE(m->ring.empty());
        const int64_t waiting = o.waiting_slots();
        EXPECT_GE(waiting, 0);
        EXPECT_LE(waiting, static_cast<int64_t>(Ring::kSlots));
        for (int i = 0; i < 64; ++i) {
          slot = (slot + 4099) % Ring::kSlots;
          (void)o.Waiting(slot);
          (void)o.Owns(*m, slot);
        }
        EXPECT_FALSE(o.KnownLists().empty());
        reads.fetch_add(1);
      }
    });
  }
  std::thread jobs([&] {
    while (!done.load()) {
      if (o.TakeJob(std::chrono::milliseconds(1))) o.JobDone();
    }
  });
  for (uint64_t g = 2; g < 14; ++g) {
    // b and c come and go; some of their dones arrive, some never do.
    const Members list = g % 3 == 0   ? Members{"a:1"}
                         : g % 3 == 1 ? Members{"a:1", "b:1"}
                                      : Members{"a:1", "c:1"};
    EXPECT_TRUE(o.SetMembers(list, g).ok());
    if (g % 2 == 0) o.Handed("b:1", g);
    if (g % 4 == 1) o.Handed("c:1", g);
  }
  // Every reader has read at least once while the list was changing or after.
  while (reads.load() < 3) std::this_thread::yield();
  done.store(true);
  for (std::thread& t : readers) t.join();
  jobs.join();
  EXPECT_EQ(o.current()->generation, 13u);
  EXPECT_EQ(MembersOf(o), (Members{"a:1", "b:1"}));
  EXPECT_EQ(CountWaiting(o), o.waiting_slots());
  while (o.TakeJob(std::chrono::milliseconds(0))) o.JobDone();
  EXPECT_EQ(o.jobs_in_progress(), 0);
  o.ExpireWaits(1'000 + 5'000);
  EXPECT_EQ(o.waiting_slots(), 0);
  EXPECT_EQ(CountWaiting(o), 0);
}

}  // namespace
}  // namespace limiter
