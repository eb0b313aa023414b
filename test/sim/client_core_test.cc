// ClientCore over simulated time and network, with real Nodes: leases, strict checks,
// deadlines, nodes going down and coming back, each class's fallback, wrong owners.
#include "client/client_core.h"

#include <gtest/gtest.h>

#include <optional>

#include "limiter/client/http.h"
#include "sim/network.h"
#include "sim/scheduler.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

using client::Decision;
using client::Request;
using client::Source;
using sim::SimClock;
using sim::SimNetwork;
using sim::SimScheduler;

const char* kPolicies = R"(
policies:
  - {name: tenant, algorithm: gcra, limit: 1000, window: 1h, class: contract}
  - {name: hourly, algorithm: token_bucket, limit: 100, window: 1h, class: contract,
     lease: {size: 10}}
  - {name: api_key, algorithm: token_bucket, limit: 100, window: 1s, class: contract,
     parent: tenant, lease: {size: 10}}
  - {name: plain, algorithm: token_bucket, limit: 100, window: 1s, class: contract,
     lease: {size: 10, ttl: 500ms}}
  - {name: shared, algorithm: token_bucket, limit: 100, window: 1s, class: contract,
     fallback: {overshoot: true}}
  - {name: login, algorithm: fixed_window, limit: 5, window: 1m, class: security,
     fallback: {limit: 2, window: 1m}}
  - {name: otp, algorithm: fixed_window, limit: 5, window: 1m, class: security}
  - {name: usage, algorithm: token_bucket, limit: 1000, window: 1h, class: billing}
  - {name: search, algorithm: token_bucket, limit: 100, window: 1s, class: capacity,
     fallback: {max_concurrency: 2, max_queue: 1, queue_timeout: 50ms}}
  - {name: report, algorithm: token_bucket, limit: 100, window: 1s, class: contract,
     costs: {export: 10}}
)";

class Harness {
 public:
  explicit Harness(int nodes = 1, ClientCoreOptions options = {},
                   std::optional<std::vector<std::string>> client_members = std::nullopt,
                   uint64_t node_generation = 0) {
    std::vector<std::string> members;
    for (int i = 0; i < nodes; ++i) members.push_back("n" + std::to_string(i) + ":1");
    for (const std::string& m : members) {
      NodeOptions o;
      if (nodes > 1) {
        o.members = members;
        o.self = m;
        o.generation = node_generation;
      }
      nodes_.push_back(std::make_unique<Node>(policies_, clock_, o));
      network_.AddNode(m, *nodes_.back()).latency_us = 100;
    }
    client_ = std::make_unique<ClientCore>(policies_, client_members.value_or(members), sched_,
                                           network_.Gateway(), options);
  }

