// The gateway library against real limiterd processes on loopback: a 3-node cluster, a node
// killed with SIGKILL and restarted, a stale member list, and 8 threads through Decide.
#include <gtest/gtest.h>
#include <signal.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <atomic>
#include <chrono>
#include <thread>

#include "limiter/client/asio.h"
#include "limiter/client/client.h"
#include "protocol/ring.h"
#include "test/integration/node_process.h"
#include "test/support/wait.h"

namespace limiter {
namespace {

using client::Decision;
using client::Request;
using client::Source;
using testing::RunningNode;

const char* kPolicies = R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 1000, window: 1s, class: contract,
     lease: {size: 10}}
  - {name: login, algorithm: fixed_window, limit: 5, window: 1m, class: security,
     fallback: {limit: 2, window: 1m}}
  - {name: tenant, algorithm: gcra, limit: 300, window: 1h, class: contract}
  - {name: key, algorithm: gcra, limit: 100, window: 1h, class: contract, parent: tenant}
  - {name: hour, algorithm: token_bucket, limit: 1000, window: 1h, class: contract}
  - {name: hour10, algorithm: token_bucket, limit: 1000, window: 1h, class: contract,
     lease: {size: 10}}
)";

class Cluster : public ::testing::Test {
 protected:
  void SetUp() override {
    policies_ = testing::WriteTempFile("cluster_policies.yaml", kPolicies);
    for (int i = 0; i < 3; ++i) {
      addresses_.push_back("127.0.0.1:" + std::to_string(testing::PickFreePort()));
    }
    for (const std::string& a : addresses_) members_ += (members_.empty() ? "" : ",") + a;
    for (const std::string& a : addresses_) {
      nodes_.push_back(testing::StartMember(a, members_, policies_));
      ASSERT_FALSE(nodes_.back().listen.empty());
    }
  }

  std::unique_ptr<client::Client> NewClient(std::vector<std::string> members) {
    client::Options o;
    o.members = std::move(members);
    o.policy_file = policies_;
    o.gateways = 1;
    // Sanitizer builds are slow; deadlines themselves are tested in the simulation.
    o.deadline = std::chrono::milliseconds(50);
    Result<std::unique_ptr<client::Client>> created = client::Client::Create(o);
    EXPECT_TRUE(created.ok()) << created.error();
    return created.ok() ? std::move(created).value() : nullptr;
  }

  // A key whose owner is `address`.
  std::string KeyOwnedBy(const std::string& address, const std::string& prefix) {
    const Ring ring(addresses_);
    for (int i = 0;; ++i) {
      const std::string k = prefix + std::to_string(i);
      if (ring.Owner(k) == address) return k;
    }
  }

  std::string policies_;
  std::vector<std::string> addresses_;
  std::string members_;
  std::vector<RunningNode> nodes_;
};

