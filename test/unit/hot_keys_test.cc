// HotKeys alone, with no Node: ops recorded through per-worker samplers with plain entry
// structs, Tick driven by a manual clock, and the split's record read back from the store.
// A key past split_above splits; its views carry a token the cluster checks; reports keep it
// split; three cool ticks merge it, and once every view has lapsed (plus the margin) it
// reopens drained. Which policies may split, what each sub-bucket holds, and which split is in
// force.
#include "server/hot_keys.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/rules.h"
#include "server/authenticator.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

const char* kPolicies = R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 100, window: 1s, class: contract}
  - {name: tenant, algorithm: gcra, limit: 1000, window: 1s, class: contract}
  - {name: key, algorithm: gcra, limit: 100, window: 1s, class: contract, parent: tenant}
  - {name: quota, algorithm: fixed_window, limit: 1000, window: 1h, class: contract,
     durable: true}
  - {name: daily, algorithm: fixed_window, limit: 1000, window: 1d, align: calendar,
     class: contract}
  - {name: partner, algorithm: gcra, limit: 120, window: 1s, burst: 12, class: contract,
     scope: global}
  - {name: tiny, algorithm: gcra, limit: 2, window: 1s, class: contract}
  - {name: odd, algorithm: gcra, limit: 103, window: 1s, burst: 21, class: contract}
)";
constexpr int kApi = 0, kTenant = 1, kKey = 2, kQuota = 3, kDaily = 4, kPartner = 5, kTiny = 6,
              kOdd = 7;

constexpr const char* kSecret = "gateway-secret-0123456789abcdef0123";

// An op's limit as the node's entries carry it: the members Record reads.
struct Entry {
  int policy = 0;
  std::string key;
  KeyId id;
  uint16_t split_k = 0;
  uint16_t split_index = 0;
};

HotKeyOptions Options() {
  HotKeyOptions o;
  o.sample_every = 1;
  o.split_above = 50;
  o.split_k = 4;
  o.merge_below = 10;
  o.split_valid_ms = 2000;
  return o;
}

Authenticator::Options AuthOptions(bool secret) {
  Authenticator::Options o;
  o.node_name = "a:1";
  o.max_frame_bytes = 1 << 20;
  if (secret) o.secrets = auth::Secrets{{kSecret}};
  o.clock_skew_ms = 1000;
  return o;
}