  Decision Decide(Request r) {
    std::optional<Decision> out;
    client_->DecideAsync(r, [&](Decision d) { out = std::move(d); });
    for (int i = 0; i < 100'000 && !out; ++i) sched_.RunFor(100);
    EXPECT_TRUE(out.has_value()) << "no decision within 10 s of simulated time";
    return out ? std::move(*out) : Decision{};
  }
  // Decides `n` times, `gap_us` apart; returns how many were allowed.
  int Admitted(Request r, int n, int64_t gap_us = 0) {
    int allowed = 0;
    for (int i = 0; i < n; ++i) {
      allowed += Decide(r).allowed;
      if (gap_us) sched_.RunFor(gap_us);
    }
    return allowed;
  }

  SimScheduler& sched() { return sched_; }
  SimNetwork& network() { return network_; }
  ClientCore& client() { return *client_; }
  Node& node(int i = 0) { return *nodes_[static_cast<size_t>(i)]; }
  SimNetwork::Endpoint& sim_node(int i = 0) {
    return network_.endpoint("n" + std::to_string(i) + ":1");
  }

 private:
  const PolicySet policies_ = testing::Policies(kPolicies, "sim.yaml");
  SimScheduler sched_;
  SimClock clock_{sched_};
  SimNetwork network_{sched_};
  std::vector<std::unique_ptr<Node>> nodes_;
  std::unique_ptr<ClientCore> client_;
};

TEST(ClientCore, AWarmKeyIsAnsweredFromItsLease) {
  Harness h;
  const Request r{"plain", "k1"};
  const Decision first = h.Decide(r);
  EXPECT_TRUE(first.allowed);
  EXPECT_EQ(first.source, Source::kStore);  // the first waited for a lease
  int from_lease = 0;
  for (int i = 0; i < 50; ++i) {
    const Decision d = h.Decide(r);
    EXPECT_TRUE(d.allowed);
    from_lease += d.source == Source::kLease;
    h.sched().RunFor(1000);
  }
  EXPECT_GE(from_lease, 45);
  EXPECT_LE(h.network().sent(), 51u / 5);  // leases of 10, topped up in the background
  Decision local;
  EXPECT_TRUE(h.client().TryLocal(r, &local));
  EXPECT_EQ(local.source, Source::kLease);
  EXPECT_EQ(h.client().counters().leases, h.network().sent(OpKind::kLease));
}

TEST(ClientCore, AllLeasedUnitsWereChargedAtTheStore) {
  // 100 per second: over the ~3 s the requests take, at most 100 (burst) + 100 per second,
  // whatever the lease size: every unit spent was charged at the store within that time.
  Harness h;
  const int64_t start_us = h.sched().NowUs();
  const int admitted = h.Admitted({"plain", "k"}, 3000, 1000);
  const int64_t elapsed_ms = (h.sched().NowUs() - start_us) / 1000;
  EXPECT_LE(admitted, 100 + 100 * elapsed_ms / 1000);
  EXPECT_GE(admitted, 350);
}

TEST(ClientCore, NestedKeysLeaseFromTheirTenantToo) {
  Harness h;
  int admitted = 0;
  for (int k = 0; k < 200; ++k) {
    admitted += h.Admitted({"api_key", std::to_string(k) + "key", "acme"}, 10);
  }
  // 200 keys of 100 cannot take more than their tenant's 1000 (units leased to keys that
  // never spend them are lost to the others until they lapse: the cost of leasing).
  EXPECT_LE(admitted, 1000);
  EXPECT_GE(admitted, 400);
  const Decision d = h.Decide({"api_key", "one-more", "acme"});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.policy, "tenant");
  EXPECT_GT(d.retry_after.count(), 0);
}

TEST(ClientCore, StrictPoliciesCheckEveryRequest) {
  Harness h;
  EXPECT_EQ(h.Admitted({"login", "alice"}, 8), 5);
  EXPECT_EQ(h.network().sent(OpKind::kCheck), 8u);
  const Decision d = h.Decide({"login", "alice"});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.source, Source::kStore);
  EXPECT_EQ(d.policy, "login");
  EXPECT_EQ(d.limit, 5);
  EXPECT_GT(d.retry_after.count(), 0);
  // Operations with their own cost are checked at the store, not leased.
  EXPECT_EQ(h.Admitted({"report", "r", "", "export"}, 12), 10);
}

TEST(ClientCore, BadRequestsAreDeniedWithAReasonAndNoStoreCall) {
  Harness h;
  Decision d = h.Decide({"nope", "k"});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.error, "no policy named 'nope'");
  d = h.Decide({"api_key", "k"});
  EXPECT_EQ(d.error, "policy 'api_key' nests under 'tenant'; the request needs a tenant");
  d = h.Decide({"plain", ""});
  EXPECT_EQ(d.error, "the key is empty");
  d = h.Decide({"plain", std::string(257, 'k')});
  EXPECT_EQ(d.error, "the key is 257 bytes; at most 256 are allowed");
  d = h.Decide({"api_key", "k", std::string(300, 't')});
  EXPECT_EQ(d.error, "the tenant is 300 bytes; at most 256 are allowed");
  d = h.Decide({"plain", "k", "", "", 0});
  EXPECT_EQ(d.error, "cost must be between 1 and 1000000000, got 0");
  EXPECT_EQ(h.network().sent(), 0u);
}

