// KeyTransaction alone, with no Node: one op's keys locked, loaded, reserved, then committed or
// abandoned on a Store, as the node's ops run them. An op that is denied, refused or abandoned
// leaves the store exactly as it was (keys, units, states); at the key bound a new key is
// refused with nothing left reserved; commits insert new keys and save existing ones even when
// an insert moves the table; a new sub-bucket starts drained; threads on one key and on
// overlapping pairs of keys end with exact counts; and the lease books give back at most what
// a lease still holds, for that lease only.
#include "server/key_transaction.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "protocol/rules.h"
#include "server/policy_table.h"
#include "server/sub_rates.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

const char* kPolicies = R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 10, window: 1s, class: contract,
     lease: {size: 5, ttl: 2s}}
  - {name: login, algorithm: fixed_window, limit: 5, window: 1m, class: security}
  - {name: log, algorithm: sliding_log, limit: 50, window: 1m, class: contract}
  - {name: capped, algorithm: fixed_window, limit: 5, window: 1s, class: contract, max_keys: 3}
  - {name: count, algorithm: fixed_window, limit: 1000000, window: 1h, class: contract}
)";
constexpr int kApi = 0, kLogin = 1, kLog = 2, kCapped = 3, kCount = 4;

using Fields = std::vector<std::pair<std::string, int64_t>>;

