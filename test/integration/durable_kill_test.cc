// Durable quotas against kill -9, with real processes: gateway threads drive a daily quota
// (calendar-aligned, durable) through the client library while its owner is killed with
// SIGKILL at random moments, 20 times, and restarted on the same data dir each time.
//   - sync: every admission a gateway saw acknowledged before a kill is still charged after
//     the restart, and the admissions the gateways saw (from the node or its leases) never
//     exceed the quota.
//   - interval: what is lost stays within the stated window: a kill takes at most what was
//     acknowledged within the sync interval (plus a generous allowance for a loaded machine)
//     before it.
// No timing is asserted; the kill moments come from a printed seed.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "limiter/client/client.h"
#include "test/integration/node_process.h"
#include "test/support/ctl_runner.h"
#include "test/unit/test_seed.h"

namespace limiter {
namespace {

using Clock = std::chrono::steady_clock;

const char* kPolicies = R"(
policies:
  - {name: daily_login, algorithm: fixed_window, limit: 150, window: 1d, align: calendar,
     class: security, durable: true}
  - {name: daily_api, algorithm: fixed_window, limit: 400, window: 1d, align: calendar,
     class: contract, lease: {size: 10, ttl: 1s}, durable: true}
)";

struct Quota {
  const char* policy;
  int64_t limit;
};
// Small enough to be spent within the run: after that, every restart must still deny.
constexpr Quota kQuotas[] = {{"daily_login", 150}, {"daily_api", 400}};

// What the gateways saw of one quota: each admission from the node or a lease, when.
struct Seen {
  std::mutex mu;
  std::vector<Clock::time_point> admitted;  // guarded by mu
  std::atomic<int64_t> fallback{0};         // decided by the class while the owner was down

  int64_t Before(Clock::time_point t) {
    std::lock_guard lock(mu);
    int64_t n = 0;
    for (const auto& a : admitted) n += a < t;
    return n;
  }
  int64_t Total() {
    std::lock_guard lock(mu);
    return static_cast<int64_t>(admitted.size());
  }
};

class DurableKill : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    policies_ = testing::WriteTempFile("durable_kill_policies.yaml", kPolicies);
    dir_ = ::testing::TempDir() + "/limiter_" + std::to_string(::getpid()) + "_kill_" + GetParam();
    std::filesystem::remove_all(dir_);
    address_ = "127.0.0.1:" + std::to_string(testing::PickFreePort());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  testing::RunningNode Start() {
    return testing::Launch({"--listen", address_, "--admin", "127.0.0.1:0", "--policies", policies_,
                            "--threads", "2", "--data-dir", dir_, "--durability", GetParam(),
                            "--sync-interval-ms", std::to_string(kIntervalMs)});
  }

  // Units the node holds charged on the quota's key (limit - remaining), by INSPECT.
  int64_t Charged(const Quota& q) {
    const testing::CtlOutcome out =
        testing::RunCtl({"inspect", "--server", address_, "--policy", q.policy, "k", "--json"});
    EXPECT_EQ(out.status, 0) << out.err;
    if (out.status != 0) return -1;
    const nlohmann::json j = nlohmann::json::parse(out.out);
    return q.limit - j["remaining"].get<int64_t>();
  }

  static constexpr int64_t kIntervalMs = 50;
  std::string policies_, dir_, address_;
};

TEST_P(DurableKill, KilledTwentyTimesTheQuotaKeepsEveryAcknowledgedCharge) {
  const bool sync = std::string(GetParam()) == "sync";
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  // The quotas are UTC days: a run must not straddle midnight.
  const int64_t to_midnight = 86'400'000 - std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                                   .count() %
                                               86'400'000;
  if (to_midnight < 120'000)
    std::this_thread::sleep_for(std::chrono::milliseconds(to_midnight + 100));

  testing::RunningNode node = Start();
  ASSERT_FALSE(node.listen.empty());
  client::Options o;
  o.members = {address_};
  o.policy_file = policies_;
  o.gateways = 1;
  o.deadline = std::chrono::milliseconds(50);  // sanitizer builds are slow
  Result<std::unique_ptr<client::Client>> created = client::Client::Create(o);
  ASSERT_TRUE(created.ok()) << created.error();
  std::unique_ptr<client::Client> gateway = std::move(created).value();

  Seen seen[2];
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  // Stops and joins the gateway threads however the test ends (an ASSERT returns early).
  struct Joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop.store(true);
      for (auto& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{stop, threads};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const int q = t % 2;
      while (!stop.load()) {
        const client::Decision d = gateway->Decide({.policy = kQuotas[q].policy, .key = "k"});
        if (d.allowed && d.source != client::Source::kFallback) {
          std::lock_guard lock(seen[q].mu);
          seen[q].admitted.push_back(Clock::now());
        } else if (d.allowed) {
          seen[q].fallback.fetch_add(1);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    });
  }

  // In interval mode a kill may take what was queued in the last interval; a loaded machine
  // may hold the committer back for a while, so the allowance is generous.
  const auto allowance =
      sync ? Clock::duration::zero() : std::chrono::milliseconds(kIntervalMs + 1000);
  // Each kill may take what was acknowledged within `allowance` before it, and no more: a
  // restart's charge is at least every acknowledged admission less what the kills so far
  // were allowed to take.
  int64_t allowed_loss[2] = {0, 0};
  for (int kill = 0; kill < 20; ++kill) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 200));
    node.process->Signal(SIGKILL);
    const Clock::time_point killed = Clock::now();
    ASSERT_TRUE(node.process->Wait(20'000).has_value());
    node = Start();
    ASSERT_FALSE(node.listen.empty()) << "restart " << kill;
    for (int q = 0; q < 2; ++q) {
      const int64_t acknowledged = seen[q].Before(killed);
      allowed_loss[q] += acknowledged - seen[q].Before(killed - allowance);
      const int64_t charged = Charged(kQuotas[q]);
      EXPECT_GE(charged, acknowledged - allowed_loss[q])
          << kQuotas[q].policy << " after kill " << kill << ": charges were lost";
    }
  }
  stop.store(true);
  for (auto& t : threads) t.join();  // the Joiner finds them joined
  for (int q = 0; q < 2; ++q) {
    const int64_t admitted = seen[q].Total();
    if (sync) {
      EXPECT_LE(admitted, kQuotas[q].limit) << kQuotas[q].policy;
      EXPECT_GE(Charged(kQuotas[q]), admitted) << kQuotas[q].policy;
    }
    EXPECT_GT(admitted, 0) << kQuotas[q].policy << ": the run admitted nothing";
    std::printf("%s %s: %lld admitted by the node or its leases, %lld by fallback, %lld charged\n",
                GetParam(), kQuotas[q].policy, static_cast<long long>(admitted),
                static_cast<long long>(seen[q].fallback.load()),
                static_cast<long long>(Charged(kQuotas[q])));
  }
  EXPECT_EQ(seen[0].fallback.load(), 0) << "a security quota never admits by fallback";
}

INSTANTIATE_TEST_SUITE_P(Modes, DurableKill, ::testing::Values("sync", "interval"));

}  // namespace
}  // namespace limiter