TEST(ClientCore, ASilentNodeMissesDeadlinesThenIsMarkedDownAndProbedBack) {
  Harness h;
  h.sim_node().silent = true;
  const int64_t start = h.sched().NowUs();
  Decision d = h.Decide({"login", "bob"});
  EXPECT_EQ(d.source, Source::kFallback);
  EXPECT_TRUE(d.allowed);                      // login's local limit: 2 per minute
  EXPECT_GE(h.sched().NowUs() - start, 2000);  // it waited for the deadline
  EXPECT_LE(h.sched().NowUs() - start, 2200);
  h.Decide({"login", "carol"});
  h.Decide({"login", "dave"});
  EXPECT_EQ(h.client().counters().deadline_misses, 3u);
  EXPECT_EQ(h.client().counters().nodes_down, 1u);
  const uint64_t sent = h.network().sent();
  const int64_t before = h.sched().NowUs();
  d = h.Decide({"login", "erin"});
  EXPECT_EQ(d.source, Source::kFallback);
  EXPECT_EQ(h.sched().NowUs(), before);  // down: no waiting at all
  EXPECT_EQ(h.network().sent(), sent);
  // The node answers again: within 2 s a probe finds it and the store decides again.
  h.sim_node().silent = false;
  h.sched().RunFor(2'000'000);
  EXPECT_EQ(h.client().counters().nodes_down, 0u);
  d = h.Decide({"login", "frank"});
  EXPECT_EQ(d.source, Source::kStore);
}