class KeyTransactionTest : public ::testing::Test {
 protected:
  explicit KeyTransactionTest(size_t stripes = 8)
      : policies_(testing::Policies(kPolicies, "tx.yaml")),
        table_(policies_, false, false),
        store_(policies_, {10'000, stripes}) {}

  // A limit of an op, as the node resolves it: its key kept alive by the fixture.
  LimitEntry Entry(int policy, const std::string& key, int64_t now, int64_t cost = 1) {
    const Policy& p = table_.at(policy);
    LimitEntry e;
    e.policy = policy;
    {
      std::lock_guard<std::mutex> lock(names_mu_);  // ops run on several threads
      e.key = names_.emplace_back(key);
    }
    e.id = protocol::LimitId(p, key, "");
    e.rate = p.rate;
    e.now = now;
    e.cost = cost;
    e.limiter = KeyLimiter(p.algorithm);
    return e;
  }

  // One CHECK as the node runs it: every limit admits or none is charged. -1 admitted,
  // -2 denied, or the policy refused at the key bound.
  static constexpr int kAdmitted = -1, kDenied = -2;
  int Check(std::vector<LimitEntry> entries, int64_t now, bool dry_run = false) {
    std::vector<size_t> stripes;
    KeyTransaction tx(stores_, entries, stripes);
    EXPECT_TRUE(tx.Load().ok());
    if (const int refused = tx.Reserve(now); refused >= 0) return refused;
    bool all = true;
    for (LimitEntry& e : entries) {
      e.decision = e.limiter.Peek(e.rate, e.now, e.cost);
      all = all && e.decision.allowed;
    }
    if (all && !dry_run) {
      for (LimitEntry& e : entries) e.decision = e.limiter.Decide(e.rate, e.now, e.cost);
    }
    if ((all && !dry_run) || tx.must_save()) {
      tx.Commit();
    } else {
      tx.Abandon();
    }
    return all ? kAdmitted : kDenied;
  }
  int Check(int policy, const std::string& key, int64_t now, int64_t cost = 1) {
    return Check({Entry(policy, key, now, cost)}, now);
  }

  // The key's state as the store holds it (empty: no slot).
  Fields StateOf(int policy, const std::string& key) {
    const KeyId id = protocol::LimitId(table_.at(policy), key, "");
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    const Slot* slot = store_.Find(policy, id);
    if (slot == nullptr) return {};
    Fields out;
    for (const auto& [name, value] : store_.Unpack(policy, slot).Fields()) {
      out.emplace_back(std::string(name), value);
    }
    return out;
  }
  int64_t Available(int policy, const std::string& key, int64_t now) {
    const KeyId id = protocol::LimitId(table_.at(policy), key, "");
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    return store_.Unpack(policy, store_.Find(policy, id)).Available(table_.at(policy).rate, now);
  }

  // Everything an op could change, to compare before and after.
  struct Picture {
    int64_t keys = 0, units = 0, committed = 0;
    std::vector<std::pair<int64_t, int64_t>> per_policy;  // keys, units
    std::map<std::string, Fields> states;
  };
  static void ExpectSame(const Picture& after, const Picture& before) {
    EXPECT_EQ(after.keys, before.keys);
    EXPECT_EQ(after.units, before.units);
    EXPECT_EQ(after.committed, before.committed);
    EXPECT_EQ(after.per_policy, before.per_policy);
    EXPECT_EQ(after.states, before.states);
  }
  Picture Take(const std::vector<std::pair<int, std::string>>& keys) {
    Picture p;
    p.keys = store_.keys();
    p.units = store_.units();
    p.committed = store_.committed();
    for (int i = 0; i < static_cast<int>(table_.size()); ++i) {
      const Store::PolicyUsage u = store_.usage(i);
      p.per_policy.emplace_back(u.keys, u.units);
      ExpectExact(i);
    }
    for (const auto& [policy, key] : keys) {
      p.states[std::to_string(policy) + "/" + key] = StateOf(policy, key);
    }
    return p;
  }
  // The counters agree with the tables, slot by slot.
  void ExpectExact(int policy) {
    const Store::Tally t = store_.Recount(policy);
    const Store::PolicyUsage u = store_.usage(policy);
    EXPECT_EQ(u.keys, t.keys) << table_.at(policy).name;
    EXPECT_EQ(u.units, t.units) << table_.at(policy).name;
  }

  PolicySet policies_;
  PolicyTable table_;
  Store store_;
  // What every transaction works on; it must outlive them (a transaction may keep a reference).
  const KeyTransaction::Stores stores_{store_, nullptr, table_, nullptr, 64};
  std::mutex names_mu_;
  std::deque<std::string> names_;  // the entries' keys point here; guarded by names_mu_
};

TEST_F(KeyTransactionTest, ADeniedOpLeavesTheStoreExactlyAsItWas) {
  const int64_t now = 1'000'000;
  ASSERT_EQ(Check(kApi, "k", now, 3), kAdmitted);
  ASSERT_EQ(Check(kLogin, "u", now, 2), kAdmitted);
  const std::vector<std::pair<int, std::string>> keys = {
      {kApi, "k"}, {kLogin, "u"}, {kLogin, "new"}, {kLog, "new"}};
  const Picture before = Take(keys);
  ASSERT_EQ(before.keys, 2);
  // One limit denied: the others, existing or new, are not charged and not kept.
  EXPECT_EQ(Check({Entry(kApi, "k", now, 8), Entry(kLogin, "u", now), Entry(kLogin, "new", now),
                   Entry(kLog, "new", now)},
                  now),
            kDenied);
  ExpectSame(Take(keys), before);
  EXPECT_EQ(Check({Entry(kLog, "new", now), Entry(kLogin, "u", now, 4)}, now), kDenied);
  ExpectSame(Take(keys), before);
  // A dry run that would admit changes nothing either.
  EXPECT_EQ(Check({Entry(kApi, "k", now), Entry(kLogin, "new", now)}, now, /*dry_run=*/true),
            kAdmitted);
  ExpectSame(Take(keys), before);
}

// What an op it did not take leaves behind: the log moved to the op's time (Take advances it,
// which drops only entries out of the window and changes no later decision), and, when full,
// its buffer grown before the op was decided (the units reserved first): the growth stays with
// the slot, counted.
TEST_F(KeyTransactionTest, ASlidingLogKeepsTheGrowthOfAnOpItDidNotTakeAndCountsItExactly) {
  const int64_t now = 1'000'000;
  // Eight entries (one per millisecond: a log merges charges of the same one) fill its
  // buffer: the next charge needs it to grow, and reserves the units for that first.
  for (int i = 0; i < 8; ++i) ASSERT_EQ(Check(kLog, "l", now + i), kAdmitted);
  {
    const KeyId id = protocol::LimitId(table_.at(kLog), "l", "");
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    const KeyLimiter log = store_.Unpack(kLog, store_.Find(kLog, id));
    const SlidingLog::Entries& entries = std::get<SlidingLog::State>(log.state()).entries;
    ASSERT_EQ(entries.size(), 8u);
    ASSERT_EQ(entries.capacity(), 8u);
  }
  ASSERT_EQ(store_.usage(kLog).units, Store::LogUnits(8));
  ASSERT_GT(Store::LogUnits(16), Store::LogUnits(8));
  const std::vector<std::pair<int, std::string>> keys = {{kLog, "l"}};
  const Picture before = Take(keys);
  const int64_t next = now + 8;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Check({Entry(kLog, "l", next)}, next, /*dry_run=*/true), kAdmitted);
    EXPECT_EQ(Check({Entry(kLog, "l", next), Entry(kApi, "k", next, 11)}, next), kDenied);
    Picture after = Take(keys);  // checks the counts against the tables
    Fields state = after.states.at("2/l");
    ASSERT_EQ(state.back().first, "seen_ms");
    EXPECT_EQ(state.back().second, next);
    state.back().second = before.states.at("2/l").back().second;
    EXPECT_EQ(state, before.states.at("2/l"));  // not one entry more
    EXPECT_EQ(after.keys, before.keys);
    EXPECT_EQ(after.per_policy[kLog].second, Store::LogUnits(16));  // grown once, not again
    EXPECT_EQ(after.per_policy[kApi], before.per_policy[kApi]);     // the new key went back
  }
  // Taken, the growth is what the entry needed: nothing more is reserved.
  EXPECT_EQ(Check(kLog, "l", next), kAdmitted);
  ExpectExact(kLog);
  EXPECT_EQ(store_.usage(kLog).units, Store::LogUnits(16));
}

