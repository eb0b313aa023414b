// Rolling restart on loopback: 3 real limiterd nodes under steady load through the gateway
// client library, each restarted in turn, plus one node added and one removed; every key's
// admissions are checked against I1 (B + L*t/W in every interval t) with the one checker
// (common/promise_check.h).
//
// Three cases, so that both promises are measured:
//  - SIGTERM with hand-off (the default): a leaving node hands its keys to their next owner,
//    a joining one is handed its keys; no extra burst per restart. Includes the add/remove.
//  - kill -9: no hand-off is possible; the documented promise is at most one extra burst per
//    key per crash. The 3 restarts only (the add/remove is the hand-off's, measured above).
//  - SIGTERM with --handoff-deadline-ms 0 (hand-off off): the figure "without hand-off",
//    held to the crash bound only. The 3 restarts only: without hand-off a node cannot join.
//
// Each case prints one line with the worst key's total admissions against B + L*T/W over the
// run T (the README quotes it). Timings are printed, never asserted.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/promise_check.h"
#include "limiter/client/client.h"
#include "protocol/ring.h"
#include "test/integration/admin_page.h"
#include "test/integration/node_process.h"
#include "test/support/wait.h"

namespace limiter {
namespace {

using client::Decision;
using client::Source;
using testing::RunningNode;
using namespace std::chrono_literals;

// One security policy, strict: one CHECK per request at the key's owner, and a fallback (no
// local limit) that denies, so every admission is a node's decision.
constexpr int64_t kLimit = 20;       // L
constexpr int64_t kWindowMs = 2000;  // W
constexpr int64_t kBurst = 20;       // B
const char* kPolicies = R"(
policies:
  - {name: login, algorithm: token_bucket, limit: 20, window: 2s, burst: 20, class: security,
     mode: strict}
)";
constexpr int kKeys = 16;
constexpr int kThreads = 4;  // each drives kKeys / kThreads keys
constexpr auto kPerKeyPeriod = std::chrono::microseconds(25'000);  // 40 req/s per key: 4 L/W

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Seconds(int64_t us) { return static_cast<double>(us) / 1e6; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using testing::AdminGet;
using testing::MetricSum;

// What the load saw of one key.
struct KeyRecord {
  std::string key;
  std::vector<Admission> admitted;  // in end_us order (one thread, sequential Decide calls)
  int64_t requests = 0;
  int64_t first_start_us = 0;
  int64_t last_end_us = 0;
  int64_t by_source[3] = {};
  int64_t allowed_in_fallback = 0;  // must stay 0: security without a local limit denies
};

// Steady load on kKeys keys from kThreads threads through Decide, each key offered 40 req/s
// (4x its rate). Each key is driven by one thread only, so its records need no lock.
class Load {
 public:
  Load(client::Client& c, const std::vector<std::string>& keys)
      : client_(c), denied_at_us_(keys.size()) {
    for (const std::string& k : keys) {
      records_.emplace_back();
      records_.back().key = k;
    }
  }
  ~Load() { Stop(); }

  void Start() {
    for (int t = 0; t < kThreads; ++t) threads_.emplace_back([this, t] { Run(t); });
  }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  const std::vector<KeyRecord>& records() const { return records_; }
  // Whether every key has been denied by a node for a request begun at `us` or later: its
  // bucket was empty after then, so whatever a change before gave it has been spent.
  bool EachDrainedSince(int64_t us) const {
    return std::all_of(denied_at_us_.begin(), denied_at_us_.end(),
                       [us](const std::atomic<int64_t>& at) { return at.load() >= us; });
  }

 private:
  void Run(int t) {
    std::vector<KeyRecord*> mine;
    for (size_t i = t; i < records_.size(); i += kThreads) mine.push_back(&records_[i]);
    if (mine.empty()) return;
    // One request every period/|mine|, round robin over this thread's keys; a thread held
    // up (a slow answer) skips ahead rather than sending a catch-up burst.
    const auto step = kPerKeyPeriod / static_cast<int64_t>(mine.size());
    auto next = std::chrono::steady_clock::now();
    for (size_t i = 0; !stop_; ++i) {
      std::this_thread::sleep_until(next);
      next += step;
      if (const auto now = std::chrono::steady_clock::now(); now > next + 100ms) next = now;
      KeyRecord& k = *mine[i % mine.size()];
      const int64_t start = NowUs();
      const Decision d = client_.Decide({"login", k.key});
      const int64_t end = NowUs();
      if (k.requests++ == 0) k.first_start_us = start;
      k.last_end_us = end;
      k.by_source[static_cast<int>(d.source)]++;
      if (d.allowed) {
        k.admitted.push_back({start, end, 1});
        if (d.source == Source::kFallback) ++k.allowed_in_fallback;
      } else if (d.source == Source::kStore) {
        denied_at_us_[static_cast<size_t>(&k - records_.data())].store(start);
      }
      if (!d.error.empty()) ++errors_;
    }
  }

  client::Client& client_;
  std::vector<KeyRecord> records_;
  std::vector<std::atomic<int64_t>> denied_at_us_;  // per key, NowUs; 0: never
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};

 public:
  std::atomic<int64_t> errors_{0};
};

// One address of the cluster, started (again) on it as often as the sequence says.
struct Member {
  std::string name;     // node1...
  std::string address;  // 127.0.0.1:PORT, fixed
  RunningNode node;     // the current process (none once stopped)
  int starts = 0;
  std::vector<std::string> logs;  // one stderr file per start
};

enum class Stop { kTerm, kKill };

class RollingRestart : public ::testing::Test {
 protected:
  void SetUp() override {
    policies_ = testing::WriteTempFile("rolling_policies.yaml", kPolicies);
    for (int i = 0; i < 4; ++i) {
      Member m;
      m.name = "node" + std::to_string(i + 1);
      m.address = "127.0.0.1:" + std::to_string(testing::PickFreePort());
      members_.push_back(std::move(m));
    }
    initial_ = members_[0].address + "," + members_[1].address + "," + members_[2].address;
    all_four_ = initial_ + "," + members_[3].address;
  }

  void TearDown() override {
    load_.reset();  // before the client it drives
    client_.reset();
    // Every node still running: kill -9 (nothing to measure any more), then reap.
    for (Member& m : members_) {
      if (m.node.process) m.node.process->Signal(SIGKILL);
    }
    for (Member& m : members_) m.node = RunningNode{};
    if (HasFailure()) DumpLogs();
    for (const Member& m : members_) {
      for (const std::string& log : m.logs) std::remove(log.c_str());
    }
    std::remove(policies_.c_str());
  }

  // Starts `m` on its address with `member_list` at generation 1, its stderr into a file of
  // its own; waits until its /readyz answers 200 (a joining node answers 503 until the keys
  // it gains have been handed to it).
  void StartMember(Member& m, const std::string& member_list) {
    const std::string log = testing::WriteTempFile(
        "rolling_" + m.name + "_start" + std::to_string(++m.starts) + ".log", "");
    m.logs.push_back(log);
    std::vector<std::string> args = {
        "--listen", m.address,    "--admin", "127.0.0.1:0", "--members", member_list,    "--self",
        m.address,  "--policies", policies_, "--threads",   "1",         "--generation", "1"};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    // `sh -c 'exec "$0" "$@" 2>>LOG' limiterd ARGS...`: the same pid, its stderr captured.
    m.node = testing::Launch(args, {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>>'" + log + "'"});
    ASSERT_FALSE(m.node.listen.empty()) << m.name << " did not start:\n" << ReadAll(log);
    ASSERT_EQ(m.node.listen, m.address);
    int status = -1;
    ASSERT_TRUE(testing::WaitUntil(
        [&] { return AdminGet(m.node.admin, "/readyz", &status).has_value(); }, 30s))
        << m.name << " never became ready (last /readyz status " << status << "):\n"
        << ReadAll(log);
  }

  // Waits until every key's bucket has drained since `us` (a change, or the load's start):
  // what the change may have given a key has been spent and is in its record.
  void WaitDrained(int64_t us, const std::string& since) {
    EXPECT_TRUE(testing::WaitUntil([&] { return load_->EachDrainedSince(us); }, 60s))
        << "some key was never denied by its owner after " << since;
  }

  // Stops `m` (SIGTERM: it leaves, handing its keys over, unless hand-off is off; SIGKILL: a
  // crash) and waits for the process to be gone, so that its address is free again.
  void StopMember(Member& m, Stop how) {
    ASSERT_TRUE(m.node.process);
    m.node.process->Signal(how == Stop::kTerm ? SIGTERM : SIGKILL);
    // Bounded: the hand-off deadline (10 s) plus the leave's own second, and slack.
    const std::optional<int> status = m.node.process->Wait(30'000);
    ASSERT_TRUE(status.has_value()) << m.name << " did not exit:\n" << ReadAll(m.logs.back());
    if (how == Stop::kTerm) {
      EXPECT_EQ(*status, 0) << m.name;
    }
    m.node = RunningNode{};
  }

  void Restart(Member& m, Stop how, const std::string& member_list) {
    const int64_t t0 = NowUs();
    StopMember(m, how);
    if (HasFatalFailure()) return;
    const int64_t stopped = NowUs();
    StartMember(m, member_list);
    if (HasFatalFailure()) return;
    const int64_t ready = NowUs();
    std::printf("  %s: %s, exited in %.2f s; started again, ready in %.2f s\n", m.name.c_str(),
                how == Stop::kTerm ? "SIGTERM" : "SIGKILL", Seconds(stopped - t0),
                Seconds(ready - stopped));
    WaitDrained(ready, m.name + "'s restart");
  }

  // Starts the first `nodes` members (3 or 4), each listing them all, and the load.
  void StartClusterAndLoad(int nodes = 3) {
    std::vector<std::string> addresses;
    for (int i = 0; i < nodes; ++i) addresses.push_back(members_[i].address);
    for (int i = 0; i < nodes; ++i) {
      StartMember(members_[i], nodes == 3 ? initial_ : all_four_);
      if (HasFatalFailure()) return;
    }
    // 16 keys spread over the initial owners (each restart hits some keys).
    const Ring ring(addresses);
    std::map<std::string, int> per_owner;
    for (int i = 0; static_cast<int>(keys_.size()) < kKeys; ++i) {
      const std::string k = "user-" + std::to_string(i);
      if (per_owner[ring.Owner(k)] < (kKeys + nodes - 1) / nodes) {
        ++per_owner[ring.Owner(k)];
        keys_.push_back(k);
      }
    }
    client::Options o;
    o.members = addresses;
    o.members_generation = 1;  // the nodes' --generation; newer lists come in WrongOwner
    o.policy_file = policies_;
    // Generous: a loaded (sanitizer) machine must not turn node answers into fallbacks.
    o.deadline = 200ms;
    Result<std::unique_ptr<client::Client>> created = client::Client::Create(o);
    ASSERT_TRUE(created.ok()) << created.error();
    client_ = std::move(created).value();
    load_ = std::make_unique<Load>(*client_, keys_);
    load_started_us_ = NowUs();
    load_->Start();
    WaitDrained(load_started_us_, "the load began");  // warm-up: every key's bucket drained
  }

  struct Figures {
    const KeyRecord* worst_total = nullptr;  // the key furthest over (or closest to) its bound
    double worst_total_bound = 0;
    double worst_total_seconds = 0;
    const KeyRecord* worst_window_key = nullptr;
    WorstWindow worst_window;  // against B + L*t/W, the key with the largest excess
  };

  // Stops the load; checks every key's admissions against B + L*t/W with `extra` more units
  // allowed; returns the figures to print.
  Figures StopLoadAndCheck(int64_t extra) {
    load_->Stop();
    const int64_t load_us = NowUs() - load_started_us_;
    Figures f;
    double worst_total_excess = -1e18;
    double worst_window_excess = -1e18;
    int64_t requests = 0, admitted = 0, by_source[3] = {}, allowed_in_fallback = 0;
    const PromiseBound promise{kLimit, kWindowMs * 1000, kBurst, 1000};
    PromiseBound asserted = promise;
    asserted.burst += extra;
    for (const KeyRecord& k : load_->records()) {
      requests += k.requests;
      admitted += static_cast<int64_t>(k.admitted.size());
      for (int s = 0; s < 3; ++s) by_source[s] += k.by_source[s];
      allowed_in_fallback += k.allowed_in_fallback;
      std::vector<Admission> sorted = k.admitted;
      std::sort(sorted.begin(), sorted.end(),
                [](const Admission& a, const Admission& b) { return a.end_us < b.end_us; });
      // The bound asserted (with `extra`), and the plain promise's figure to print.
      const WorstWindow checked = FindWorstWindow(sorted, asserted);
      EXPECT_FALSE(checked.over) << k.key << ": admitted " << checked.admitted << " in "
                                 << Seconds(checked.interval_us) << " s, over the bound "
                                 << checked.allowed << " (B + L*t/W + " << extra << ")";
      const WorstWindow plain = FindWorstWindow(sorted, promise);
      double excess = static_cast<double>(plain.admitted) - plain.allowed;
      if (std::abs(excess) < 0.05) excess = 0;  // printed as +0.0, not -0.0
      if (excess > worst_window_excess) {
        worst_window_excess = excess;
        f.worst_window = plain;
        f.worst_window_key = &k;
      }
      const double t_s = Seconds(k.last_end_us - k.first_start_us);
      const double bound =
          static_cast<double>(kBurst) + static_cast<double>(kLimit) * t_s * 1000.0 / kWindowMs;
      const double total_excess = static_cast<double>(k.admitted.size()) - bound;
      if (total_excess > worst_total_excess) {
        worst_total_excess = total_excess;
        f.worst_total = &k;
        f.worst_total_bound = bound;
        f.worst_total_seconds = t_s;
      }
    }
    EXPECT_EQ(load_->errors_.load(), 0);
    EXPECT_EQ(allowed_in_fallback, 0) << "a security fallback without a local limit admitted";
    std::printf(
        "  load: %.1f s, %lld requests on %d keys, %lld admitted; by source: store "
        "%lld, lease %lld, fallback %lld\n",
        Seconds(load_us), static_cast<long long>(requests), kKeys, static_cast<long long>(admitted),
        static_cast<long long>(by_source[0]), static_cast<long long>(by_source[1]),
        static_cast<long long>(by_source[2]));
    const client::Counters c = client_->counters();
    std::printf(
        "  client: %llu member lists adopted, %llu WrongOwner, %llu store errors "
        "(%llu deadline misses), %llu nodes down now\n",
        static_cast<unsigned long long>(c.rings_adopted),
        static_cast<unsigned long long>(c.wrong_owner),
        static_cast<unsigned long long>(c.store_errors),
        static_cast<unsigned long long>(c.deadline_misses),
        static_cast<unsigned long long>(c.nodes_down));
    if (f.worst_window_key) {
      std::printf("  worst interval: %s admitted %lld in %.2f s, B + L*t/W = %.1f (%+.1f)\n",
                  f.worst_window_key->key.c_str(), static_cast<long long>(f.worst_window.admitted),
                  Seconds(f.worst_window.interval_us), f.worst_window.allowed, worst_window_excess);
    }
    return f;
  }

  // The hand-off as the nodes saw it: their leave lines and their counters.
  void RunWithoutHandoff(Stop how, const char* label, const char* promise);

  void PrintHandoff() {
    for (Member& m : members_) {
      for (const std::string& log : m.logs) {
        std::istringstream lines(ReadAll(log));
        std::string line;
        while (std::getline(lines, line)) {
          if (line.find("left the cluster") != std::string::npos ||
              line.find("lost") != std::string::npos || line.find("join:") != std::string::npos) {
            std::printf("  %s: %s\n", m.name.c_str(), line.c_str());
          }
        }
      }
    }
    for (Member& m : members_) {
      const std::optional<std::string> page = AdminGet(m.node.admin, "/metrics");
      if (!page) continue;
      std::printf(
          "  %s metrics: keys sent %lld, lost %lld, received %lld, waits expired %lld, "
          "generation %lld, login decisions %lld\n",
          m.name.c_str(),
          static_cast<long long>(MetricSum(*page, "limiter_handoff_keys_sent_total")),
          static_cast<long long>(MetricSum(*page, "limiter_handoff_keys_lost_total")),
          static_cast<long long>(MetricSum(*page, "limiter_handoff_keys_received_total")),
          static_cast<long long>(MetricSum(*page, "limiter_handoff_waits_expired_total")),
          static_cast<long long>(MetricSum(*page, "limiter_membership_generation")),
          static_cast<long long>(MetricSum(*page, "limiter_decisions_total")));
    }
  }

  void DumpLogs() {
    for (Member& m : members_) {
      for (const std::string& log : m.logs) {
        std::printf("----- %s (%s) -----\n%s", log.c_str(), m.address.c_str(),
                    ReadAll(log).c_str());
      }
    }
  }

  // The three restarts of the sequence.
  void RestartEach(Stop how) {
    for (int i = 0; i < 3; ++i) {
      Restart(members_[i], how, initial_);
      if (HasFatalFailure()) return;
    }
  }

  std::string policies_;
  std::vector<Member> members_;
  std::string initial_, all_four_;
  std::vector<std::string> extra_args_;  // more limiterd flags for every node
  std::vector<std::string> keys_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<Load> load_;
  int64_t load_started_us_ = 0;
};

TEST_F(RollingRestart, SigtermHandsKeysOverSoNoRestartAddsABurst) {
  const int64_t t0 = NowUs();
  ASSERT_NO_FATAL_FAILURE(StartClusterAndLoad());
  ASSERT_NO_FATAL_FAILURE(RestartEach(Stop::kTerm));
  // Add node4: it joins (its --members names all four; the running nodes learn it from its
  // announcement, the client from their WrongOwner replies).
  {
    const int64_t a = NowUs();
    ASSERT_NO_FATAL_FAILURE(StartMember(members_[3], all_four_));
    const int64_t ready = NowUs();
    std::printf("  node4: added, ready in %.2f s\n", Seconds(ready - a));
    WaitDrained(ready, "node4 was added");
  }
  // Remove node1: SIGTERM, not started again.
  {
    const int64_t r = NowUs();
    ASSERT_NO_FATAL_FAILURE(StopMember(members_[0], Stop::kTerm));
    const int64_t gone = NowUs();
    std::printf("  node1: removed (SIGTERM), exited in %.2f s\n", Seconds(gone - r));
    WaitDrained(gone, "node1 was removed");
  }
  PrintHandoff();
  // The hand-off's promise is B + L*t/W exactly: the checker's own slack (the 1 ms of the
  // nodes' clocks, the request's span) is all that is allowed.
  const Figures f = StopLoadAndCheck(0);
  ASSERT_NE(f.worst_total, nullptr);

  // The client reached the added node through the nodes' newer lists.
  const Ring final_ring({members_[1].address, members_[2].address, members_[3].address});
  const bool node4_owns_keys = std::any_of(keys_.begin(), keys_.end(), [&](const auto& k) {
    return final_ring.Owner(k) == members_[3].address;
  });
  if (node4_owns_keys) {
    const std::optional<std::string> page = AdminGet(members_[3].node.admin, "/metrics");
    ASSERT_TRUE(page.has_value());
    EXPECT_GT(MetricSum(*page, "limiter_decisions_total"), 0)
        << "the client never reached the added node4";
  }

  const int64_t admitted = static_cast<int64_t>(f.worst_total->admitted.size());
  std::printf(
      "rolling restart (SIGTERM, hand-off): worst key admitted %lld of bound %.1f over "
      "%.1f s; 3 restarts, 1 added, 1 removed\n",
      static_cast<long long>(admitted), f.worst_total_bound, f.worst_total_seconds);
  std::printf("  test took %.1f s\n", Seconds(NowUs() - t0));
  RecordProperty("worst_key_admitted", std::to_string(admitted));
  RecordProperty("worst_key_bound", std::to_string(f.worst_total_bound));
  RecordProperty("worst_interval_admitted", std::to_string(f.worst_window.admitted));
  RecordProperty("worst_interval_allowed", std::to_string(f.worst_window.allowed));
}

// The two cases without a hand-off: 3 restarts, each worth at most one burst per key.
void RollingRestart::RunWithoutHandoff(Stop how, const char* label, const char* promise) {
  const int64_t t0 = NowUs();
  ASSERT_NO_FATAL_FAILURE(StartClusterAndLoad());
  ASSERT_NO_FATAL_FAILURE(RestartEach(how));
  PrintHandoff();
  constexpr int kRestarts = 3;
  const Figures f = StopLoadAndCheck(kBurst * kRestarts);
  ASSERT_NE(f.worst_total, nullptr);
  const int64_t admitted = static_cast<int64_t>(f.worst_total->admitted.size());
  std::printf(
      "rolling restart (%s): worst key admitted %lld of bound %.1f over %.1f s "
      "(%+.0f: %s allows +%lld); 3 restarts\n",
      label, static_cast<long long>(admitted), f.worst_total_bound, f.worst_total_seconds,
      static_cast<double>(admitted) - f.worst_total_bound, promise,
      static_cast<long long>(kBurst * kRestarts));
  std::printf("  test took %.1f s\n", Seconds(NowUs() - t0));
  RecordProperty("worst_key_admitted", std::to_string(admitted));
  RecordProperty("worst_key_bound", std::to_string(f.worst_total_bound));
}

// A scale-in by two at once (podManagementPolicy: Parallel, or two nodes stopped together in
// compose): each leaver announces its own leave, the others apply both, and neither leaver is
// put back. A key that moves twice in a receiver's view (first leaver -> second -> receiver)
// can be served fresh between the second's `done` and the first's batch, so the bound
// asserted is the crash promise's one extra burst; the figure is printed.
TEST_F(RollingRestart, TwoNodesLeavingAtOnceBothLeaveAndTheRestServeTheirKeys) {
  ASSERT_NO_FATAL_FAILURE(StartClusterAndLoad(4));
  const int64_t t0 = NowUs();
  members_[0].node.process->Signal(SIGTERM);
  members_[1].node.process->Signal(SIGTERM);
  for (int i = 0; i < 2; ++i) {
    const std::optional<int> status = members_[i].node.process->Wait(30'000);
    ASSERT_TRUE(status.has_value()) << members_[i].name << " did not exit";
    EXPECT_EQ(*status, 0) << members_[i].name;
    members_[i].node = RunningNode{};
  }
  const int64_t gone = NowUs();
  std::printf("  node1, node2: SIGTERM at once, both exited in %.2f s\n", Seconds(gone - t0));
  // The two left adopt the list without both leavers, and wait for no key any more.
  const auto settled = [&](const Member& m) {
    const std::optional<std::string> page = AdminGet(m.node.admin, "/metrics");
    return page && MetricSum(*page, "limiter_membership_members") == 2 &&
           MetricSum(*page, "limiter_handoff_waiting_slots") == 0;
  };
  testing::WaitUntil([&] { return settled(members_[2]) && settled(members_[3]); }, 60s);
  WaitDrained(gone, "node1 and node2 left");
  PrintHandoff();
  for (int i = 2; i < 4; ++i) {
    const std::optional<std::string> page = AdminGet(members_[i].node.admin, "/metrics");
    ASSERT_TRUE(page.has_value());
    EXPECT_EQ(MetricSum(*page, "limiter_membership_members"), 2)
        << members_[i].name << " lists a node that left";
    EXPECT_EQ(MetricSum(*page, "limiter_handoff_waits_expired_total"), 0) << members_[i].name;
    EXPECT_EQ(MetricSum(*page, "limiter_handoff_waiting_slots"), 0) << members_[i].name;
  }
  const Figures f = StopLoadAndCheck(kBurst);
  ASSERT_NE(f.worst_total, nullptr);
  const int64_t admitted = static_cast<int64_t>(f.worst_total->admitted.size());
  std::printf(
      "scale-in by two at once (SIGTERM, hand-off): worst key admitted %lld of bound "
      "%.1f over %.1f s (%+.1f; one burst, +%lld, allowed)\n",
      static_cast<long long>(admitted), f.worst_total_bound, f.worst_total_seconds,
      static_cast<double>(admitted) - f.worst_total_bound, static_cast<long long>(kBurst));
  RecordProperty("worst_key_admitted", std::to_string(admitted));
  RecordProperty("worst_key_bound", std::to_string(f.worst_total_bound));
}

TEST_F(RollingRestart, KillNineCostsAtMostOneBurstPerCrash) {
  RunWithoutHandoff(Stop::kKill, "kill -9", "the one-burst-per-crash promise");
}

TEST_F(RollingRestart, SigtermWithoutHandoffCostsAtMostOneBurstPerRestart) {
  extra_args_ = {"--handoff-deadline-ms", "0"};
  RunWithoutHandoff(Stop::kTerm, "SIGTERM, hand-off off", "the crash promise");
}

}  // namespace
}  // namespace limiter