TEST(ClientCore, ASlowNodeIsMarkedDownButKeepsItsConnection) {
  Harness h;
  // Slower than the deadline (2 ms) for a while, but answering: three misses mark it down.
  h.sim_node().latency_us = 1500;  // each way
  for (const char* who : {"a", "b", "c"}) h.Decide({"login", who});
  EXPECT_EQ(h.client().counters().nodes_down, 1u);
  // Its probe is answered (late, but within its own longer wait): it is back, over the same
  // connection.
  h.sched().RunFor(200'000);
  EXPECT_EQ(h.client().counters().nodes_down, 0u);
  EXPECT_EQ(h.network().disconnects("n0:1"), 0u);
}

TEST(ClientCore, AProbeWithoutAnswerReplacesTheConnection) {
  Harness h;
  h.sim_node().silent = true;
  for (const char* who : {"a", "b", "c"}) h.Decide({"login", who});
  EXPECT_EQ(h.client().counters().nodes_down, 1u);
  EXPECT_EQ(h.network().disconnects("n0:1"), 0u);  // marked down: the connection stays
  h.sched().RunFor(200'000);  // the first probe (after 100 ms +-50%) waits 20 ms for nothing
  EXPECT_EQ(h.network().disconnects("n0:1"), 1u);
}

TEST(ClientCore, SecurityFallbackIsTheStrictLocalLimitOrDeny) {
  Harness h;
  h.sim_node().refuses = true;
  EXPECT_EQ(h.Admitted({"login", "mallory"}, 10), 2);  // fallback: 2 per minute
  const Decision d = h.Decide({"otp", "mallory"});     // no local limit: deny
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.source, Source::kFallback);
  EXPECT_EQ(h.Admitted({"otp", "someone-else"}, 5), 0);
  EXPECT_GE(h.client().counters().fallback_by_class[0], 16u);
}

TEST(ClientCore, ContractFallbackIsTheLimitOverTheGateways) {
  ClientCoreOptions o;
  o.gateways = 4;
  Harness h(1, o);
  h.sim_node().refuses = true;
  // L/N = 25 per second, burst 100/4 = 25: in one second, 25 + 25.
  const int admitted = h.Admitted({"plain", "c"}, 1000, 1000);
  EXPECT_GE(admitted, 45);
  EXPECT_LE(admitted, 50);
  // With overshoot allowed, the full limit applies on each gateway.
  EXPECT_GE(h.Admitted({"shared", "c"}, 1000, 1000), 190);
}

TEST(ClientCore, BillingFailsOpenAndReconcilesWhenTheOwnerIsBack) {
  Harness h;
  h.sim_node().refuses = true;
  EXPECT_EQ(h.Admitted({"usage", "acct"}, 600), 600);  // open: nothing denied
  EXPECT_EQ(h.client().counters().by_source[static_cast<size_t>(Source::kFallback)], 600u);
  h.sim_node().refuses = false;
  h.sched().RunFor(3'000'000);  // probed back, then the debt is leased
  // The owner was charged the 600: of its 1000 (plus 3 s of refill at 1000/h), about 400 left.
  const int admitted = h.Admitted({"usage", "acct"}, 1000);
  EXPECT_GE(admitted, 395);
  EXPECT_LE(admitted, 410);
}

TEST(ClientCore, CapacityFallbackShedsBeyondItsConcurrency) {
  Harness h;
  h.sim_node().refuses = true;
  Decision a = h.Decide({"search", "q"});
  Decision b = h.Decide({"search", "q"});
  ASSERT_TRUE(a.allowed && b.allowed);
  EXPECT_TRUE(a.permit && b.permit);
  // The third waits in the queue; the fourth finds it full.
  std::optional<Decision> queued;
  h.client().DecideAsync({"search", "q"}, [&](Decision d) { queued = std::move(d); });
  const Decision full = h.Decide({"search", "q"});
  EXPECT_FALSE(full.allowed);
  EXPECT_FALSE(queued.has_value());
  a.permit.Reset();  // a request finished: its slot goes to the queued one
  h.sched().RunFor(100);
  ASSERT_TRUE(queued.has_value());
  EXPECT_TRUE(queued->allowed);
  // A queued request that gets no slot within queue_timeout is denied.
  std::optional<Decision> late;
  h.client().DecideAsync({"search", "q"}, [&](Decision d) { late = std::move(d); });
  h.sched().RunFor(60'000);
  ASSERT_TRUE(late.has_value());
  EXPECT_FALSE(late->allowed);
  EXPECT_EQ(late->source, Source::kFallback);
}

TEST(ClientCore, LeasedUnitsAreSpentEvenWhileTheOwnerIsDown) {
  Harness h;
  EXPECT_TRUE(h.Decide({"plain", "w"}).allowed);  // leases 10
  h.sim_node().refuses = true;
  int from_lease = 0;
  for (int i = 0; i < 9; ++i) from_lease += h.Decide({"plain", "w"}).source == Source::kLease;
  EXPECT_GE(from_lease, 8);
}

TEST(ClientCore, UnspentUnitsLapseAfterTheLeaseTtl) {
  Harness h;
  EXPECT_TRUE(h.Decide({"plain", "ttl"}).allowed);
  EXPECT_GT(h.client().HeldUnits(), 0);
  h.sched().RunFor(600'000);  // ttl: 500ms
  EXPECT_EQ(h.client().HeldUnits(), 0);
  h.Decide({"plain", "ttl"});
  EXPECT_GT(h.client().counters().units_expired, 0u);
}

TEST(ClientCore, IdleLocalBucketsAreDroppedAsNewKeysCome) {
  Harness h;
  // 60,000 keys, each seen once, a millisecond apart: every one leases, and its units lapse
  // (ttl 500 ms) long before the last key comes.
  for (int i = 0; i < 60'000; ++i) {
    h.Decide({"plain", "once-" + std::to_string(i)});
    h.sched().RunFor(1000);
  }
  const client::Counters c = h.client().counters();
  EXPECT_EQ(c.decisions, 60'000u);
  // Each of the 256 shards sweeps its idle buckets when it reaches 64 (or twice what it kept
  // last time); about 500 keys hold units at any time: at most 256 * 64 + 2 * 500 remain.
  EXPECT_LE(c.local_buckets, 256u * 64 + 1000) << "local buckets grow with every key seen";
  EXPECT_GT(c.local_buckets, 0u);
  // A key that is still warm keeps its bucket, and its lease, through the sweeps.
  EXPECT_TRUE(h.Decide({"plain", "warm"}).allowed);
  for (int i = 0; i < 5'000; ++i) {
    h.Decide({"plain", "more-" + std::to_string(i)});
    if (i % 100 == 0) {
      EXPECT_EQ(h.Decide({"plain", "warm"}).source, Source::kLease) << i;
    }
    h.sched().RunFor(50);
  }
}

TEST(ClientCore, FreshFallbackLimitersAreDroppedAsNewKeysCome) {
  Harness h;
  h.sim_node().refuses = true;
  // While the owner is away, 5,000 keys each get one request, a second apart in groups:
  // their local limiters refill and are dropped as new ones come.
  for (int i = 0; i < 5'000; ++i) {
    h.Decide({"plain", "fb-" + std::to_string(i)});
    if (i % 100 == 99) h.sched().RunFor(2'000'000);
  }
  EXPECT_GE(h.client().counters().fallback_by_class[1], 4'000u);
  EXPECT_LT(h.client().counters().fallback_limiters, 1'000u);
}

TEST(ClientCore, ReturnedUnitsGoBackToTheOwner) {
  Harness h;
  h.Admitted({"hourly", "r"}, 3);
  const int64_t held = h.client().HeldUnits();
  ASSERT_GT(held, 0);
  bool returned = false;
  h.client().ReturnLeases([&] { returned = true; });
  h.sched().RunFor(10'000);
  EXPECT_TRUE(returned);
  EXPECT_EQ(h.client().HeldUnits(), 0);
  EXPECT_EQ(h.client().counters().units_returned, static_cast<uint64_t>(held));
  // The owner has all but the three spent: 97 more in this instant.
  EXPECT_EQ(h.Admitted({"hourly", "r"}, 200), 97);
}

TEST(ClientCore, ALeaseAnsweredAfterItsDeadlineKeepsItsUnits) {
  // The owner is slower than the deadline (3 ms round trip against 2 ms) for one request:
  // it falls back by class, but the owner charged the lease's 10 units. They are kept for
  // the requests that come next, so the key still admits all 100 of its units through the
  // store (the fallback's answer was never charged there).
  Harness h;
  h.sim_node().latency_us = 1500;
  const Decision first = h.Decide({"hourly", "late"});
  EXPECT_EQ(first.source, Source::kFallback);
  h.sched().RunFor(10'000);  // the late answer arrives
  EXPECT_EQ(h.client().counters().late_grants_kept, 1u);
  EXPECT_EQ(h.client().HeldUnits(), 10);
  h.sim_node().latency_us = 100;
  EXPECT_EQ(h.Admitted({"hourly", "late"}, 200), 100);
}

TEST(ClientCore, ALateLeaseOfADroppedBucketStillKeepsItsUnits) {
  // Between the deadline and the late answer, 20,000 other keys come and go: the bucket that
  // asked is idle and dropped by the sweep. The late units make it again.
  Harness h;
  h.sim_node().latency_us = 1500;
  h.Decide({"hourly", "gone"});
  h.sim_node().latency_us = 0;
  for (int i = 0; i < 20'000; ++i) {
    h.client().DecideAsync({"hourly", "other-" + std::to_string(i)}, [](Decision) {});
  }
  h.sched().RunFor(10'000);
  EXPECT_EQ(h.client().counters().late_grants_kept, 1u);
  h.sim_node().latency_us = 100;
  EXPECT_EQ(h.Admitted({"hourly", "gone"}, 200), 100);
}

TEST(ClientCore, AStaleMemberListIsCorrectedByWrongOwner) {
  // The nodes know two members (a newer list); this client was started with only the first.
  Harness h(2, {}, std::vector<std::string>{"n0:1"}, /*node_generation=*/1);
  const Ring full({"n0:1", "n1:1"});
  std::string key;
  for (int i = 0; key.empty(); ++i) {
    if (full.Owner(std::to_string(i)) == "n1:1") key = std::to_string(i);
  }
  const Decision d = h.Decide({"login", key});
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.source, Source::kStore);
  EXPECT_EQ(h.client().counters().wrong_owner, 1u);
  h.sched().RunFor(1000);  // its ring is built off the I/O thread
  EXPECT_EQ(h.client().ring()->version(), full.version());
}

TEST(Http, RejectionsCarryRetryAfterAndRateLimitFields) {
  Decision d;
  d.allowed = false;
  d.policy = "api_key";
  d.limit = 100;
  d.window_ms = 1000;
  d.remaining = 0;
  d.retry_after = std::chrono::milliseconds(1200);
  d.reset = std::chrono::milliseconds(30'000);
  const client::HttpRateLimit h = client::RenderHttp(d);
  EXPECT_EQ(h.status, 429);
  ASSERT_EQ(h.headers.size(), 3u);
  EXPECT_EQ(h.headers[0],
            std::make_pair(std::string("RateLimit-Policy"), std::string("\"api_key\";q=100;w=1")));
  EXPECT_EQ(h.headers[1],
            std::make_pair(std::string("RateLimit"), std::string("\"api_key\";r=0;t=30")));
  EXPECT_EQ(h.headers[2], std::make_pair(std::string("Retry-After"), std::string("2")));
  EXPECT_EQ(h.body, "Too Many Requests: limit 'api_key' is used up; retry in 2 s\n");
  d.allowed = true;
  d.remaining = 42;
  const client::HttpRateLimit ok = client::RenderHttp(d);
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.headers.size(), 2u);
}

}  // namespace
}  // namespace limiter