TEST_F(KeyTransactionTest, AnAbandonedOpOnNewKeysGivesBackWhatItReserved) {
  const int64_t now = 1'000'000;
  std::vector<LimitEntry> entries = {Entry(kApi, "a", now), Entry(kLogin, "b", now),
                                     Entry(kLog, "c", now)};
  {
    std::vector<size_t> stripes;
    KeyTransaction tx(stores_, entries, stripes);
    ASSERT_TRUE(tx.Load().ok());
    EXPECT_FALSE(tx.must_save());
    ASSERT_EQ(tx.Reserve(now), -1);
    // Reserved while it runs: room no other op can take.
    EXPECT_EQ(store_.usage(kApi).units, 1);
    EXPECT_EQ(store_.usage(kLogin).units, 1);
    EXPECT_GE(store_.usage(kLog).units, 1);
    tx.Abandon();
  }
  EXPECT_EQ(store_.keys(), 0);
  EXPECT_EQ(store_.units(), 0);
  for (int p : {kApi, kLogin, kLog}) {
    EXPECT_EQ(store_.usage(p).units, 0) << p;
    ExpectExact(p);
  }
}

TEST_F(KeyTransactionTest, AtItsBoundANewKeyIsRefusedAndNothingStaysReserved) {
  const int64_t now = 1'000'000;
  for (const char* k : {"a", "b", "c"}) ASSERT_EQ(Check(kCapped, k, now), kAdmitted);
  ASSERT_EQ(store_.usage(kCapped).units, 3);
  const std::vector<std::pair<int, std::string>> keys = {
      {kCapped, "a"}, {kCapped, "d"}, {kApi, "x"}, {kLogin, "y"}};
  const Picture before = Take(keys);
  EXPECT_EQ(Check(kCapped, "d", now), kCapped);
  EXPECT_EQ(store_.usage(kCapped).refusals, 1);
  // With other limits, new and existing, before and after it: they give their room back.
  EXPECT_EQ(Check({Entry(kApi, "x", now), Entry(kCapped, "d", now), Entry(kLogin, "y", now)}, now),
            kCapped);
  EXPECT_EQ(Check({Entry(kCapped, "a", now), Entry(kCapped, "d", now)}, now), kCapped);
  EXPECT_EQ(store_.usage(kCapped).refusals, 3);
  ExpectSame(Take(keys), before);
  // An existing key at the bound is charged as usual.
  EXPECT_EQ(Check(kCapped, "a", now), kAdmitted);
}

