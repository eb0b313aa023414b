// Many callers on one leased key, over simulated time and network with a real node whose
// clock stands still (so "what the bucket holds" is exactly its burst): a caller is denied
// only when the store says the key is out, whatever the concurrency, lease size or window.
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "client/client_core.h"
#include "limiter/client/http.h"
#include "sim/network.h"
#include "sim/scheduler.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

using client::Decision;
using client::Request;
using client::Source;
using sim::SimNetwork;
using sim::SimScheduler;

std::string PolicyFile(int64_t lease_size, const std::string& window) {
  return "policies:\n"
         "  - {name: k, algorithm: token_bucket, limit: 100, window: " +
         window + ", class: contract, lease: {size: " + std::to_string(lease_size) +
         "}}\n"
         "  - {name: big, algorithm: token_bucket, limit: 100, window: 1s, class: contract}\n";
}

// One node (its clock frozen unless told otherwise) and one gateway.
class OneKey {
 public:
  explicit OneKey(const std::string& policies)
      : policies_(testing::Policies(policies, "sim.yaml")) {
    node_ = std::make_unique<Node>(policies_, node_clock_, NodeOptions{});
    network_.AddNode("n0:1", *node_).latency_us = 100;
    ClientCoreOptions o;
    o.deadline_us = 50'000;  // no deadline misses: this is about the store's answers
    client_ = std::make_unique<ClientCore>(policies_, std::vector<std::string>{"n0:1"}, sched_,
                                           network_.Gateway(), o);
  }

  struct Outcome {
    int allowed = 0;
    int from_fallback = 0;
    int denied_never = 0;
  };
  // `n` decisions by `callers` closed-loop callers: each asks again as soon as it is answered.
  Outcome Run(const Request& r, int n, int callers) {
    Outcome out;
    int issued = 0, answered = 0;
    std::function<void()> ask = [&] {
      if (issued == n) return;
      ++issued;
      client_->DecideAsync(r, [&](Decision d) {
        ++answered;
        out.allowed += d.allowed;
        out.from_fallback += d.source == Source::kFallback;
        sched_.Post(ask);  // this caller's next request
      });
    };
    for (int c = 0; c < callers; ++c) ask();
    for (int i = 0; i < 1'000'000 && answered < n; ++i) sched_.RunFor(50);
    EXPECT_EQ(answered, n);
    return out;
  }

  SimScheduler& sched() { return sched_; }
  SimNetwork& network() { return network_; }
  ClientCore& client() { return *client_; }
  ManualClock& node_clock() { return node_clock_; }

 private:
  const PolicySet policies_;
  SimScheduler sched_;
  ManualClock node_clock_{1'000'000};
  SimNetwork network_{sched_};
  std::unique_ptr<Node> node_;
  std::unique_ptr<ClientCore> client_;
};

struct Case {
  int callers;
  int64_t lease_size;
  const char* window;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.callers << " callers, lease " << c.lease_size << ", window " << c.window;
}

class ManyCallers : public ::testing::TestWithParam<Case> {};
class ManyCallersStoreCalls : public ::testing::TestWithParam<Case> {};

TEST_P(ManyCallers, AllowExactlyWhatTheBucketHolds) {
  const Case c = GetParam();
  for (int n : {50, 100, 150}) {
    OneKey sim(PolicyFile(c.lease_size, c.window));
    const OneKey::Outcome o = sim.Run({"k", "x"}, n, c.callers);
    EXPECT_EQ(o.allowed, std::min(n, 100)) << "n = " << n;
    EXPECT_EQ(o.from_fallback, 0) << "n = " << n;
  }
}

TEST_P(ManyCallersStoreCalls, NeedNoMoreStoreCallsThanOneCallerPlusOne) {
  const Case c = GetParam();
  for (int n : {50, 150}) {
    OneKey one(PolicyFile(c.lease_size, c.window));
    one.Run({"k", "x"}, n, 1);
    OneKey many(PolicyFile(c.lease_size, c.window));
    many.Run({"k", "x"}, n, c.callers);
    EXPECT_LE(many.network().sent(OpKind::kLease), one.network().sent(OpKind::kLease) + 1)
        << "n = " << n;
  }
}