TEST_F(Cluster, AKilledNodeDegradesByClassAndItsKeysComeBackWhenItReturns) {
  auto client = NewClient(addresses_);
  ASSERT_TRUE(client);
  const std::string victim = addresses_[2];
  const std::string contract_key = KeyOwnedBy(victim, "api-");
  const std::string login_key = KeyOwnedBy(victim, "user-");
  const std::string healthy_key = KeyOwnedBy(addresses_[0], "api-");

  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(client->Decide({"api", contract_key}).error.empty());
    ASSERT_TRUE(client->Decide({"api", healthy_key}).error.empty());
  }
  EXPECT_TRUE(client->Decide({"login", login_key}).allowed);

  nodes_[2].process->Signal(SIGKILL);
  ASSERT_TRUE(nodes_[2].process->Wait(10'000).has_value());

  // Contract requests keep working: no errors, the fallback answers for the dead node's keys.
  int errors = 0, fallback = 0, login_admitted = 0;
  for (int i = 0; i < 300; ++i) {
    const Decision d = client->Decide({"api", contract_key});
    errors += !d.error.empty();
    fallback += d.source == Source::kFallback;
    errors += !client->Decide({"api", healthy_key}).error.empty();
    // Security: the strict local limit, 2 per minute, is all an attacker gets.
    login_admitted += client->Decide({"login", login_key}).allowed;
  }
  EXPECT_EQ(errors, 0);
  EXPECT_GT(fallback, 0);
  // The local limit is a fixed window of 2 per minute, aligned to the gateway's clock: the
  // loop (a few seconds) may straddle one window boundary, so at most 2 windows' worth.
  EXPECT_LE(login_admitted, 2 * 2);
  EXPECT_GE(client->counters().fallback_by_class[0], 298u);  // security
  EXPECT_GE(client->counters().fallback_by_class[1], 1u);    // contract

  // Restart it: its keys go back to the store once a probe finds it (probes back off to
  // at most 1 s; the wait below only guards against a hang).
  nodes_[2] = testing::StartMember(victim, members_, policies_);
  ASSERT_FALSE(nodes_[2].listen.empty());
  const auto restarted = std::chrono::steady_clock::now();
  Source source = Source::kFallback;
  testing::WaitUntil(
      [&] {
        source = client->Decide({"login", KeyOwnedBy(victim, "other-user-")}).source;
        return source != Source::kFallback;
      },
      std::chrono::seconds(30));
  EXPECT_EQ(source, Source::kStore);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - restarted);
  RecordProperty("back_to_store_ms", std::to_string(took.count()));
  EXPECT_EQ(client->counters().nodes_down, 0u);
}

TEST_F(Cluster, AStaleMemberListIsCorrectedByWrongOwner) {
  // This gateway knows only two of the three nodes.
  auto client = NewClient({addresses_[0], addresses_[1]});
  ASSERT_TRUE(client);
  const std::string key = KeyOwnedBy(addresses_[2], "user-");
  const Decision d = client->Decide({"login", key});
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.source, Source::kStore);
  EXPECT_TRUE(d.error.empty()) << d.error;
  EXPECT_GE(client->counters().wrong_owner, 1u);
  // Once the nodes' newer list is adopted (its ring is built off the I/O thread), the third
  // node's keys go straight to it.
  testing::WaitUntil([&] { return client->counters().rings_adopted > 0; });
  EXPECT_EQ(client->counters().rings_adopted, 1u);
  const uint64_t wrong = client->counters().wrong_owner;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(client->Decide({"login", key}).allowed);
  EXPECT_FALSE(client->Decide({"login", key}).allowed);  // 5 per minute, counted at its owner
  EXPECT_EQ(client->counters().wrong_owner, wrong);
}

TEST_F(Cluster, EightThreadsThroughDecideKeepTheLimits) {
  auto client = NewClient(addresses_);
  ASSERT_TRUE(client);
  std::atomic<int> tenant_admitted{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 400; ++i) {
        // 8 threads, 50 keys under one tenant of 300: the tenant binds.
        const Decision d =
            client->Decide({"key", std::to_string((t * 400 + i) % 50) + "k", "acme"});
        errors += !d.error.empty();
        tenant_admitted += d.allowed;
        Decision api;
        api = client->Decide({"api", std::to_string(t) + "-shared"});
        errors += !api.error.empty();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_LE(tenant_admitted.load(), 300);
  EXPECT_GE(tenant_admitted.load(), 150);  // leases strand some, never more than 50 keys' worth
  const client::Counters c = client->counters();
  EXPECT_EQ(c.decisions, 8u * 400 * 2);
  EXPECT_EQ(c.by_source[0] + c.by_source[1] + c.by_source[2], c.decisions);
}

// `threads` threads share `n` decisions on one key of `policy` (1000 per hour); returns what
// was allowed and the decisions that fell back, and the seconds it took.
struct OneKeyRun {
  int64_t allowed = 0;
  int64_t fallback = 0;
  double seconds = 0;
  uint64_t store_calls = 0;
};
OneKeyRun RunOneKey(client::Client& c, const std::string& policy, const std::string& key,
                    int threads, int64_t n) {
  std::atomic<int64_t> next{0}, allowed{0}, fallback{0};
  const uint64_t calls_before = c.counters().store_calls;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      while (next++ < n) {
        const Decision d = c.Decide({policy, key});
        allowed += d.allowed;
        fallback += d.source == Source::kFallback;
      }
    });
  }
  for (auto& w : workers) w.join();
  return {allowed.load(), fallback.load(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          c.counters().store_calls - calls_before};
}

