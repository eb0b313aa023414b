// Per-policy key budgets in the store (store.h): reserves, caps, sliding-log units, and exact
// counts under concurrency; and how the node reports them.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "protocol/request_builder.h"
#include "protocol/wire.h"
#include "server/node.h"
#include "server/store.h"
#include "test/support/node_harness.h"
#include "test/support/policies.h"
#include "test/unit/test_seed.h"

namespace limiter {
namespace {

// Drives a Store the way the node's ops do: lock the stripe, take the state, reserve room for
// one charge, decide, save (or give back).
class StoreDriver {
 public:
  StoreDriver(const PolicySet& policies, int64_t max_keys, size_t stripes = 8)
      : policies_(policies), store_(policies, {max_keys, stripes}) {}

  Store& store() { return store_; }
  int Index(const std::string& policy) const {
    for (size_t i = 0; i < policies_.policies().size(); ++i) {
      if (policies_.policies()[i].name == policy) return static_cast<int>(i);
    }
    ADD_FAILURE() << "no policy " << policy;
    return 0;
  }
  KeyId Id(int policy, const std::string& key) const {
    return MakeKeyId({policies_.policies()[static_cast<size_t>(policy)].name, key});
  }

  // One CHECK of `cost` on the key at `now`: false when the store has no room for it.
  bool Charge(int policy, const std::string& key, int64_t now, int64_t cost = 1) {
    const KeyId id = Id(policy, key);
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    Slot* slot = store_.Find(policy, id);
    KeyLimiter limiter = store_.Take(policy, slot, now);
    if (!store_.ReserveCharge(policy, slot, limiter)) {
      store_.NoteRefusal(policy);
      store_.GiveBack(policy, std::move(limiter), slot);
      return false;
    }
    const Rate& rate = policies_.policies()[static_cast<size_t>(policy)].rate;
    if (!limiter.Decide(rate, now, cost).allowed) {
      if (slot == nullptr) store_.Unreserve(policy, store_.NewKeyUnits(policy));
      store_.GiveBack(policy, std::move(limiter), slot);
      return true;
    }
    if (slot == nullptr) slot = store_.Insert(policy, id);
    store_.Pack(policy, std::move(limiter), slot);
    return true;
  }

  void Erase(int policy, const std::string& key) {
    const KeyId id = Id(policy, key);
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    store_.Erase(policy, id);
  }

  // A copy of the key's sliding log.
  SlidingLog::State Log(int policy, const std::string& key) {
    const KeyId id = Id(policy, key);
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    KeyLimiter k = store_.Unpack(policy, store_.Find(policy, id));
    return std::get<SlidingLog::State>(k.state());
  }

  // The counters agree with the tables, slot by slot.
  void ExpectExact(int policy) {
    const Store::Tally t = store_.Recount(policy);
    const Store::PolicyUsage u = store_.usage(policy);
    EXPECT_EQ(u.keys, t.keys) << policies_.policies()[static_cast<size_t>(policy)].name;
    EXPECT_EQ(u.units, t.units) << policies_.policies()[static_cast<size_t>(policy)].name;
  }

 private:
  const PolicySet& policies_;
  Store store_;
};

const char* kThree = R"(
policies:
  - {name: cheap, algorithm: gcra, limit: 100, window: 1s, class: billing}
  - {name: login, algorithm: fixed_window, limit: 5, window: 1m, class: security}
  - {name: api, algorithm: token_bucket, limit: 10, window: 1s, class: contract}
)";

TEST(StoreBudget, PoliciesWithoutMaxKeysSplitWhatTheExplicitOnesLeave) {
  const PolicySet p = testing::Policies(R"(
policies:
  - {name: a, algorithm: gcra, limit: 1, window: 1s, class: contract, max_keys: 300}
  - {name: b, algorithm: gcra, limit: 1, window: 1s, class: contract}
  - {name: c, algorithm: gcra, limit: 1, window: 1s, class: contract}
)",
                                        "budget.yaml");
  Result<std::vector<KeyBudget>> plan = Store::PlanBudgets(p, 1001);
  ASSERT_TRUE(plan.ok()) << plan.error();
  ASSERT_EQ(plan->size(), 3u);
  EXPECT_EQ((*plan)[0].reserve, 300);
  EXPECT_EQ((*plan)[0].cap, 300);
  EXPECT_TRUE((*plan)[0].capped);
  EXPECT_EQ((*plan)[1].reserve, 175);  // half of 1001 - 300, in two
  EXPECT_EQ((*plan)[1].cap, 1001);
  EXPECT_FALSE((*plan)[1].capped);
  EXPECT_EQ((*plan)[2].reserve, 175);
}