class KeyTransactionOneStripeTest : public KeyTransactionTest {
 protected:
  KeyTransactionOneStripeTest() : KeyTransactionTest(/*stripes=*/1) {}
};

TEST_F(KeyTransactionOneStripeTest, AtItsBoundExpiredKeysMakeRoomEvenTheOpsOwn) {
  const int64_t now = 1'000'000;
  for (const char* k : {"a", "b", "c"}) ASSERT_EQ(Check(kCapped, k, now), kAdmitted);
  ASSERT_EQ(Check(kCapped, "d", now), kCapped);
  // A second later every window has passed: the three are fresh, and reclaimed for the new
  // key, "a" among them though the op holds it. Both are kept with their charge.
  const int64_t later = now + 1'000;
  EXPECT_EQ(Check({Entry(kCapped, "a", later, 2), Entry(kCapped, "d", later, 3)}, later),
            kAdmitted);
  EXPECT_EQ(store_.usage(kCapped).keys, 2);
  EXPECT_EQ(store_.evictions(), 3);
  EXPECT_EQ(Available(kCapped, "a", later), 3);
  EXPECT_EQ(Available(kCapped, "d", later), 2);
  EXPECT_TRUE(StateOf(kCapped, "b").empty());
  ExpectExact(kCapped);
}

TEST_F(KeyTransactionOneStripeTest, ACommitSavesExistingKeysThoughItsInsertsMoveTheTable) {
  const int64_t now = 1'000'000;
  ASSERT_EQ(Check(kCount, "old", now, 7), kAdmitted);
  // Thirty new keys in the same table: it grows several times while they go in.
  std::vector<LimitEntry> entries;
  entries.reserve(31);
  for (int i = 0; i < 30; ++i) entries.push_back(Entry(kCount, "new-" + std::to_string(i), now));
  entries.push_back(Entry(kCount, "old", now, 5));
  ASSERT_EQ(Check(std::move(entries), now), kAdmitted);
  EXPECT_EQ(Available(kCount, "old", now), 1'000'000 - 12);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(Available(kCount, "new-" + std::to_string(i), now), 1'000'000 - 1) << i;
  }
  EXPECT_EQ(store_.usage(kCount).keys, 31);
  ExpectExact(kCount);
}

TEST_F(KeyTransactionTest, ACommitInsertsNewKeysAndSavesExistingOnes) {
  const int64_t now = 1'000'000;
  ASSERT_EQ(Check(kApi, "k", now, 2), kAdmitted);
  ASSERT_EQ(
      Check({Entry(kApi, "k", now, 3), Entry(kLogin, "u", now), Entry(kLog, "l", now, 4)}, now),
      kAdmitted);
  EXPECT_EQ(Available(kApi, "k", now), 5);
  EXPECT_EQ(Available(kLogin, "u", now), 4);
  EXPECT_EQ(Available(kLog, "l", now), 46);
  EXPECT_EQ(store_.keys(), 3);
  for (int p : {kApi, kLogin, kLog}) ExpectExact(p);
}