TEST(LeaseWaiters, ARequestThatWouldWaitPastItsDeadlineFallsBack) {
  // The owner answers in 1.8 ms (the deadline is 2 ms). A request that comes 1.5 ms after
  // the lease was sent is not served by it (lease size 1) and would wait for the next one
  // until 3.6 ms: it falls back at its own deadline, 3.5 ms, instead.
  const PolicySet p = testing::Policies(PolicyFile(1, "1h"), "sim.yaml");
  SimScheduler sched;
  ManualClock clock(1'000'000);
  SimNetwork network(sched);
  Node node(p, clock, NodeOptions{});
  network.AddNode("n0:1", node).latency_us = 900;
  ClientCore client(p, {"n0:1"}, sched, network.Gateway(), ClientCoreOptions{});
  const int64_t start = sched.NowUs();
  std::optional<Decision> first, second;
  int64_t second_at = 0;
  client.DecideAsync({"k", "x"}, [&](Decision d) { first = std::move(d); });
  sched.RunFor(1500);
  client.DecideAsync({"k", "x"}, [&](Decision d) {
    second = std::move(d);
    second_at = sched.NowUs() - start;
  });
  sched.RunFor(10'000);
  ASSERT_TRUE(first && second);
  EXPECT_TRUE(first->allowed);
  EXPECT_EQ(first->source, Source::kStore);
  EXPECT_EQ(second->source, Source::kFallback);
  EXPECT_EQ(second_at, 3500);
  EXPECT_EQ(client.counters().deadline_misses, 0u);  // the node was never late
  EXPECT_EQ(client.HeldUnits(), 1);  // the second lease's unit stays for the next request
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {  // 8callers_lease10_1h
  return std::to_string(info.param.callers) + "callers_lease" +
         std::to_string(info.param.lease_size) + "_" + info.param.window;
}

std::vector<Case> Cases(std::initializer_list<int> callers) {
  std::vector<Case> cases;
  for (const char* window : {"1s", "1h"}) {
    for (int64_t lease : {1, 10, 20}) {
      for (int c : callers) cases.push_back({c, lease, window});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(LeaseSizesAndWindows, ManyCallers, ::testing::ValuesIn(Cases({1, 8, 32})),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(LeaseSizesAndWindows, ManyCallersStoreCalls,
                         ::testing::ValuesIn(Cases({8, 32})), CaseName);

TEST(LeaseNever, ACostAboveTheBurstIsNeverAndDoesNotLockTheKeyOut) {
  OneKey sim(PolicyFile(10, "1s"));
  std::optional<Decision> never;
  sim.client().DecideAsync({"big", "x", "", "", 500}, [&](Decision d) { never = std::move(d); });
  sim.sched().RunFor(10'000);
  ASSERT_TRUE(never.has_value());
  EXPECT_FALSE(never->allowed);
  EXPECT_EQ(never->retry_after, client::kRetryNever);
  // The bucket is as full as before (nothing was leased for it), and a second later the key
  // is served as usual.
  sim.sched().RunFor(1'500'000);
  sim.node_clock().Advance(1500);
  EXPECT_EQ(sim.Run({"big", "x"}, 100, 1).allowed, 100);
}

TEST(LeaseNever, RendersAsTheWindowInRetryAfter) {
  Decision d;
  d.allowed = false;
  d.policy = "big";
  d.limit = 100;
  d.window_ms = 60'000;
  d.retry_after = client::kRetryNever;
  const client::HttpRateLimit h = client::RenderHttp(d);
  EXPECT_EQ(h.status, 429);
  ASSERT_EQ(h.headers.size(), 3u);
  EXPECT_EQ(h.headers[2], std::make_pair(std::string("Retry-After"), std::string("60")));
  EXPECT_NE(h.body.find("never"), std::string::npos) << h.body;
}

}  // namespace
}  // namespace limiter