TEST(StoreBudget, ExplicitCapsAboveTheNodesMaxKeysAreAnError) {
  const PolicySet p = testing::Policies(R"(
policies:
  - {name: a, algorithm: gcra, limit: 1, window: 1s, class: contract, max_keys: 1500}
  - {name: b, algorithm: gcra, limit: 1, window: 1s, class: contract, max_keys: 600}
  - {name: c, algorithm: gcra, limit: 1, window: 1s, class: contract}
)",
                                        "budget.yaml");
  Result<std::vector<KeyBudget>> plan = Store::PlanBudgets(p, 2000);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.error(),
            "budget.yaml: the policies' max_keys add up to 2100 (a: 1500, b: 600), more than "
            "the node's max_keys of 2000");
  EXPECT_TRUE(Store::PlanBudgets(p, 2100).ok());  // exactly max_keys: c has no reserve
  EXPECT_EQ((*Store::PlanBudgets(p, 2100))[2].reserve, 0);
}

TEST(StoreBudget, AFloodOnOnePolicyLeavesAnothersReserve) {
  const PolicySet p = testing::Policies(kThree, "budget.yaml");
  StoreDriver d(p, 300);  // a reserve of 50 each, 150 nobody's
  const int cheap = d.Index("cheap");
  const int login = d.Index("login");
  int admitted = 0;
  for (int i = 0; i < 1000; ++i) admitted += d.Charge(cheap, "flood-" + std::to_string(i), 0);
  // Its own reserve and the unreserved space: the others' reserves stay committed, empty.
  EXPECT_EQ(admitted, 200);
  EXPECT_EQ(d.store().usage(cheap).refusals, 800);
  EXPECT_EQ(d.store().committed(), 300);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(d.Charge(login, "user-" + std::to_string(i), 0)) << i;
  }
  EXPECT_FALSE(d.Charge(login, "one-too-many", 0));
  EXPECT_EQ(d.store().usage(login).keys, 50);
  EXPECT_EQ(d.store().usage(login).refusals, 1);
  d.ExpectExact(cheap);
  d.ExpectExact(login);
}

TEST(StoreBudget, PoliciesGrowBeyondTheirReservesIntoSpaceNobodyReserved) {
  const PolicySet p = testing::Policies(R"(
policies:
  - {name: capped, algorithm: gcra, limit: 1, window: 1s, class: contract, max_keys: 20}
  - {name: a, algorithm: gcra, limit: 1, window: 1s, class: contract}
  - {name: b, algorithm: gcra, limit: 1, window: 1s, class: contract}
)",
                                        "budget.yaml");
  StoreDriver d(p, 100);  // capped: 20; a and b: 20 each; 40 nobody's
  const int a = d.Index("a");
  const int b = d.Index("b");
  const int capped = d.Index("capped");
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(d.Charge(b, "b" + std::to_string(i), 0));
  int admitted = 0;
  for (int i = 0; i < 100; ++i) admitted += d.Charge(a, "a" + std::to_string(i), 0);
  EXPECT_EQ(admitted, 60);  // its 20 and the 40; b's unused 10 stay b's
  // A cap is reserved, and a cap: the capped policy gets its 20 and never more.
  admitted = 0;
  for (int i = 0; i < 30; ++i) admitted += d.Charge(capped, "c" + std::to_string(i), 0);
  EXPECT_EQ(admitted, 20);
  // b erasing keys gives a nothing (b's reserve stays b's)...
  for (int i = 0; i < 10; ++i) d.Erase(b, "b" + std::to_string(i));
  EXPECT_FALSE(d.Charge(a, "a-more", 0));
  EXPECT_EQ(d.store().committed(), 100);
  // ... and a erasing keys gives b room beyond its reserve.
  for (int i = 0; i < 30; ++i) d.Erase(a, "a" + std::to_string(i));
  admitted = 0;
  for (int i = 0; i < 100; ++i) admitted += d.Charge(b, "b" + std::to_string(i), 0);
  EXPECT_EQ(admitted, 50);
  EXPECT_EQ(d.store().usage(a).units, 30);
  EXPECT_EQ(d.store().usage(b).units, 50);
  EXPECT_EQ(d.store().committed(), 100);
  d.ExpectExact(a);
  d.ExpectExact(b);
  d.ExpectExact(capped);
}