class HotKeysTest : public ::testing::Test {
 protected:
  explicit HotKeysTest(bool secret = true, HotKeyOptions options = Options())
      : policies_(testing::Policies(kPolicies, "hot.yaml")),
        table_(policies_, /*durable_store=*/true, /*regions=*/true),
        store_(policies_, {100'000, 8, &clock_, 2 * options.split_valid_ms}),
        auth_(AuthOptions(secret)),
        hot_(table_, clock_, store_, auth_, options),
        worker_(&hot_.AddSampler()) {}

  KeyId Id(int policy, const std::string& key) const {
    return protocol::LimitId(table_.at(policy), key, "");
  }
  // n ops on one key, one entry each, through `sampler` (the fixture's worker by default).
  void Ops(int policy, const std::string& key, int n, bool denied = false,
           HotKeys::Sampler* sampler = nullptr) {
    const std::vector<Entry> entries = {{policy, key, Id(policy, key)}};
    for (int i = 0; i < n; ++i) hot_.Record(sampler ? *sampler : *worker_, entries, 1, denied);
  }
  void Second() {
    clock_.Advance(1000);
    hot_.Tick();
  }
  std::optional<HotKeys::View> ViewOf(const std::string& key, int policy = kApi) {
    const KeyId id = Id(policy, key);
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    return hot_.ViewOf(policy, id, key, clock_.NowMs());
  }
  std::optional<HotKeys::View> Inspect(const std::string& key, int policy = kApi) {
    const KeyId id = Id(policy, key);
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    return hot_.Inspect(policy, id, key, clock_.NowMs());
  }
  std::optional<HotKeys::View> Renew(const std::string& key, int64_t reported) {
    return hot_.Renew(kApi, Id(kApi, key), key, reported, clock_.NowMs());
  }
  // What the key's own bucket admits now; -1 when it has no slot.
  int64_t Available(const std::string& key, int policy = kApi) {
    const KeyId id = Id(policy, key);
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    const Slot* slot = store_.Find(policy, id);
    if (slot == nullptr) return -1;
    return store_.Unpack(policy, slot).Available(table_.at(policy).rate, clock_.NowMs());
  }
  const HotKeys::HotKey* TopOf(const std::string& key) {
    top_ = hot_.Top();
    for (const HotKeys::HotKey& k : top_) {
      if (k.key == key) return &k;
    }
    return nullptr;
  }

  ManualClock clock_{5'000'000};
  PolicySet policies_;
  PolicyTable table_;
  Store store_;
  Authenticator auth_;
  HotKeys hot_;
  HotKeys::Sampler* worker_;
  std::vector<HotKeys::HotKey> top_;
};

TEST_F(HotKeysTest, AKeyPastTheThresholdSplitsWithASignedViewAndOthersDoNot) {
  Ops(kApi, "hot", 150);
  Ops(kApi, "hot", 50, /*denied=*/true);
  Ops(kApi, "cold", 5);
  Second();
  EXPECT_EQ(store_.split_count(), 1);
  const std::optional<HotKeys::View> view = ViewOf("hot");
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->k, 4);
  EXPECT_EQ(view->valid_ms, 2000);
  EXPECT_EQ(view->retry_after_ms, 0);
  ASSERT_TRUE(view->token.has_value());
  const Authenticator::TokenCheck valid =
      auth_.CheckSplitToken(*view->token, "api", "hot", 4, view->epoch);
  EXPECT_TRUE(valid.status.ok()) << valid.status.error();
  const Authenticator::TokenCheck other_epoch =
      auth_.CheckSplitToken(*view->token, "api", "hot", 4, view->epoch + 1);
  EXPECT_FALSE(other_epoch.status.ok());
  EXPECT_FALSE(other_epoch.lapsed) << "forged";
  EXPECT_FALSE(ViewOf("cold").has_value());
  // The split key keeps its slot, so that it can reopen drained.
  EXPECT_NE(Available("hot"), -1);
  EXPECT_EQ(Available("cold"), -1);  // HotKeys makes no slot for a key it does not split

  const HotKeys::HotKey* hot = TopOf("hot");
  ASSERT_NE(hot, nullptr);
  EXPECT_EQ(&top_.front(), hot);
  EXPECT_EQ(hot->policy, "api");
  EXPECT_EQ(hot->rate, 200);
  EXPECT_EQ(hot->denied, 50);
  EXPECT_EQ(hot->split_k, 4);
  const HotKeys::HotKey* cold = TopOf("cold");
  ASSERT_NE(cold, nullptr);
  EXPECT_EQ(cold->rate, 5);
  EXPECT_EQ(cold->split_k, 0);
}

TEST_F(HotKeysTest, RatesArePerSecondOfTheClockSinceTheLastTick) {
  Ops(kApi, "fast", 200);  // over 2 s: 100/s, above 50
  Ops(kApi, "slow", 90);   // 45/s: below
  clock_.Advance(2000);
  hot_.Tick();
  ASSERT_NE(TopOf("fast"), nullptr);
  EXPECT_EQ(TopOf("fast")->rate, 100);
  ASSERT_NE(TopOf("slow"), nullptr);
  EXPECT_EQ(TopOf("slow")->rate, 45);
  EXPECT_TRUE(ViewOf("fast").has_value());
  EXPECT_FALSE(ViewOf("slow").has_value());
  EXPECT_EQ(store_.split_count(), 1);
}

TEST_F(HotKeysTest, TheWorkersSamplesAddUp) {
  HotKeys::Sampler& other = hot_.AddSampler();
  Ops(kApi, "shared", 30);
  Ops(kApi, "shared", 30, false, &other);  // 60 in all: above 50, though neither worker is
  Ops(kApi, "one-sided", 40);
  Ops(kApi, "one-sided", 5, false, &other);
  Second();
  EXPECT_TRUE(ViewOf("shared").has_value());
  EXPECT_FALSE(ViewOf("one-sided").has_value());
  ASSERT_NE(TopOf("shared"), nullptr);
  EXPECT_EQ(TopOf("shared")->rate, 60);
  EXPECT_EQ(TopOf("one-sided")->rate, 45);
  // A tick with nothing new: the epoch's counts were rolled, nothing is counted twice.
  Second();
  EXPECT_EQ(TopOf("one-sided"), nullptr);
}

TEST_F(HotKeysTest, SubBucketOpsShowAsTheirRoutingKeyAndNeverSplit) {
  std::vector<Entry> entries = {{kApi, "hot", Id(kApi, "hot"), 4, 1}};
  for (int i = 0; i < 200; ++i) hot_.Record(*worker_, entries, 1, false);
  Second();
  EXPECT_EQ(store_.split_count(), 0);
  ASSERT_FALSE(hot_.Top().empty());
  EXPECT_EQ(hot_.Top().front().key, protocol::SubBucketRoutingKey("hot", 1));
  EXPECT_EQ(hot_.Top().front().key, "hot#1");
  EXPECT_EQ(hot_.Top().front().split_k, 4);
  // Only an op's own limits are sampled (`own`), not its ancestors after them.
  entries = {{kKey, "k", Id(kKey, "k")}, {kTenant, "t", Id(kTenant, "t")}};
  for (int i = 0; i < 200; ++i) hot_.Record(*worker_, entries, 1, false);
  Second();
  EXPECT_NE(TopOf("k"), nullptr);
  EXPECT_EQ(TopOf("t"), nullptr);
}

TEST_F(HotKeysTest, PoliciesThatMustNotSplitNeverDo) {
  EXPECT_TRUE(hot_.Splittable(kApi));
  EXPECT_TRUE(hot_.Splittable(kOdd));
  EXPECT_FALSE(hot_.Splittable(kTenant));   // others nest under it
  EXPECT_FALSE(hot_.Splittable(kKey));      // nested
  EXPECT_FALSE(hot_.Splittable(kQuota));    // durable
  EXPECT_FALSE(hot_.Splittable(kDaily));    // on a calendar
  EXPECT_FALSE(hot_.Splittable(kPartner));  // global, on a node of a region
  EXPECT_FALSE(hot_.Splittable(kTiny));     // 2/s cannot give 4 sub-buckets one each
  for (int p : {kTenant, kKey, kQuota, kDaily, kPartner, kTiny}) {
    EXPECT_FALSE(hot_.SubBucketRate(p, 4, 0).has_value()) << table_.at(p).name;
    Ops(p, "busy", 500);
  }
  Second();
  EXPECT_EQ(store_.split_count(), 0);
  EXPECT_EQ(store_.keys(), 0);
  ASSERT_FALSE(hot_.Top().empty());
  EXPECT_EQ(hot_.Top().front().rate, 500);  // they are hot all the same
}

TEST_F(HotKeysTest, TheSubBucketsSharesSumToTheLimitAndTheBurst) {
  const Rate& rate = table_.at(kOdd).rate;  // 103/s, burst 21
  for (uint16_t k : {2, 4, 8}) {
    int64_t limit = 0, burst = 0, low = INT64_MAX, high = 0;
    for (uint16_t i = 0; i < k; ++i) {
      const std::optional<Rate> sub = hot_.SubBucketRate(kOdd, k, i);
      ASSERT_TRUE(sub.has_value()) << k << " " << i;
      EXPECT_EQ(sub->window_ms(), rate.window_ms());
      limit += sub->limit();
      burst += sub->burst();
      low = std::min(low, sub->limit());
      high = std::max(high, sub->limit());
    }
    EXPECT_EQ(limit, rate.limit()) << k;
    EXPECT_EQ(burst, rate.burst()) << k;
    EXPECT_LE(high - low, 1) << "spread evenly over " << k;
  }
  // A burst of 21 cannot give 32 sub-buckets one each: the last ones get none.
  EXPECT_FALSE(hot_.SubBucketRate(kOdd, 32, 31).has_value());
}

TEST_F(HotKeysTest, ReportedOpsKeepASplitAndItsViewsAreRenewed) {
  Ops(kApi, "hot", 200);
  Second();
  const uint32_t epoch = ViewOf("hot")->epoch;
  for (int s = 0; s < 6; ++s) {
    // Clients report every other second; the rate is the higher of the last two ticks.
    const std::optional<HotKeys::View> renewed = Renew("hot", s % 2 == 0 ? 400 : 0);
    ASSERT_TRUE(renewed.has_value());
    EXPECT_EQ(renewed->valid_ms, 2000);
    EXPECT_EQ(renewed->epoch, epoch);
    Second();
    ASSERT_NE(TopOf("hot"), nullptr);
    EXPECT_EQ(TopOf("hot")->rate, 400) << s;
    EXPECT_EQ(TopOf("hot")->split_k, 4);
  }
  EXPECT_EQ(store_.split_count(), 1);
  EXPECT_EQ(ViewOf("hot")->valid_ms, 2000);
  EXPECT_FALSE(Renew("never-split", 10).has_value());
}

TEST_F(HotKeysTest, ThreeCoolTicksMergeAndTheKeyReopensDrainedOnceEveryViewLapsed) {
  Ops(kApi, "hot", 200);
  Second();  // split: the splitting rate counts for this tick
  ASSERT_EQ(ViewOf("hot")->valid_ms, 2000);
  Second();                                    // cool 1
  Second();                                    // cool 2
  EXPECT_EQ(Renew("hot", 0)->valid_ms, 2000);  // still renewed: the view runs 2 s from now
  const int64_t valid_until = clock_.NowMs() + 2000;
  Second();                            // cool 3: merging
  EXPECT_EQ(store_.split_count(), 1);  // a view is still valid
  // What is left of the last view, no more: merging views are not extended.
  EXPECT_EQ(ViewOf("hot")->valid_ms, 1000);
  EXPECT_EQ(Renew("hot", 1'000'000)->valid_ms, 1000);  // reports no longer bring it back
  Second();
  EXPECT_EQ(ViewOf("hot")->valid_ms, 0);
  // Past the last view: clients wait until it reopens, after the margin and the clock skew
  // a token is honoured for (500 + 1000 ms).
  clock_.Set(valid_until + 200);
  const std::optional<HotKeys::View> closed = ViewOf("hot");
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->valid_ms, 0);
  EXPECT_EQ(closed->retry_after_ms, 1300);
  clock_.Set(valid_until + 1499);
  hot_.Tick();
  EXPECT_EQ(store_.split_count(), 1);
  EXPECT_EQ(ViewOf("hot")->retry_after_ms, 1);
  clock_.Set(valid_until + 1500);
  hot_.Tick();
  EXPECT_EQ(store_.split_count(), 0);
  EXPECT_FALSE(ViewOf("hot").has_value());
  // Reopened drained: nothing at once, then the key's own rate (100/s).
  EXPECT_EQ(Available("hot"), 0);
  clock_.Advance(100);
  EXPECT_EQ(Available("hot"), 10);
}