TEST_F(KeyTransactionTest, PeekReadsAndChangesNothing) {
  const int64_t now = 1'000'000;
  ASSERT_EQ(Check(kApi, "k", now, 4), kAdmitted);
  const std::vector<std::pair<int, std::string>> keys = {{kApi, "k"}, {kApi, "none"}};
  const Picture before = Take(keys);
  for (const char* key : {"k", "none"}) {
    std::vector<LimitEntry> entries = {Entry(kApi, key, now)};
    std::vector<size_t> stripes;
    KeyTransaction tx(stores_, entries, stripes);
    ASSERT_TRUE(tx.Peek().ok());
    EXPECT_EQ(entries[0].slot != nullptr, std::string(key) == "k");
    EXPECT_EQ(entries[0].limiter.Available(entries[0].rate, now), key == std::string("k") ? 6 : 10);
  }
  ExpectSame(Take(keys), before);
}

TEST_F(KeyTransactionTest, ANewSubBucketStartsDrainedAndIsKeptThoughDenied) {
  const int64_t now = 1'000'000;
  const Policy& api = table_.at(kApi);
  const std::optional<Rate> sub = SubRate(api, 4, 1);
  ASSERT_TRUE(sub.has_value());
  const auto sub_entry = [&](int64_t at) {
    LimitEntry e = Entry(kApi, "hot", at);
    e.id = protocol::SubBucketId(api, "hot", 77, 1);
    e.rate = *sub;
    e.split_k = 4;
    e.split_index = 1;
    return e;
  };
  {
    std::vector<LimitEntry> entries = {sub_entry(now)};
    std::vector<size_t> stripes;
    KeyTransaction tx(stores_, entries, stripes);
    ASSERT_TRUE(tx.Load().ok());
    EXPECT_TRUE(tx.must_save());  // a fresh state would be full: this one must be kept
    EXPECT_EQ(entries[0].limiter.Available(*sub, now), 0);
    ASSERT_EQ(tx.Reserve(now), -1);
    EXPECT_FALSE(entries[0].limiter.Decide(*sub, now, 1).allowed);
    tx.Commit();
  }
  EXPECT_EQ(store_.usage(kApi).keys, 1);
  // Made once: later it is loaded as it is, refilled at the sub-bucket's rate (10/4 a second).
  const int64_t later = now + 1'000;
  std::vector<LimitEntry> entries = {sub_entry(later)};
  std::vector<size_t> stripes;
  KeyTransaction tx(stores_, entries, stripes);
  ASSERT_TRUE(tx.Load().ok());
  EXPECT_FALSE(tx.must_save());
  EXPECT_EQ(entries[0].limiter.Available(*sub, later), sub->limit());
  ASSERT_EQ(tx.Reserve(later), -1);
  tx.Abandon();
}