TEST(StoreBudget, AnUncappedPolicyTakesTheRemainderAndOthersStillGetTheirReserves) {
  const PolicySet p = testing::Policies(kThree, "budget.yaml");
  StoreDriver d(p, 302);  // reserves of 50; 152 nobody's
  const int cheap = d.Index("cheap");
  int admitted = 0;
  for (int i = 0; i < 500; ++i) admitted += d.Charge(cheap, std::to_string(i), 0);
  EXPECT_EQ(admitted, 202);
  for (const char* other : {"login", "api"}) {
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(d.Charge(d.Index(other), std::to_string(i), 0)) << other << ' ' << i;
    }
  }
  EXPECT_EQ(d.store().units(), 302);
}

TEST(StoreBudget, ConcurrentInsertsAndErasesOnTwoPoliciesKeepTheCountsExact) {
  const PolicySet p = testing::Policies(R"(
policies:
  - {name: bucket, algorithm: token_bucket, limit: 1, window: 1h, class: contract}
  - {name: log, algorithm: sliding_log, limit: 40, window: 1h, class: contract}
)",
                                        "budget.yaml");
  // Tight enough that both policies run past their reserves into refusals.
  StoreDriver d(p, 1500, 4);
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::atomic<bool> over_bound{false};
  std::atomic<bool> done{false};
  // Watches the bound, and sweeps (as if hours later: every key not in an op is idle).
  std::thread watch([&] {
    while (!done.load()) {
      if (d.store().committed() > d.store().max_keys()) over_bound = true;
      d.store().Sweep(int64_t{100} * 3'600'000, 64);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + static_cast<uint64_t>(t));
      for (int i = 0; i < 20'000; ++i) {
        const int policy = static_cast<int>(rng() % 2);
        const std::string key = std::to_string(rng() % 600);
        const int64_t now = i;  // each thread's own time: a log key only moves forward
        if (rng() % 4 == 0) {
          d.Erase(policy, key);
        } else {
          d.Charge(policy, key, now, 1 + static_cast<int64_t>(rng() % 2));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  done = true;
  watch.join();
  EXPECT_FALSE(over_bound.load());
  EXPECT_GT(d.store().usage(1).refusals, 0);  // the bound was reached
  EXPECT_GT(d.store().evictions(), 0);
  d.ExpectExact(0);
  d.ExpectExact(1);
  EXPECT_LE(d.store().committed(), 1500);
  // Everything erased: every unit comes back.
  for (int policy = 0; policy < 2; ++policy) {
    for (int k = 0; k < 600; ++k) d.Erase(policy, std::to_string(k));
  }
  EXPECT_EQ(d.store().units(), 0);
  EXPECT_EQ(d.store().keys(), 0);
  EXPECT_EQ(d.store().committed(), 750);  // the reserves (375 each), empty
}

TEST(StoreBudget, ASlidingLogCountsItsMemoryAsItGrowsAndShrinks) {
  const PolicySet p = testing::Policies(R"(
policies:
  - {name: log, algorithm: sliding_log, limit: 100, window: 1s, class: contract}
)",
                                        "budget.yaml");
  StoreDriver d(p, 10'000);
  const int log = 0;
  EXPECT_EQ(Store::LogUnits(0), Store::LogUnits(SlidingLog::Entries::kMinCapacity));
  EXPECT_EQ(d.store().NewKeyUnits(log), Store::LogUnits(0));
  // A small log: its slot, its State and a two-entry buffer.
  ASSERT_TRUE(d.Charge(log, "k", 1000));
  EXPECT_EQ(d.store().usage(log).units,
            1 + (sizeof(SlidingLog::State) + 2 * sizeof(SlidingLog::Entry) + 31) / 32);
  // 40 entries (one per millisecond): a buffer of 64.
  for (int64_t t = 1001; t < 1040; ++t) ASSERT_TRUE(d.Charge(log, "k", t));
  EXPECT_EQ(d.Log(log, "k").entries.size(), 40u);
  EXPECT_EQ(d.Log(log, "k").entries.capacity(), 64u);
  EXPECT_EQ(d.store().usage(log).units, Store::LogUnits(64));
  d.ExpectExact(log);
  // A window later all but the newest have left: the buffer gives its space back.
  ASSERT_TRUE(d.Charge(log, "k", 2039));
  EXPECT_EQ(d.Log(log, "k").entries.size(), 1u);
  EXPECT_EQ(d.store().usage(log).units, Store::LogUnits(SlidingLog::Entries::kMinCapacity));
  d.ExpectExact(log);
  // Swept when idle: nothing left.
  EXPECT_EQ(d.store().Sweep(5000, 1000), 1u);
  EXPECT_EQ(d.store().usage(log).units, 0);
  EXPECT_EQ(d.store().usage(log).keys, 0);
}

// The server's sweeper asks for a share of each table per tick: a sweep with share 10 looks
// at about a tenth of a table (at least kMinSweepSlots), so expired keys go over ten sweeps
// and every one has gone after them.
TEST(StoreBudget, ASweepWithAShareLooksAtThatShareOfEachTable) {
  const PolicySet p = testing::Policies(R"(
policies:
  - {name: cheap, algorithm: gcra, limit: 1, window: 1s, class: billing}
)",
                                        "budget.yaml");
  StoreDriver d(p, 100'000, /*stripes=*/1);
  for (int i = 0; i < 4000; ++i) ASSERT_TRUE(d.Charge(0, "k" + std::to_string(i), 1000));
  // A second later every key is fresh again.
  const size_t first = d.store().Sweep(3000, 1'000'000, 10);
  EXPECT_GT(first, 0u);
  EXPECT_LT(first, 1000u) << "a tenth of the table's slots, not all of them";
  size_t erased = first;
  for (int i = 1; i < 10; ++i) erased += d.store().Sweep(3000, 1'000'000, 10);
  EXPECT_EQ(erased, 4000u);
  EXPECT_EQ(d.store().usage(0).keys, 0);
  EXPECT_EQ(d.store().usage(0).units, 0);
  // A small table is looked at kMinSweepSlots at a time at least: whole, here.
  StoreDriver small(p, 100'000, /*stripes=*/1);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(small.Charge(0, "s" + std::to_string(i), 5000));
  EXPECT_EQ(small.store().Sweep(7000, 1'000'000, 1000), 40u);
}

TEST(StoreBudget, ALogHoldsAtMostMinOfLAndWEntriesAndItsBufferAtMostTheNextPowerOfTwo) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  struct Case {
    const char* rate;
    int64_t steps;  // the clock moves 0 .. steps-1 ms between checks, plus `min_step`
    int64_t min_step;
  };
  // Bound by L (each check a millisecond of its own), then by W (every millisecond taken).
  for (const Case& c :
       {Case{"limit: 50, window: 1s", 2, 1}, Case{"limit: 5000, window: 300ms", 2, 0}}) {
    const PolicySet p =
        testing::Policies(std::string("policies:\n  - {name: log, algorithm: sliding_log, ") +
                              c.rate + ", class: contract}\n",
                          "budget.yaml");
    StoreDriver d(p, 1'000'000);
    const int64_t most = SlidingLog::MaxEntries(p.policies()[0].rate);
    size_t bound = SlidingLog::Entries::kMinCapacity;
    while (static_cast<int64_t>(bound) < most) bound *= 2;
    int64_t now = 0;
    size_t longest = 0;
    for (int i = 0; i < 20'000; ++i) {
      now += c.min_step + static_cast<int64_t>(rng() % static_cast<uint64_t>(c.steps));
      ASSERT_TRUE(d.Charge(0, "k", now, 1));
      const SlidingLog::State s = d.Log(0, "k");
      ASSERT_LE(static_cast<int64_t>(s.entries.size()), most) << c.rate << " at " << now;
      ASSERT_LE(s.entries.capacity(), bound) << c.rate << " at " << now;
      longest = std::max(longest, s.entries.size());
    }
    EXPECT_EQ(static_cast<int64_t>(longest), most) << c.rate;  // the bound is reached
    d.ExpectExact(0);
  }
}

TEST(StoreBudget, ALogsGrowthIsRefusedAtItsPolicysCapAndChargesNothing) {
  const PolicySet p = testing::Policies(R"(
policies:
  - {name: log, algorithm: sliding_log, limit: 100, window: 1s, class: contract, max_keys: 8}
  - {name: other, algorithm: gcra, limit: 1, window: 1s, class: contract}
)",
                                        "budget.yaml");
  StoreDriver d(p, 100);
  static_assert(sizeof(SlidingLog::State) == 48, "the unit counts below assume it");
  ASSERT_EQ(Store::LogUnits(2), 4);  // 1 + ceil((48 + 2 * 16) / 32)
  ASSERT_EQ(Store::LogUnits(8), 7);  // a buffer of 8 fits in 8 units, one of 16 does not
  ASSERT_EQ(Store::LogUnits(16), 11);
  for (int64_t t = 0; t < 8; ++t) ASSERT_TRUE(d.Charge(0, "k", t)) << t;
  EXPECT_EQ(d.Log(0, "k").entries.size(), 8u);
  EXPECT_EQ(d.store().usage(0).units, Store::LogUnits(8));
  EXPECT_TRUE(d.Charge(0, "k", 7));  // the same millisecond merges: no growth needed
  EXPECT_EQ(d.Log(0, "k").total, 9);
  EXPECT_FALSE(d.Charge(0, "k", 8));  // a ninth entry needs a buffer of 16
  EXPECT_EQ(d.Log(0, "k").total, 9);  // nothing charged
  EXPECT_EQ(d.store().usage(0).refusals, 1);
  d.ExpectExact(0);
}

// The store's hash (stripe, slot) is keyed by a seed drawn per process, not the public one,
// so probe chains cannot be computed offline.
TEST(KeyIdSeed, IsDrawnPerProcessNotThePublicConstant) {
  auto chained = [](uint64_t seed, std::string_view a, std::string_view b) {
    seed = XXH3_64bits_withSeed(a.data(), a.size(), seed);
    const XXH128_hash_t h = XXH3_128bits_withSeed(b.data(), b.size(), seed);
    return KeyId{h.low64, h.high64};
  };
  const KeyId id = MakeKeyId({"policy", "key"});
  EXPECT_EQ(id, chained(KeyIdSeed(), "policy", "key"));
  EXPECT_FALSE(id == chained(0x6b65792d69643a31, "policy", "key"));  // the old "key-id:1"
  EXPECT_EQ(KeyIdSeed(), KeyIdSeed());
}

// Through the node: the counts in STATS and /metrics, and the refusal message.
TEST(StoreBudget, TheNodeReportsEachPolicysKeysAndRefusals) {
  const PolicySet p = testing::Policies(R"(
policies:
  - {name: cheap, algorithm: gcra, limit: 100, window: 1s, class: billing}
  - {name: login, algorithm: fixed_window, limit: 5, window: 1m, class: security}
  - {name: vip, algorithm: sliding_log, limit: 10, window: 1m, class: contract, max_keys: 40}
)",
                                        "budget.yaml");
  NodeOptions options;
  options.store.max_keys = 240;  // vip: 40; cheap and login: 50 each; 100 nobody's
  options.store.stripes = 4;
  testing::NodeHarness harness(p, options);
  Node& node = harness.node();
  // One CHECK of (policy, key): its status and error.
  auto check = [&](const std::string& policy, const std::string& key) {
    const wire::OpReply& op = harness.CheckReply(policy, key);
    return std::pair{op.status(), testing::ErrorOf(op)};
  };
  int refused = 0;
  std::string message;
  for (int i = 0; i < 300; ++i) {
    auto [status, error] = check("cheap", "k" + std::to_string(i));
    if (status == wire::Status::KeysExhausted) {
      ++refused;
      message = error;
    }
  }
  EXPECT_EQ(refused, 150);
  EXPECT_EQ(message,
            "the node holds its maximum of 240 keys (counting space reserved for other "
            "policies; policy 'cheap' holds 150, its reserve is 50); new keys are refused");
  for (int i = 0; i < 50; ++i) EXPECT_EQ(check("login", std::to_string(i)).first, wire::Status::Ok);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(check("vip", std::to_string(i)).first, wire::Status::Ok);
  auto [status, error] = check("vip", "one-more");
  EXPECT_EQ(status, wire::Status::KeysExhausted);
  EXPECT_EQ(error, "policy 'vip' holds its maximum of 40 keys on this node; new keys are refused");

  std::map<std::string, int64_t> stats;
  for (const auto& [name, value] : node.Stats()) stats[name] = value;
  // 151 refusals at one instant scanned each of the 4 stripes once, not once per refusal:
  // a flood of new keys at a budget costs a lookup each.
  EXPECT_LE(stats["reclaim_passes"], 4);
  EXPECT_GE(stats["reclaim_passes"], 1);
  EXPECT_EQ(stats["keys.cheap"], 150);
  EXPECT_EQ(stats["key_refusals.cheap"], 150);
  EXPECT_EQ(stats["keys.login"], 50);
  EXPECT_EQ(stats["key_refusals.login"], 0);
  EXPECT_EQ(stats["keys.vip"], 10);
  EXPECT_EQ(stats["key_units.vip"], 10 * Store::LogUnits(0));
  EXPECT_EQ(stats["key_refusals.vip"], 1);
  EXPECT_EQ(stats["key_reserve.cheap"], 50);
  EXPECT_EQ(stats["key_cap.vip"], 40);
  EXPECT_EQ(stats["keys"], 210);
  EXPECT_EQ(stats["refusals"], 151);
  const std::string metrics = node.RenderMetrics();
  for (const char* line : {"limiter_policy_keys{policy=\"cheap\"} 150\n",
                           "limiter_policy_key_refusals_total{policy=\"cheap\"} 150\n",
                           "limiter_policy_key_refusals_total{policy=\"login\"} 0\n",
                           "limiter_policy_key_reserve{policy=\"login\"} 50\n",
                           "limiter_policy_key_cap{policy=\"vip\"} 40\n",
                           "limiter_policy_key_units{policy=\"vip\"} 40\n"}) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line << metrics;
  }
}

}  // namespace
}  // namespace limiter