TEST_F(HotKeysTest, AMergingKeyAskedForAfterItsLastViewReopensThenAndThere) {
  Ops(kApi, "hot", 200);
  Second();
  const int64_t valid_until = clock_.NowMs() + 2000;
  ASSERT_TRUE(ViewOf("hot").has_value());
  Second();
  Second();
  Second();                        // merging, with no renewal since the first view
  clock_.Set(valid_until + 1500);  // no Tick: the next op finds it lapsed
  EXPECT_FALSE(ViewOf("hot").has_value());
  EXPECT_EQ(store_.split_count(), 0);
  EXPECT_EQ(Available("hot"), 0);
}

TEST_F(HotKeysTest, InspectShowsTheSplitAndHandsOutNoView) {
  Ops(kApi, "hot", 200);
  Second();
  std::optional<HotKeys::View> seen = Inspect("hot");
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->valid_ms, 0);  // nobody was handed a view yet
  ASSERT_TRUE(ViewOf("hot").has_value());
  clock_.Advance(500);
  seen = Inspect("hot");
  EXPECT_EQ(seen->valid_ms, 1500);
  clock_.Advance(500);
  EXPECT_EQ(Inspect("hot")->valid_ms, 1000);  // Inspect did not extend it
  EXPECT_FALSE(Inspect("cold").has_value());
}

