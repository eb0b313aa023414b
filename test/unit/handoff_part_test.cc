// Handoff alone, with no Node: two sides, each a Store with its own Ownership, clock (far
// apart, as two machines' monotonic clocks are) and Handoff, joined by a sink that decodes each
// frame as a peer would and gives its batch to the other side's Receive. The keys whose owner
// moves arrive with their state and leave the sender; `done` ends the receiver's waits; a
// batch from a stranger, under another policy file or key-id seed, or with keys of slots the
// sender never owned is refused; a key served meanwhile keeps the stricter state; keys not
// delivered (a failing sink, the deadline, a full receiver) are counted lost. (Through whole
// Nodes: handoff_test.cc.)
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "protocol/rules.h"
#include "protocol/state_transfer.h"
#include "protocol/wire.h"
#include "server/handoff.h"
#include "server/store.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

using Members = std::vector<std::string>;

const char* kPolicies = R"(
policies:
  - {name: login, algorithm: token_bucket, limit: 10, window: 1m, class: security, mode: strict}
  - {name: day, algorithm: fixed_window, limit: 50, window: 1h, class: contract}
)";
constexpr int kLogin = 0, kDay = 1;

// One node's parts that a hand-off touches.
struct Side {
  Side(const PolicySet& policies, const std::string& self, Members members, int64_t clock_ms,
       int64_t max_keys, bool join_gate)
      : name(self),
        clock(clock_ms),
        table(policies, false, false),
        store(policies, {max_keys, 8, &clock}),
        ownership(clock, {self, 5'000, join_gate}, std::move(members), 1),
        handoff(table, clock, store, nullptr, nullptr, ownership, {self, 1u << 20, 10'000},
                [this](std::chrono::steady_clock::time_point) { ++barriers; }) {}

  std::string name;
  ManualClock clock;
  PolicyTable table;
  Store store;
  Ownership ownership;
  Handoff handoff;
  int barriers = 0;  // frames waited for before a job gave keys away
};

class HandoffPartTest : public ::testing::Test {
 protected:
  HandoffPartTest() : policies_(testing::Policies(kPolicies, "handoff.yaml")) {}

  Side& Add(const std::string& name, Members members, int64_t clock_ms,
            const PolicySet* policies = nullptr, int64_t max_keys = 10'000,
            bool join_gate = false) {
    auto side = std::make_unique<Side>(policies ? *policies : policies_, name, std::move(members),
                                       clock_ms, max_keys, join_gate);
    Side& s = *side;
    sides_[name] = std::move(side);
    return s;
  }
  Side& side(const std::string& name) { return *sides_.at(name); }

  // What a peer does with a HANDOFF frame: verify it, find the op and its batch, take it.
  std::variant<Handoff::Received, Handoff::Refused> Deliver(Side& to,
                                                            std::span<const uint8_t> frame,
                                                            const std::string* as = nullptr) {
    std::vector<uint64_t> aligned;
    const wire::Request* request = VerifiedRequest(frame, aligned);
    EXPECT_NE(request, nullptr);
    EXPECT_EQ(request->ops()->size(), 1u);
    EXPECT_EQ(request->ops()->Get(0)->type(), wire::OpType::Handoff);
    const wire::Handoff* h = request->peer()->handoff();
    EXPECT_NE(h, nullptr);
    const std::string from = as ? *as : h->from()->str();
    return to.handoff.Receive(*h, from, to.clock.NowMs());
  }

  // Hands each frame to the side it is for; counts what each side was sent.
  Handoff::Sink Sink() {
    return [this](const std::string& member, std::span<const uint8_t> frame) -> int64_t {
      ++frames_to_[member];
      if (!sides_.count(member)) return -1;
      auto r = Deliver(side(member), frame);
      if (const auto* refused = std::get_if<Handoff::Refused>(&r)) {
        refusals_.push_back(refused->why);
        return -1;
      }
      return std::get<Handoff::Received>(r).taken;
    };
  }
  std::optional<HandoffStats> Run(Side& s, const Handoff::Sink& sink) {
    return s.handoff.RunNext(sink, std::chrono::milliseconds(0));
  }

  static KeyId Id(Side& s, int policy, const std::string& key) {
    return protocol::LimitId(s.table.at(policy), key, "");
  }
  // `cost` charged to the key at the side's time.
  static void Charge(Side& s, int policy, const std::string& key, int64_t cost) {
    const Policy& p = s.table.at(policy);
    const KeyId id = Id(s, policy, key);
    const size_t stripe = s.store.StripeOf(id);
    Store::StripeLock lock(s.store, {&stripe, 1});
    Slot* slot = s.store.Find(policy, id);
    KeyLimiter limiter = s.store.Take(policy, slot, s.clock.NowMs());
    ASSERT_TRUE(s.store.ReserveCharge(policy, slot, limiter));
    ASSERT_TRUE(limiter.Decide(p.rate, s.clock.NowMs(), cost).allowed) << key;
    if (slot == nullptr) slot = s.store.Insert(policy, id);
    s.store.Pack(policy, std::move(limiter), slot);
  }
  // What the key admits at the side's time; -1 when the side holds no state for it.
  static int64_t Available(Side& s, int policy, const std::string& key) {
    const KeyId id = Id(s, policy, key);
    const size_t stripe = s.store.StripeOf(id);
    Store::StripeLock lock(s.store, {&stripe, 1});
    const Slot* slot = s.store.Find(policy, id);
    if (slot == nullptr) return -1;
    return s.store.Unpack(policy, slot).Available(s.table.at(policy).rate, s.clock.NowMs());
  }
  // A key's record as a hand-off carries it: its state at the side's time.
  struct Record {
    KeyId id;
    int policy = 0;
    std::vector<int64_t> state;
  };
  static Record RecordOf(Side& s, int policy, const std::string& key) {
    const KeyId id = Id(s, policy, key);
    const size_t stripe = s.store.StripeOf(id);
    Store::StripeLock lock(s.store, {&stripe, 1});
    Record r{id, policy, {}};
    ExportState(s.store.Unpack(policy, s.store.Find(policy, id)), s.clock.NowMs(), r.state);
    return r;
  }
  // A HANDOFF frame made by hand, as any peer could send it.
  static std::vector<uint8_t> Frame(const std::string& from, uint64_t generation, uint64_t policies,
                                    const std::vector<Record>& records, bool done,
                                    uint64_t key_seed = KeyIdSeedDigest()) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<wire::KeyRecord>> keys;
    keys.reserve(records.size());
    for (const Record& r : records) {
      keys.push_back(wire::CreateKeyRecord(fbb, r.id.lo, r.id.hi, static_cast<uint16_t>(r.policy),
                                           fbb.CreateVector(r.state)));
    }
    const auto handoff = wire::CreateHandoff(fbb, fbb.CreateString(from), generation, policies,
                                             key_seed, 0, fbb.CreateVector(keys), 0, done);
    const std::span<const uint8_t> body =
        FinishPeerRequest(fbb, wire::OpType::Handoff, wire::CreatePeer(fbb, 0, 0, handoff));
    return {body.begin(), body.end()};
  }
  // Keys named so that each member owns some; those `member` owns under `members`.
  static std::vector<std::string> KeysOf(const Members& members, const std::string& member,
                                         int n = 60) {
    const Ring ring(members);
    std::vector<std::string> keys;
    for (int i = 0; i < n; ++i) {
      const std::string k = "user-" + std::to_string(i);
      if (ring.Owner(k) == member) keys.push_back(k);
    }
    return keys;
  }

  PolicySet policies_;
  std::map<std::string, std::unique_ptr<Side>> sides_;
  std::map<std::string, int> frames_to_;
  std::vector<std::string> refusals_;
};

TEST_F(HandoffPartTest, ALeaversKeysArriveWithTheirStateAndLeaveTheSender) {
  const Members both = {"a:1", "b:1"};
  Side& a = Add("a:1", both, 1'000'000);
  Side& b = Add("b:1", both, 77'000'000);  // another machine's monotonic clock
  const std::vector<std::string> on_a = KeysOf(both, "a:1"), on_b = KeysOf(both, "b:1");
  ASSERT_GT(on_a.size(), 5u);
  ASSERT_GT(on_b.size(), 5u);
  for (const std::string& k : on_a) {
    Charge(a, kLogin, k, 7);
    Charge(a, kDay, k, 30);
  }
  for (const std::string& k : on_b) Charge(b, kLogin, k, 1);
  ASSERT_TRUE(b.ownership.SetMembers({"b:1"}, 2).ok());  // a's announcement reached b
  a.ownership.Leave(2);
  EXPECT_GT(b.ownership.waiting_slots(), 0);

  const std::optional<HandoffStats> stats = Run(a, Sink());
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->keys_sent, static_cast<int64_t>(2 * on_a.size()));
  EXPECT_EQ(stats->keys_lost, 0);
  EXPECT_EQ(stats->batches, 1);
  EXPECT_EQ(a.barriers, 1);
  EXPECT_EQ(frames_to_["b:1"], 1);
  EXPECT_EQ(a.store.keys(), 0);
  EXPECT_EQ(a.ownership.jobs_in_progress(), 0);
  EXPECT_EQ(a.handoff.counters().keys_sent.load(), static_cast<int64_t>(2 * on_a.size()));
  // b serves a's keys from their state (its own untouched), and waits for nothing more.
  EXPECT_EQ(b.ownership.waiting_slots(), 0);
  EXPECT_EQ(b.handoff.counters().keys_received.load(), static_cast<int64_t>(2 * on_a.size()));
  for (const std::string& k : on_a) {
    EXPECT_EQ(Available(b, kLogin, k), 3) << k;
    EXPECT_EQ(Available(b, kDay, k), 20) << k;
  }
  for (const std::string& k : on_b) EXPECT_EQ(Available(b, kLogin, k), 9) << k;
  EXPECT_EQ(b.store.keys(), static_cast<int64_t>(2 * on_a.size() + on_b.size()));
}

TEST_F(HandoffPartTest, OnlyTheKeysWhoseOwnerMovesGoAndTheJoinerWaitsForThem) {
  Side& a = Add("a:1", {"a:1"}, 1'000);
  const Members both = {"a:1", "b:1"};
  const std::vector<std::string> all = KeysOf({"a:1"}, "a:1");
  for (const std::string& k : all) Charge(a, kLogin, k, 4);
  Side& b = Add("b:1", both, 9'000'000, nullptr, 10'000, /*join_gate=*/true);
  ASSERT_TRUE(b.ownership.Join({"a:1"}, both, 2).ok());
  ASSERT_TRUE(a.ownership.SetMembers(both, 2).ok());
  const std::vector<std::string> to_b = KeysOf(both, "b:1"), stays = KeysOf(both, "a:1");
  ASSERT_FALSE(to_b.empty());
  const Ring ring(both);
  int64_t of_b = 0;
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) of_b += ring.OwnerOfSlot(slot) == 1;
  EXPECT_EQ(b.ownership.waiting_slots(), of_b);

  const std::optional<HandoffStats> stats = Run(a, Sink());
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->keys_sent, static_cast<int64_t>(to_b.size()));
  EXPECT_EQ(b.ownership.waiting_slots(), 0);
  for (const std::string& k : to_b) {
    EXPECT_EQ(Available(a, kLogin, k), -1) << k;
    EXPECT_EQ(Available(b, kLogin, k), 6) << k;
  }
  for (const std::string& k : stays) {
    EXPECT_EQ(Available(a, kLogin, k), 6) << k;
    EXPECT_EQ(Available(b, kLogin, k), -1) << k;
  }
  EXPECT_EQ(a.store.keys(), static_cast<int64_t>(stays.size()));
}

TEST_F(HandoffPartTest, OnlyADoneFromTheOwnerForThisListEndsTheWaits) {
  const Members both = {"a:1", "b:1"};
  Side& b = Add("b:1", both, 5'000);
  ASSERT_TRUE(b.ownership.SetMembers({"b:1"}, 2).ok());
  const int64_t waiting = b.ownership.waiting_slots();
  ASSERT_GT(waiting, 0);
  const uint64_t digest = b.table.digest();
  auto taken = [&](const std::vector<uint8_t>& frame) {
    auto r = Deliver(b, frame);
    EXPECT_TRUE(std::holds_alternative<Handoff::Received>(r));
    return r;
  };
  taken(Frame("a:1", 2, digest, {}, /*done=*/false));  // a batch, more to come
  EXPECT_EQ(b.ownership.waiting_slots(), waiting);
  taken(Frame("a:1", 1, digest, {}, true));  // done for an older list
  EXPECT_EQ(b.ownership.waiting_slots(), waiting);
  // A done "from the future" would end every later wait for a: it is not believed.
  taken(Frame("a:1", UINT64_MAX, digest, {}, true));
  EXPECT_EQ(b.ownership.waiting_slots(), waiting);
  taken(Frame("a:1", 2, digest, {}, true));
  EXPECT_EQ(b.ownership.waiting_slots(), 0);
}

TEST_F(HandoffPartTest, ABatchFromAStrangerIsRefusedWhole) {
  const Members both = {"a:1", "b:1"};
  Side& a = Add("a:1", both, 1'000);
  Side& b = Add("b:1", both, 2'000);
  const std::vector<std::string> on_a = KeysOf(both, "a:1");
  for (const std::string& k : on_a) Charge(a, kLogin, k, 2);
  ASSERT_TRUE(b.ownership.SetMembers({"b:1"}, 2).ok());
  const int64_t waiting = b.ownership.waiting_slots();
  // a's real batch, replayed by a node that was never a member.
  std::vector<uint8_t> captured;
  a.ownership.Leave(2);
  Run(a, [&](const std::string&, std::span<const uint8_t> frame) -> int64_t {
    captured.assign(frame.begin(), frame.end());
    return -1;
  });
  ASSERT_FALSE(captured.empty());
  const std::string stranger = "z:9";
  auto r = Deliver(b, captured, &stranger);
  const auto* refused = std::get_if<Handoff::Refused>(&r);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->status, wire::Status::Forbidden);
  EXPECT_NE(refused->why.find("z:9 refused: it is not a member"), std::string::npos)
      << refused->why;
  EXPECT_EQ(b.store.keys(), 0);
  EXPECT_EQ(b.ownership.waiting_slots(), waiting);  // its done ends nothing
  EXPECT_EQ(b.handoff.counters().refused_batches.load(), 1);
  EXPECT_EQ(b.handoff.counters().keys_received.load(), 0);
}

TEST_F(HandoffPartTest, AKeyOfASlotTheSenderNeverOwnedIsRefusedAndTheRestTaken) {
  const Members both = {"a:1", "b:1"};
  Side& a = Add("a:1", both, 1'000);
  Side& b = Add("b:1", both, 2'000);
  const std::vector<std::string> on_a = KeysOf(both, "a:1"), on_b = KeysOf(both, "b:1");
  Charge(a, kLogin, on_a[0], 2);
  Charge(a, kLogin, on_b[0], 10);  // a's made-up state for a key of b's
  Charge(b, kLogin, on_b[0], 1);
  ASSERT_TRUE(b.ownership.SetMembers({"b:1"}, 2).ok());
  const std::vector<uint8_t> frame =
      Frame("a:1", 2, b.table.digest(),
            {RecordOf(a, kLogin, on_b[0]), RecordOf(a, kLogin, on_a[0])}, true);
  auto r = Deliver(b, frame);
  const auto* received = std::get_if<Handoff::Received>(&r);
  ASSERT_NE(received, nullptr);
  EXPECT_EQ(received->taken, 1);
  EXPECT_NE(received->error.find("1 keys not taken; first: keys[0]: its ring slot"),
            std::string::npos)
      << received->error;
  EXPECT_NE(received->error.find("is not one this node gains from a:1"), std::string::npos);
  EXPECT_EQ(b.handoff.counters().keys_refused.load(), 1);
  EXPECT_EQ(Available(b, kLogin, on_b[0]), 9);  // b's own state, not a's
  EXPECT_EQ(Available(b, kLogin, on_a[0]), 8);
  EXPECT_EQ(b.ownership.waiting_slots(), 0);  // the batch was a's, and done
}

TEST_F(HandoffPartTest, ABatchUnderAnotherPolicyFileOrKeySeedIsRefusedAndItsKeysLost) {
  const Members both = {"a:1", "b:1"};
  // a runs a file whose login limit differs: its states mean something else.
  const PolicySet changed = testing::Policies(R"(
policies:
  - {name: login, algorithm: token_bucket, limit: 11, window: 1m, class: security, mode: strict}
  - {name: day, algorithm: fixed_window, limit: 50, window: 1h, class: contract}
)",
                                              "handoff.yaml");
  Side& a = Add("a:1", both, 1'000, &changed);
  Side& b = Add("b:1", both, 2'000);
  ASSERT_NE(a.table.digest(), b.table.digest());
  const std::vector<std::string> on_a = KeysOf(both, "a:1");
  for (const std::string& k : on_a) Charge(a, kLogin, k, 2);
  ASSERT_TRUE(b.ownership.SetMembers({"b:1"}, 2).ok());
  a.ownership.Leave(2);
  const std::optional<HandoffStats> stats = Run(a, Sink());
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->keys_sent, 0);
  EXPECT_EQ(stats->keys_lost, static_cast<int64_t>(on_a.size()));
  ASSERT_EQ(refusals_.size(), 1u);
  EXPECT_NE(refusals_[0].find("its policy file differs from this node's"), std::string::npos);
  EXPECT_EQ(b.store.keys(), 0);
  EXPECT_GT(b.ownership.waiting_slots(), 0);  // the refused batch's done ends nothing
  EXPECT_EQ(b.handoff.counters().refused_batches.load(), 1);

  auto r = Deliver(b, Frame("a:1", 2, b.table.digest(), {}, true, KeyIdSeedDigest() ^ 1));
  const auto* refused = std::get_if<Handoff::Refused>(&r);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->status, wire::Status::BadRequest);
  EXPECT_NE(refused->why.find("key-id seed differs"), std::string::npos) << refused->why;
  EXPECT_EQ(b.handoff.counters().refused_batches.load(), 2);
}

TEST_F(HandoffPartTest, AKeyServedMeanwhileKeepsTheStricterOfTheTwoStates) {
  const Members both = {"a:1", "b:1"};
  Side& a = Add("a:1", both, 1'000);
  Side& b = Add("b:1", both, 30'000);
  const std::vector<std::string> on_a = KeysOf(both, "a:1");
  ASSERT_GE(on_a.size(), 2u);
  const std::string& tight_here = on_a[0];   // b used more of it than a had
  const std::string& tight_there = on_a[1];  // a had used more
  Charge(a, kLogin, tight_here, 3);
  Charge(a, kLogin, tight_there, 8);
  ASSERT_TRUE(b.ownership.SetMembers({"b:1"}, 2).ok());
  // a's hand-off is late: b's wait ends at the deadline and b serves the keys fresh.
  b.clock.Advance(5'000);
  b.ownership.ExpireWaits(b.clock.NowMs());
  ASSERT_EQ(b.ownership.waiting_slots(), 0);
  Charge(b, kLogin, tight_here, 9);
  Charge(b, kLogin, tight_there, 1);
  a.ownership.Leave(2);
  ASSERT_TRUE(Run(a, Sink()).has_value());
  EXPECT_EQ(Available(b, kLogin, tight_here), 1);
  EXPECT_EQ(Available(b, kLogin, tight_there), 2);
  EXPECT_EQ(b.store.usage(kLogin).keys, 2);
}

TEST_F(HandoffPartTest, KeysASinkDoesNotTakeAreCountedLost) {
  const Members both = {"a:1", "b:1"};
  Side& a = Add("a:1", both, 1'000);
  const std::vector<std::string> on_a = KeysOf(both, "a:1");
  for (const std::string& k : on_a) Charge(a, kDay, k, 1);
  a.ownership.Leave(2);
  int calls = 0;
  const std::optional<HandoffStats> stats =
      Run(a, [&](const std::string&, std::span<const uint8_t>) -> int64_t {
        ++calls;
        return -1;  // unreachable
      });
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(stats->keys_sent, 0);
  EXPECT_EQ(stats->keys_lost, static_cast<int64_t>(on_a.size()));
  EXPECT_EQ(a.handoff.counters().keys_lost.load(), static_cast<int64_t>(on_a.size()));
  EXPECT_EQ(a.store.keys(), 0);  // given up all the same: they start fresh on their owner

  // A sink that takes some of a batch: the rest are lost.
  Side& c = Add("c:1", {"c:1", "d:1"}, 1'000);
  const std::vector<std::string> on_c = KeysOf({"c:1", "d:1"}, "c:1");
  ASSERT_GE(on_c.size(), 3u);
  for (const std::string& k : on_c) Charge(c, kDay, k, 1);
  c.ownership.Leave(2);
  const std::optional<HandoffStats> some =
      Run(c, [&](const std::string&, std::span<const uint8_t>) -> int64_t {
        return static_cast<int64_t>(on_c.size()) - 2;
      });
  ASSERT_TRUE(some.has_value());
  EXPECT_EQ(some->keys_sent, static_cast<int64_t>(on_c.size()) - 2);
  EXPECT_EQ(some->keys_lost, 2);
}

TEST_F(HandoffPartTest, PastTheDeadlineNothingIsSent) {
  const Members both = {"a:1", "b:1"};
  Side& a = Add("a:1", both, 1'000);
  Side& b = Add("b:1", both, 1'000);
  const std::vector<std::string> on_a = KeysOf(both, "a:1");
  for (const std::string& k : on_a) Charge(a, kDay, k, 1);
  ASSERT_TRUE(b.ownership.SetMembers({"b:1"}, 2).ok());
  const int64_t waiting = b.ownership.waiting_slots();
  a.ownership.Leave(2);
  std::optional<Ownership::Job> job = a.ownership.TakeJob(std::chrono::milliseconds(0));
  ASSERT_TRUE(job.has_value());
  const HandoffStats stats =
      a.handoff.Export(*job, Sink(), std::chrono::steady_clock::now() - std::chrono::seconds(1));
  a.ownership.JobDone();
  EXPECT_EQ(frames_to_["b:1"], 0);
  EXPECT_EQ(stats.keys_sent, 0);
  EXPECT_EQ(stats.keys_lost, static_cast<int64_t>(on_a.size()));
  EXPECT_EQ(b.store.keys(), 0);
  EXPECT_EQ(b.ownership.waiting_slots(), waiting);  // no done reached it either
  EXPECT_EQ(b.handoff.counters().keys_received.load(), 0);
}

TEST_F(HandoffPartTest, AReceiverAtItsKeyBoundTakesWhatFitsAndCountsTheRest) {
  const Members both = {"a:1", "b:1"};
  Side& a = Add("a:1", both, 1'000);
  Side& b = Add("b:1", both, 2'000, nullptr, /*max_keys=*/8);
  const std::vector<std::string> on_a = KeysOf(both, "a:1", 80);
  ASSERT_GT(on_a.size(), 20u);
  for (const std::string& k : on_a) Charge(a, kLogin, k, 1);
  ASSERT_TRUE(b.ownership.SetMembers({"b:1"}, 2).ok());
  a.ownership.Leave(2);
  const std::optional<HandoffStats> stats = Run(a, Sink());
  ASSERT_TRUE(stats.has_value());
  const int64_t taken = b.handoff.counters().keys_received.load();
  const int64_t refused = b.handoff.counters().keys_refused.load();
  EXPECT_GT(taken, 0);
  EXPECT_LE(taken, 8);
  EXPECT_EQ(taken + refused, static_cast<int64_t>(on_a.size()));
  EXPECT_EQ(b.store.usage(kLogin).refusals, refused);
  EXPECT_EQ(b.store.keys(), taken);
  const Store::Tally t = b.store.Recount(kLogin);
  EXPECT_EQ(t.keys, b.store.usage(kLogin).keys);
  EXPECT_EQ(t.units, b.store.usage(kLogin).units);
  EXPECT_EQ(stats->keys_sent, taken);
  EXPECT_EQ(stats->keys_lost, refused);
  EXPECT_EQ(b.ownership.waiting_slots(), 0);  // done all the same: the rest start fresh
}

TEST_F(HandoffPartTest, ASplitGoesWithItsKey) {
  const Members both = {"a:1", "b:1"};
  Side& a = Add("a:1", both, 1'000);
  Side& b = Add("b:1", both, 500'000);
  const std::string key = KeysOf(both, "a:1").front();
  Charge(a, kDay, key, 1);
  const KeyId id = Id(a, kDay, key);
  {
    const size_t stripe = a.store.StripeOf(id);
    Store::StripeLock lock(a.store, {&stripe, 1});
    Store::Split& split = a.store.AddSplit(id);
    split.policy = kDay;
    split.key = key;
    split.k = 4;
    split.epoch = 77;
    split.valid_until_ms = a.clock.NowMs() + 1'500;
    split.rate = 900;
  }
  ASSERT_TRUE(b.ownership.SetMembers({"b:1"}, 2).ok());
  a.ownership.Leave(2);
  const std::optional<HandoffStats> stats = Run(a, Sink());
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->splits_sent, 1);
  EXPECT_EQ(a.store.split_count(), 0);
  EXPECT_EQ(b.handoff.counters().splits_received.load(), 1);
  const size_t stripe = b.store.StripeOf(id);
  Store::StripeLock lock(b.store, {&stripe, 1});
  const Store::Split* split = b.store.FindSplit(id);
  ASSERT_NE(split, nullptr);
  EXPECT_EQ(split->key, key);
  EXPECT_EQ(split->k, 4);
  EXPECT_EQ(split->epoch, 77u);
  EXPECT_EQ(split->valid_until_ms, b.clock.NowMs() + 1'500);  // on b's clock
  EXPECT_EQ(split->rate, 900);
  EXPECT_FALSE(split->merging);
}

}  // namespace
}  // namespace limiter