namespace limiter {
namespace {

// A node with one policy and a small key bound, for the reclaim passes at the bound.
struct SmallNode {
  SmallNode(const std::string& yaml, int64_t max_keys, size_t stripes)
      : harness(yaml, Options(max_keys, stripes)) {}
  static NodeOptions Options(int64_t max_keys, size_t stripes) {
    NodeOptions options;
    options.store.max_keys = max_keys;
    options.store.stripes = stripes;
    return options;
  }
  wire::Status Check(const std::string& key) {
    return harness.CheckReply(harness.policies().policies().front().name, key).status();
  }
  // Admits keys k0..k{count-1}: the policy's budget full.
  void Fill(int count) {
    for (int i = 0; i < count; ++i) ASSERT_EQ(Check("k" + std::to_string(i)), wire::Status::Ok);
  }
  int64_t ReclaimPasses() { return harness.Stat("reclaim_passes"); }

  testing::NodeHarness harness;
  ManualClock& clock = harness.clock();
  Node& node = harness.node();
};

// A new key at a full budget reclaims expired keys itself, but a stripe whose pass found
// nothing is left alone for kReclaimBackoffMs (plus up to half of it): keys that expire
// meanwhile wait for the sweeper or the next pass.
TEST(StoreBudget, ARefusedNewKeyScansAStripeAtMostOncePerBackoff) {
  SmallNode n(R"(
policies:
  - {name: cheap, algorithm: gcra, limit: 100, window: 1s, class: billing, max_keys: 20}
)",
              20, 1);
  ASSERT_NO_FATAL_FAILURE(n.Fill(20));
  // Full, and nothing has expired: one pass, then none for 1000 more new keys.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(n.Check("new" + std::to_string(i)), wire::Status::KeysExhausted);
  }
  EXPECT_EQ(n.ReclaimPasses(), 1);
  // One check of 100/s is fresh again after 10 ms; within the backoff the keys stay.
  n.clock.Advance(Store::kReclaimBackoffMs - 1);
  EXPECT_EQ(n.Check("later"), wire::Status::KeysExhausted);
  EXPECT_EQ(n.ReclaimPasses(), 1);
  // After it and its jitter, the next new key's pass reclaims them and it is admitted.
  n.clock.Advance(Store::kReclaimBackoffMs / 2 + 1);
  EXPECT_EQ(n.Check("later"), wire::Status::Ok);
  EXPECT_EQ(n.ReclaimPasses(), 2);
}