TEST_F(KeyTransactionTest, ThreadsOnOneKeyAndOnOverlappingPairsEndWithExactCounts) {
  const int64_t now = 1'000'000;
  // Four keys in four different stripes.
  std::vector<std::string> keys;
  std::vector<size_t> seen;
  for (int i = 0; keys.size() < 4; ++i) {
    const std::string k = "pair-" + std::to_string(i);
    const size_t s = store_.StripeOf(protocol::LimitId(table_.at(kCount), k, ""));
    if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
    seen.push_back(s);
    keys.push_back(k);
  }
  constexpr int kThreads = 4, kOps = 400;
  std::atomic<int> denied{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        // One key alone, then a pair in one order or the other: locks are taken ascending
        // whatever the order of the op's limits, so no two ops wait on each other.
        const std::string& a = keys[static_cast<size_t>(t)];
        const std::string& b = keys[static_cast<size_t>((t + 1) % kThreads)];
        EXPECT_EQ(Check(kCount, "one", now), kAdmitted);
        if (i % 2 == 0) {
          EXPECT_EQ(Check({Entry(kCount, a, now), Entry(kCount, b, now)}, now), kAdmitted);
        } else {
          EXPECT_EQ(Check({Entry(kCount, b, now), Entry(kCount, a, now)}, now), kAdmitted);
        }
        // And one that is denied: it charges nothing.
        if (Check({Entry(kCount, a, now), Entry(kCount, b, now, 2'000'000)}, now) == kDenied) {
          denied.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(denied.load(), kThreads * kOps);
  EXPECT_EQ(Available(kCount, "one", now), 1'000'000 - kThreads * kOps);
  for (const std::string& k : keys) {
    EXPECT_EQ(Available(kCount, k, now), 1'000'000 - 2 * kOps) << k;  // in two pairs each
  }
  EXPECT_EQ(store_.usage(kCount).keys, 5);
  ExpectExact(kCount);
}

TEST_F(KeyTransactionTest, ThreadsAddingKeysAtTheBoundGetExactlyTheRoomThereIs) {
  const int64_t now = 1'000'000;
  constexpr int kThreads = 4, kKeys = 50;
  std::atomic<int> admitted{0}, refused{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kKeys; ++i) {
        const int r =
            Check({Entry(kApi, "t" + std::to_string(t) + "-" + std::to_string(i), now),
                   Entry(kCapped, "t" + std::to_string(t) + "-" + std::to_string(i), now)},
                  now);
        if (r == kAdmitted) admitted.fetch_add(1);
        if (r == kCapped) refused.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 3);  // capped holds 3 keys, and their windows do not pass
  EXPECT_EQ(refused.load(), kThreads * kKeys - 3);
  EXPECT_EQ(store_.usage(kCapped).keys, 3);
  EXPECT_EQ(store_.usage(kCapped).refusals, kThreads * kKeys - 3);
  EXPECT_EQ(store_.usage(kApi).keys, 3);  // the api keys of the refused ops went back
  ExpectExact(kCapped);
  ExpectExact(kApi);
}

// LEASE and RETURN as the node runs them.
class LeaseBooksTest : public KeyTransactionTest {
 protected:
  struct Grant {
    uint64_t id = 0;
    int64_t at = 0;
    int64_t units = 0;
  };
  Grant Lease(const std::string& key, int64_t units, int64_t now, uint64_t lease_id) {
    std::vector<LimitEntry> entries = {Entry(kApi, key, now)};
    std::vector<size_t> stripes;
    KeyTransaction tx(stores_, entries, stripes);
    EXPECT_TRUE(tx.Load().ok());
    EXPECT_EQ(tx.Reserve(now), -1);
    tx.NoteInEffect();
    LimitEntry& e = entries.front();
    const int64_t grant = std::min(units, e.limiter.Available(e.rate, e.now));
    if (grant <= 0) {
      tx.Abandon();
      return {};
    }
    e.decision = e.limiter.Decide(e.rate, e.now, grant);
    e.in_effect = e.limiter.InEffect(e.rate, e.now);
    tx.Commit();
    tx.RecordGrant(lease_id, table_.at(kApi).lease.ttl_ms, grant);
    return {lease_id, now, grant};
  }
  // A CHECK that learns the books (ClampBooks), as the node's does while leases are out.
  bool Admit(const std::string& key, int64_t cost, int64_t now) {
    std::vector<LimitEntry> entries = {Entry(kApi, key, now, cost)};
    std::vector<size_t> stripes;
    KeyTransaction tx(stores_, entries, stripes);
    EXPECT_TRUE(tx.Load().ok());
    EXPECT_EQ(tx.Reserve(now), -1);
    tx.NoteInEffect();
    LimitEntry& e = entries.front();
    e.decision = e.limiter.Decide(e.rate, e.now, e.cost);
    if (!e.decision.allowed) {
      tx.Abandon();
      return false;
    }
    tx.Commit();
    tx.ClampBooks();
    return true;
  }
  Result<int64_t> Return(const std::string& key, const Grant& g, int64_t units, int64_t now) {
    std::vector<LimitEntry> entries = {Entry(kApi, key, now)};
    std::vector<size_t> stripes;
    KeyTransaction tx(stores_, entries, stripes);
    return tx.Return(g.id, g.at, units);
  }
};

TEST_F(LeaseBooksTest, AReturnRightAwayLeavesTheKeyAsIfNeverCharged) {
  const int64_t now = 1'000'000;
  const Grant g = Lease("k", 10, now, 41);
  ASSERT_EQ(g.units, 10);
  EXPECT_EQ(Available(kApi, "k", now), 0);
  EXPECT_EQ(store_.books(), 1);
  Result<int64_t> back = Return("k", g, 10, now);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, 10);
  EXPECT_EQ(Available(kApi, "k", now), 10);
  EXPECT_TRUE(StateOf(kApi, "k").empty()) << "a full bucket is a fresh key: not kept";
  EXPECT_EQ(store_.books(), 0);  // the book goes with the key
  ExpectExact(kApi);
}

TEST_F(LeaseBooksTest, AReturnGivesBackAtMostWhatTheLeaseStillHolds) {
  const int64_t now = 1'000'000;
  const Grant g = Lease("k", 10, now, 41);
  ASSERT_EQ(g.units, 10);
  // Half a second later half the charge has refilled: only 5 of the lease are still in effect.
  const int64_t later = now + 500;
  ASSERT_TRUE(Admit("k", 3, later));  // and an admission since, which stays charged
  Result<int64_t> back = Return("k", g, 10, later);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, 5);
  EXPECT_EQ(Available(kApi, "k", later), 7);  // 10 - 3, never more than the bucket holds
  // Returned once: a second return of the same lease gives nothing.
  Result<int64_t> again = Return("k", g, 1, later);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().find("was returned already"), std::string::npos) << again.error();
  EXPECT_EQ(Available(kApi, "k", later), 7);
}