TEST_F(Cluster, ManyThreadsOnOneKeyGetExactlyWhatItHolds) {
  // A caller is denied only when the key's owner says it is out: 8 or 32 threads on one
  // key of 1000 per hour get min(n, 1000), plus what refilled while they ran.
  auto client = NewClient(addresses_);
  ASSERT_TRUE(client);
  int run = 0;
  for (const char* policy : {"hour", "hour10"}) {
    for (int threads : {1, 8, 32}) {
      for (int64_t n : {int64_t{150}, int64_t{3000}}) {
        const std::string key = "one-key-" + std::to_string(run++);
        const OneKeyRun r = RunOneKey(*client, policy, key, threads, n);
        SCOPED_TRACE(std::string(policy) + ", " + std::to_string(threads) +
                     " threads, n = " + std::to_string(n));
        EXPECT_EQ(r.fallback, 0);
        const int64_t refilled = static_cast<int64_t>(r.seconds * 1000 / 3600) + 1;
        EXPECT_GE(r.allowed, std::min<int64_t>(n, 1000));
        EXPECT_LE(r.allowed, std::min<int64_t>(n, 1000 + refilled));
      }
    }
  }
}

TEST_F(Cluster, EightThreadsNeedNoMoreStoreCallsThanOne) {
  // Waiting threads share the lease in flight rather than each asking for one, and every
  // lease asks for at least half a lease (a background top-up starts at most half a lease
  // early): 150 units in leases of 10 take at most 2 * 15 calls, however many threads wait
  // and however slow the machine is (how early a top-up starts follows the round trip, so
  // the exact count does).
  auto client = NewClient(addresses_);
  ASSERT_TRUE(client);
  const OneKeyRun one = RunOneKey(*client, "hour10", "calls-one", 1, 150);
  const OneKeyRun eight = RunOneKey(*client, "hour10", "calls-eight", 8, 150);
  EXPECT_EQ(one.allowed, 150);
  EXPECT_EQ(eight.allowed, 150);
  EXPECT_LE(one.store_calls, 2u * 15);
  EXPECT_LE(eight.store_calls, 2u * 15);
  RecordProperty("store_calls_1_thread", std::to_string(one.store_calls));
  RecordProperty("store_calls_8_threads", std::to_string(eight.store_calls));
}

TEST_F(Cluster, AsyncDecideCompletesOnTheGivenAsioExecutor) {
  asio::io_context io;  // outlives the client, whose thread posts into it
  auto client = NewClient(addresses_);
  ASSERT_TRUE(client);
  int done = 0, allowed = 0;
  std::thread::id ran_on;
  for (int i = 0; i < 7; ++i) {
    client::AsyncDecide(*client, {"login", "async-user"}, io.get_executor(), [&](Decision d) {
      ++done;
      allowed += d.allowed;
      ran_on = std::this_thread::get_id();
    });
  }
  // Keep io from stopping while it waits for the first completion to be posted.
  auto work = asio::make_work_guard(io);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done < 7 && std::chrono::steady_clock::now() < give_up) {
    io.run_one_for(std::chrono::seconds(1));
  }
  ASSERT_EQ(done, 7);
  EXPECT_EQ(allowed, 5);
  EXPECT_EQ(ran_on, std::this_thread::get_id());  // the thread running io
}