// While a stripe's passes do not let the key in, it waits twice as long after each one (100,
// 200, 400, 800, 1600, 1600 ms, each plus up to half of it); a pass that lets a key in starts
// the waits over.
TEST(StoreBudget, FruitlessReclaimPassesBackOffExponentiallyAndAReclaimResetsIt) {
  SmallNode n(R"(
policies:
  - {name: cheap, algorithm: gcra, limit: 1, window: 1h, class: billing, max_keys: 20}
)",
              20, 1);
  ASSERT_NO_FATAL_FAILURE(n.Fill(20));
  int64_t passes = 0;
  int fresh = 0;
  // A new key before the wait is over makes no pass; one after its longest jitter makes one.
  auto waits = [&](int64_t wait) {
    SCOPED_TRACE("a wait of " + std::to_string(wait) + " ms");
    n.clock.Advance(wait - 1);
    EXPECT_EQ(n.Check("new" + std::to_string(++fresh)), wire::Status::KeysExhausted);
    EXPECT_EQ(n.ReclaimPasses(), passes) << "a pass before the wait was over";
    n.clock.Advance(wait / 2 + 1);
    EXPECT_EQ(n.Check("new" + std::to_string(++fresh)), wire::Status::KeysExhausted);
    EXPECT_EQ(n.ReclaimPasses(), ++passes) << "no pass after the wait and its jitter";
  };
  EXPECT_EQ(n.Check("new0"), wire::Status::KeysExhausted);
  EXPECT_EQ(n.ReclaimPasses(), ++passes);
  for (const int64_t wait : {100, 200, 400, 800, 1600, 1600}) waits(wait);
  // An hour on, every key is fresh again: the next pass (due by now) reclaims them, and the
  // wait after the next fruitless pass is 100 ms again.
  n.clock.Advance(3'600'000);
  ASSERT_EQ(n.Check("after-an-hour"), wire::Status::Ok);
  EXPECT_EQ(n.ReclaimPasses(), ++passes);
  for (int i = 0; i < 19; ++i) ASSERT_EQ(n.Check("refill" + std::to_string(i)), wire::Status::Ok);
  EXPECT_EQ(n.Check("one-too-many"), wire::Status::KeysExhausted);
  EXPECT_EQ(n.ReclaimPasses(), ++passes);
  waits(Store::kReclaimBackoffMs);
}