TEST_F(LeaseBooksTest, AReturnIsForItsOwnLeaseOnItsOwnKeyOnly) {
  const int64_t now = 1'000'000;
  const Grant g = Lease("k", 6, now, 41);
  ASSERT_EQ(g.units, 6);
  ASSERT_EQ(Lease("other", 6, now, 42).units, 6);
  const Fields k = StateOf(kApi, "k"), other = StateOf(kApi, "other");
  // Another lease id, the lease on another key, another grant time, more units than granted.
  Grant wrong_id = g;
  wrong_id.id = 43;
  Result<int64_t> r = Return("k", wrong_id, 6, now);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("lease 43 is not outstanding on this node"), std::string::npos);
  Grant elsewhere = g;
  elsewhere.id = 42;
  r = Return("k", elsewhere, 6, now);  // 42 was granted on "other", not on "k"
  ASSERT_FALSE(r.ok());
  r = Return("never-leased", g, 6, now);
  ASSERT_FALSE(r.ok());
  Grant moved = g;
  moved.at = now - 1;
  r = Return("k", moved, 6, now);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("was granted at"), std::string::npos) << r.error();
  r = Return("k", g, 7, now);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("which granted 6"), std::string::npos) << r.error();
  EXPECT_EQ(StateOf(kApi, "k"), k);
  EXPECT_EQ(StateOf(kApi, "other"), other);
  EXPECT_TRUE(StateOf(kApi, "never-leased").empty());
  // The right one still works.
  r = Return("k", g, 6, now);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r, 6);
  // Past its TTL a lease has lapsed: its units are not given back.
  const Grant late = Lease("late", 4, now, 44);
  ASSERT_EQ(late.units, 4);
  r = Return("late", late, 4, now + 2'001);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("has lapsed"), std::string::npos) << r.error();
  ExpectExact(kApi);
}

}  // namespace
}  // namespace limiter