// A client torn down while it probes a node that is not there (connections being opened and
// refused, probes and their timers pending) stops cleanly: nothing calls back into it after
// it is gone (the sanitizer builds would catch a use after free).
TEST(ClientTeardown, DestroyingTheClientWhileItProbesIsClean) {
  client::Options o;
  o.policy_file = testing::WriteTempFile("teardown_policies.yaml", kPolicies);
  o.members = {"127.0.0.1:" + std::to_string(testing::PickFreePort())};  // nobody listens
  for (int i = 0; i < 12; ++i) {
    Result<std::unique_ptr<client::Client>> created = client::Client::Create(o);
    ASSERT_TRUE(created.ok()) << created.error();
    std::unique_ptr<client::Client> c = std::move(created).value();
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(c->Decide({"api", "k" + std::to_string(k)}).source, Source::kFallback);
    }
    // Around the first probe (100 ms after the node was marked down), at varying offsets.
    std::this_thread::sleep_for(std::chrono::milliseconds(80 + 5 * i));
    c.reset();
  }
}

TEST(ClientOptions, BadOptionsAreOneClearError) {
  // Why Create refused `o` (empty when it did not).
  auto refusal = [](const client::Options& o) {
    const Result<std::unique_ptr<client::Client>> created = client::Client::Create(o);
    EXPECT_FALSE(created.ok());
    return created.error();
  };
  client::Options o;
  EXPECT_EQ(refusal(o), "no policy file (Options::policy_file)");
  o.policy_file = "/nonexistent.yaml";
  EXPECT_EQ(refusal(o), "/nonexistent.yaml: cannot open the policy file");
  o.policy_file = testing::WriteTempFile("opts_policies.yaml", kPolicies);
  EXPECT_EQ(refusal(o), "no members: give Options::members or members_dns");
  o.members = {"nohost"};
  EXPECT_EQ(refusal(o), "member 'nohost' is not HOST:PORT with a port 1-65535");
  o.members = {"127.0.0.1:7450"};
  o.secret_file = "/nonexistent/secret";
  std::string error = refusal(o);
  EXPECT_NE(error.find("/nonexistent/secret"), std::string::npos) << error;
  o.secret_file = testing::WriteTempFile("short_secret", "short\n");
  error = refusal(o);
  EXPECT_NE(error.find("at least 16"), std::string::npos) << error;
  o.secret_file.clear();
  o.tls_ca_file = "/nonexistent/ca.pem";
  error = refusal(o);
  EXPECT_NE(error.find("/nonexistent/ca.pem"), std::string::npos) << error;
}

// A gateway with the cluster secret is served by its node; one without it, or with another,
// is refused at the hello and falls back by class (security: its strict local limit).
TEST(ClientSecret, OnlyAGatewayWithTheSecretIsServed) {
  const std::string policies = testing::WriteTempFile("secret_policies.yaml", kPolicies);
  const std::string secret =
      testing::WriteTempFile("client_secret", "gateway-secret-0123456789abcdef\n");
  const std::string other =
      testing::WriteTempFile("client_other_secret", "another-secret-0123456789abcdef\n");
  RunningNode node =
      testing::StartNode({"--policies", policies, "--threads", "1", "--secret-file", secret});
  ASSERT_FALSE(node.listen.empty());
  auto make = [&](const std::string& secret_file) {
    client::Options o;
    o.members = {node.listen};
    o.policy_file = policies;
    o.deadline = std::chrono::milliseconds(200);
    o.secret_file = secret_file;
    Result<std::unique_ptr<client::Client>> created = client::Client::Create(o);
    EXPECT_TRUE(created.ok()) << created.error();
    return created.ok() ? std::move(created).value() : nullptr;
  };
  auto with = make(secret);
  for (int i = 0; i < 5; ++i) {
    const Decision d = with->Decide({"login", "alice"});
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.source, Source::kStore);
  }
  EXPECT_FALSE(with->Decide({"login", "alice"}).allowed);  // the node's limit of 5

  for (const std::string& file : {std::string(), other}) {
    auto without = make(file);
    const Decision d = without->Decide({"login", "bob"});
    EXPECT_EQ(d.source, Source::kFallback) << (file.empty() ? "no secret" : "another secret");
    EXPECT_GE(without->counters().store_errors, 1u);
  }
}

}  // namespace
}  // namespace limiter