// A pass that reclaims only other policies' keys does not make room under a policy's own
// cap: it counts as fruitless, so a flood on the capped policy does not scan its stripe for
// every refused key while the other policy's keys keep expiring.
TEST(StoreBudget, APassThatFreesNoRoomForTheRefusedPolicyStillBacksOff) {
  SmallNode n(R"(
policies:
  - {name: cheap, algorithm: gcra, limit: 1, window: 1h, class: billing, max_keys: 20}
  - {name: busy, algorithm: gcra, limit: 100, window: 1s, class: billing}
)",
              1000, 1);
  ASSERT_NO_FATAL_FAILURE(n.Fill(20));
  auto busy_keys = [&](const std::string& prefix) {
    for (int i = 0; i < 30; ++i) {
      ASSERT_EQ(n.harness.CheckReply("busy", prefix + std::to_string(i)).status(),
                wire::Status::Ok);
    }
  };
  busy_keys("a");
  n.clock.Advance(20);  // busy's keys are fresh again after 10 ms
  EXPECT_EQ(n.Check("flood1"), wire::Status::KeysExhausted);
  EXPECT_EQ(n.ReclaimPasses(), 1);
  EXPECT_EQ(n.node.store().usage(1).keys, 0) << "the pass reclaimed busy's keys";
  // More of busy's keys expire; the next flood key within the wait makes no pass.
  busy_keys("b");
  n.clock.Advance(20);
  EXPECT_EQ(n.Check("flood2"), wire::Status::KeysExhausted);
  EXPECT_EQ(n.ReclaimPasses(), 1);
}