TEST_F(HotKeysTest, OnlyTheSplitInForceIsAcceptedAndOtherwiseTheSplitNowIsGiven) {
  Ops(kApi, "hot", 200);
  Second();
  const uint32_t epoch = ViewOf("hot")->epoch;
  const int64_t now = clock_.NowMs();
  std::optional<HotKeys::View> now_view;
  EXPECT_TRUE(hot_.SplitInForce(kApi, "hot", 4, epoch, now, now_view));
  for (const auto& [k, e] :
       {std::pair<uint16_t, uint32_t>{4, epoch + 1}, {4, epoch - 1}, {8, epoch}, {2, epoch}}) {
    now_view.reset();
    EXPECT_FALSE(hot_.SplitInForce(kApi, "hot", k, e, now, now_view)) << k << " " << e;
    ASSERT_TRUE(now_view.has_value());
    EXPECT_EQ(now_view->k, 4);
    EXPECT_EQ(now_view->epoch, epoch);
    EXPECT_EQ(now_view->valid_ms, 2000);
  }
  now_view = HotKeys::View{};
  EXPECT_FALSE(hot_.SplitInForce(kApi, "cold", 4, epoch, now, now_view));
  EXPECT_FALSE(now_view.has_value());  // not split: none
}

TEST_F(HotKeysTest, EachSplitHasANewEpoch) {
  Ops(kApi, "one", 200);
  Ops(kApi, "two", 200);
  Second();
  const uint32_t one = ViewOf("one")->epoch, two = ViewOf("two")->epoch;
  EXPECT_NE(one, two);
  // Merge "one", reopen it, and split it again: its sub-buckets are new ones.
  for (int s = 0; s < 4; ++s) Second();
  clock_.Advance(3'500);
  hot_.Tick();
  ASSERT_FALSE(ViewOf("one").has_value());
  Ops(kApi, "one", 200);
  Second();
  const std::optional<HotKeys::View> again = ViewOf("one");
  ASSERT_TRUE(again.has_value());
  EXPECT_GT(again->epoch, std::max(one, two));
}

TEST_F(HotKeysTest, RecordingOnWorkersWhileTicking) {
  HotKeys::Sampler& second = hot_.AddSampler();
  std::atomic<bool> done{false};
  std::atomic<int64_t> recorded{0};
  auto work = [&](HotKeys::Sampler* s, const std::string& prefix) {
    for (int i = 0; !done.load(); ++i) {
      Ops(kApi, prefix + std::to_string(i % 50), 1, /*denied=*/i % 3 == 0, s);
      recorded.fetch_add(1);
    }
  };
  std::thread a(work, worker_, "a");
  std::thread b(work, &second, "b");
  for (int s = 0; s < 20; ++s) {
    // Each tick with ops recorded since the last one, on both workers or either.
    const int64_t target = recorded.load() + 500;
    while (recorded.load() < target) std::this_thread::yield();
    Second();
    (void)hot_.Top();
  }
  done.store(true);
  a.join();
  b.join();
  Second();
  for (const HotKeys::HotKey& k : hot_.Top()) {
    EXPECT_EQ(k.policy, "api");
    EXPECT_TRUE(k.key[0] == 'a' || k.key[0] == 'b') << k.key;
    EXPECT_LE(k.denied, k.rate);
  }
  // Whatever split meanwhile is a consistent record of the store.
  store_.VisitSplits([&](const KeyId& id, Store::Split& split) {
    EXPECT_EQ(id, Id(kApi, split.key));
    EXPECT_EQ(split.k, 4);
    return false;
  });
}

class HotKeysNoSecretTest : public HotKeysTest {
 protected:
  HotKeysNoSecretTest() : HotKeysTest(/*secret=*/false) {}
};

TEST_F(HotKeysNoSecretTest, ViewsCarryNoTokenAndReopenAfterTheBareMargin) {
  Ops(kApi, "hot", 200);
  Second();
  const std::optional<HotKeys::View> view = ViewOf("hot");
  ASSERT_TRUE(view.has_value());
  EXPECT_FALSE(view->token.has_value());
  Second();
  Second();
  ASSERT_TRUE(Renew("hot", 0).has_value());
  const int64_t valid_until = clock_.NowMs() + 2000;
  Second();  // merging
  clock_.Set(valid_until + 499);
  hot_.Tick();
  EXPECT_EQ(store_.split_count(), 1);
  clock_.Set(valid_until + 500);  // no clock skew to allow for without tokens
  hot_.Tick();
  EXPECT_EQ(store_.split_count(), 0);
}

class HotKeysSampledTest : public HotKeysTest {
 protected:
  static HotKeyOptions EveryFourth() {
    HotKeyOptions o = Options();
    o.sample_every = 4;
    return o;
  }
  HotKeysSampledTest() : HotKeysTest(true, EveryFourth()) {}
};

TEST_F(HotKeysSampledTest, OneOpInSampleEveryCountsForAllOfThem) {
  Ops(kApi, "hot", 200);  // 50 samples, weighing 4 each
  Ops(kApi, "rare", 3);   // the 201st to 203rd ops: none sampled
  Second();
  ASSERT_NE(TopOf("hot"), nullptr);
  EXPECT_EQ(TopOf("hot")->rate, 200);
  EXPECT_EQ(TopOf("rare"), nullptr);
  EXPECT_TRUE(ViewOf("hot").has_value());
}

}  // namespace
}  // namespace limiter