// Stripes passed at one instant come due again at different times, so that a frame of new
// keys over every stripe does not make a pass over each every 100 ms.
TEST(StoreBudget, StripesPassedTogetherComeDueApart) {
  SmallNode n(R"(
policies:
  - {name: cheap, algorithm: gcra, limit: 1, window: 1h, class: billing, max_keys: 640}
)",
              640, 64);
  ASSERT_NO_FATAL_FAILURE(n.Fill(640));
  auto frame_of_new_keys = [&](const std::string& prefix) {
    RequestBuilder b;
    for (int i = 0; i < 2000; ++i) {
      b.Check(static_cast<uint64_t>(i + 1), "cheap", prefix + std::to_string(i));
    }
    const wire::Reply& r = n.harness.Send(b);
    ASSERT_NE(r.ops(), nullptr);
    ASSERT_EQ(r.ops()->size(), 2000u);
    for (const wire::OpReply* op : *r.ops()) EXPECT_EQ(op->status(), wire::Status::KeysExhausted);
  };
  frame_of_new_keys("a");  // 2,000 keys: every one of the 64 stripes
  ASSERT_EQ(n.ReclaimPasses(), 64);
  n.clock.Advance(Store::kReclaimBackoffMs + Store::kReclaimBackoffMs / 4);
  frame_of_new_keys("b");
  const int64_t due = n.ReclaimPasses() - 64;
  EXPECT_GT(due, 0);
  EXPECT_LT(due, 64);
  n.clock.Advance(Store::kReclaimBackoffMs / 4 + 1);
  frame_of_new_keys("c");
  EXPECT_EQ(n.ReclaimPasses(), 128) << "every stripe is due after the longest jitter";
}

// Eight workers add new keys to one capped policy at once while time moves on: the reclaim
// passes at the bound (their waits and resets under each stripe's lock) let keys in as old
// ones expire, and the counts stay exact and within the cap.
TEST(StoreBudget, WorkersReclaimingAtTheBoundTogetherKeepTheCountsExact) {
  SmallNode n(R"(
policies:
  - {name: cheap, algorithm: gcra, limit: 100, window: 1s, class: billing, max_keys: 200}
)",
              1000, 8);
  std::vector<testing::NodeHarness::Caller> callers;
  for (int t = 0; t < 8; ++t) callers.push_back(n.harness.NewCaller());
  std::atomic<int64_t> admitted{0};
  std::atomic<int64_t> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1500; ++i) {
        const wire::Status status =
            callers[static_cast<size_t>(t)]
                .CheckReply("cheap", std::to_string(t) + "/" + std::to_string(i))
                .status();
        EXPECT_TRUE(status == wire::Status::Ok || status == wire::Status::KeysExhausted)
            << wire::EnumNameStatus(status);
        (status == wire::Status::Ok ? admitted : refused).fetch_add(1);
        n.clock.Advance(1);  // a key is fresh again 10 ms after its check
      }
    });
  }
  for (auto& t : threads) t.join();
  const Store::PolicyUsage usage = n.node.store().usage(0);
  const Store::Tally tally = n.node.store().Recount(0);
  EXPECT_EQ(usage.keys, tally.keys);
  EXPECT_EQ(usage.units, tally.units);
  EXPECT_LE(usage.keys, 200);
  EXPECT_EQ(usage.refusals, refused.load());
  EXPECT_GT(admitted.load(), 200) << "expired keys were reclaimed for new ones";
  EXPECT_GT(refused.load(), 0);
}

}  // namespace
}  // namespace limiter
