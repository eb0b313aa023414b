// NodeMetrics alone, with no Node: workers' counters and the parts' figures read once
// (Collect), summed over the workers, and rendered two ways that agree: STATS' name/value pairs
// and the Prometheus text, in which every family has its HELP and TYPE and label values are
// escaped.
#include "server/node_metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "protocol/key_id.h"
#include "protocol/rules.h"
#include "protocol/wire.h"
#include "server/handoff.h"
#include "server/ownership.h"
#include "server/policy_table.h"
#include "server/store.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

const char* kPolicies = R"(
policies:
  - {name: api, algorithm: gcra, limit: 100, window: 1s, class: contract}
  - {name: login, algorithm: token_bucket, limit: 10, window: 1m, class: security}
)";

// The op types by their wire value (wire::OpType).
constexpr size_t kCheck = 0, kLease = 1, kStats = 4, kHandoff = 8;

// The parts NodeMetrics reads, made by hand, and the workers' counters.
class Metrics {
 public:
  explicit Metrics(const PolicySet& policies, int64_t clock_ms = 50'000)
      : clock_(clock_ms),
        table_(policies, false, false),
        store_(policies, {1000, 8}),
        ownership_(clock_, {"a:1", 10'000, false}, {"a:1", "b:1"}, 3),
        handoff_(table_, clock_, store_, nullptr, nullptr, ownership_, {"a:1", 1u << 20, 10'000},
                 [](std::chrono::steady_clock::time_point) {}),
        metrics_({table_, clock_, store_, ownership_, handoff_, nullptr, nullptr,
                  [this](const std::function<void(const WorkerCounters&)>& visit) {
                    ++collects_;
                    for (const auto& w : workers_) visit(*w);
                  }}) {}

  WorkerCounters& AddWorker() {
    workers_.push_back(std::make_unique<WorkerCounters>(table_.size()));
    return *workers_.back();
  }
  // Makes a live key of `policy` (one charge).
  void AddKey(int policy, const std::string& key) {
    const Policy& p = table_.at(policy);
    const KeyId id = protocol::LimitId(p, key, "");
    const size_t stripe = store_.StripeOf(id);
    Store::StripeLock lock(store_, {&stripe, 1});
    ASSERT_EQ(store_.Find(policy, id), nullptr);
    ASSERT_TRUE(store_.TryReserve(policy, store_.NewKeyUnits(policy)));
    KeyLimiter limiter(p.algorithm);
    ASSERT_TRUE(limiter.Decide(p.rate, clock_.NowMs(), 1).allowed);
    store_.Pack(policy, std::move(limiter), store_.Insert(policy, id));
  }
  // A hand-off batch from `from`, which the Handoff refuses whole when `from` is no member.
  void ReceiveFrom(const std::string& from) {
    flatbuffers::FlatBufferBuilder fbb;
    const auto handoff = wire::CreateHandoff(fbb, fbb.CreateString(from), 4, table_.digest(),
                                             KeyIdSeedDigest(), clock_.NowMs(), 0, 0, true);
    const std::span<const uint8_t> body =
        FinishPeerRequest(fbb, wire::OpType::Handoff, wire::CreatePeer(fbb, 0, 0, handoff));
    std::vector<uint64_t> aligned;
    const wire::Request* request = VerifiedRequest(body, aligned);
    ASSERT_NE(request, nullptr);
    handoff_.Receive(*request->peer()->handoff(), from, clock_.NowMs());
  }

  ManualClock clock_;
  PolicyTable table_;
  Store store_;
  Ownership ownership_;
  Handoff handoff_;
  std::vector<std::unique_ptr<WorkerCounters>> workers_;
  int collects_ = 0;
  NodeMetrics metrics_;
};

// A sample line: `name{labels} value` or `name value`.
struct Sample {
  std::string name;    // without labels
  std::string series;  // with them
  std::string value;
};

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<Sample> Samples(const std::string& text) {
  std::vector<Sample> samples;
  for (const std::string& line : Lines(text)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) {
      ADD_FAILURE() << "a sample line without a value: " << line;
      continue;
    }
    Sample s;
    s.series = line.substr(0, space);
    s.value = line.substr(space + 1);
    s.name = s.series.substr(0, s.series.find('{'));
    samples.push_back(std::move(s));
  }
  return samples;
}

std::map<std::string, std::string> SeriesValues(const std::string& text) {
  std::map<std::string, std::string> out;
  for (const Sample& s : Samples(text)) {
    EXPECT_TRUE(out.emplace(s.series, s.value).second) << "a series given twice: " << s.series;
  }
  return out;
}

bool HasStat(const NodeMetrics::Snapshot& s, const std::string& name) {
  for (const auto& [n, v] : s.values) {
    if (n == name) return true;
  }
  return false;
}

TEST(NodeMetrics, TheWorkersCountersAreSummed) {
  const PolicySet policies = testing::Policies(kPolicies, "metrics.yaml");
  Metrics m(policies);
  WorkerCounters& one = m.AddWorker();
  WorkerCounters& two = m.AddWorker();
  one.ops[kCheck][kAllowed].Add(3);
  two.ops[kCheck][kAllowed].Add(5);
  one.ops[kCheck][kDenied].Add(2);
  two.ops[kStats][kAllowed].Add(1);
  one.ops[kHandoff][kError].Add(4);
  two.ops[kOpTypes][kError].Add(1);  // an op of a type this node does not know
  one.decisions[0][0].Add(4);
  two.decisions[0][0].Add(6);
  two.decisions[1][1].Add(7);
  one.bad_frames[static_cast<size_t>(BadFrame::kInvalid)].Add(1);
  two.bad_frames[static_cast<size_t>(BadFrame::kInvalid)].Add(2);
  two.bad_frames[static_cast<size_t>(BadFrame::kTooLarge)].Add(1);
  one.refusals.Add(2);
  two.refusals.Add(3);
  one.frames.Add(10);
  two.frames.Add(20);
  one.connections_opened.Add(5);
  two.connections_opened.Add(2);
  one.connections_closed.Add(4);
  one.moving.Add(1);
  two.moving.Add(1);
  one.frame_latency_us.Record(3);
  two.frame_latency_us.Record(40);

  const NodeMetrics::Snapshot s = m.metrics_.Collect();
  EXPECT_EQ(s.ops[kCheck][kAllowed], 8u);
  EXPECT_EQ(s.ops[kCheck][kDenied], 2u);
  EXPECT_EQ(s.decisions.size(), 2u);
  EXPECT_EQ(s.decisions[0][0], 10u);
  EXPECT_EQ(s.decisions[1][1], 7u);
  EXPECT_EQ(s.frame_latency.count, 2u);
  EXPECT_EQ(s.frame_latency.sum, 43u);
  EXPECT_EQ(s.Get("ops_check_allowed"), 8);
  EXPECT_EQ(s.Get("ops_check_denied"), 2);
  EXPECT_EQ(s.Get("ops_stats_ok"), 1);  // an op that decides nothing is ok, not allowed
  EXPECT_EQ(s.Get("ops_handoff_error"), 4);
  EXPECT_EQ(s.Get("ops_unknown_error"), 1);
  EXPECT_FALSE(HasStat(s, "ops_lease_allowed"));  // nothing counted: not listed
  EXPECT_FALSE(HasStat(s, "ops_stats_allowed"));
  EXPECT_EQ(s.Get("bad_frames_invalid"), 3);
  EXPECT_EQ(s.Get("bad_frames_too_large"), 1);
  EXPECT_EQ(s.Get("bad_frames"), 4);
  EXPECT_EQ(s.Get("refusals"), 5);
  EXPECT_EQ(s.Get("frames"), 30);
  EXPECT_EQ(s.Get("connections_total"), 7);
  EXPECT_EQ(s.Get("connections_open"), 3);
  EXPECT_EQ(s.Get("handoff_moving"), 2);
  // With no database and no region, neither kind of figure is listed.
  EXPECT_FALSE(HasStat(s, "durable_writes"));
  EXPECT_FALSE(HasStat(s, "regions_keys"));
}

TEST(NodeMetrics, ThePartsFiguresAreRead) {
  const PolicySet policies = testing::Policies(kPolicies, "metrics.yaml");
  Metrics m(policies);
  m.AddKey(0, "x");
  m.AddKey(0, "y");
  m.AddKey(1, "z");
  // b leaves: its slots wait to be handed here. c joins: some of this node's go to c (a job).
  ASSERT_TRUE(m.ownership_.SetMembers({"a:1"}, 4).ok());
  ASSERT_TRUE(m.ownership_.MemberJoins("c:1", 5).ok());
  m.ReceiveFrom("z:9");  // a stranger's batch: refused whole
  m.clock_.Advance(1'500);

  const NodeMetrics::Snapshot s = m.metrics_.Collect();
  EXPECT_EQ(s.Get("keys"), 3);
  EXPECT_EQ(s.Get("keys.api"), 2);
  EXPECT_EQ(s.Get("keys.login"), 1);
  EXPECT_EQ(s.Get("key_units"), 3);
  EXPECT_EQ(s.Get("max_keys"), 1000);
  EXPECT_EQ(s.Get("key_units.api"), m.store_.usage(0).units);
  EXPECT_EQ(s.Get("key_reserve.api"), m.store_.usage(0).budget.reserve);
  EXPECT_EQ(s.Get("handoff_waiting_slots"), m.ownership_.waiting_slots());
  EXPECT_GT(s.Get("handoff_waiting_slots"), 0);
  EXPECT_EQ(s.Get("handoff_jobs"), 1);
  EXPECT_EQ(s.Get("handoff_batches_refused"), 1);
  EXPECT_EQ(s.Get("membership_generation"), 5);
  EXPECT_EQ(s.Get("membership_members"), 2);  // a and c
  EXPECT_EQ(s.Get("uptime_ms"), 1'500);       // the node's clock, from the metrics' start
  EXPECT_GT(s.Get("resident_bytes"), 0);
}

TEST(NodeMetrics, StatsAndTheRenderedTextAgree) {
  const PolicySet policies = testing::Policies(kPolicies, "metrics.yaml");
  Metrics m(policies);
  WorkerCounters& one = m.AddWorker();
  WorkerCounters& two = m.AddWorker();
  one.ops[kCheck][kAllowed].Add(11);
  two.ops[kCheck][kDenied].Add(4);
  two.ops[kLease][kError].Add(2);
  one.ops[kStats][kAllowed].Add(6);
  one.decisions[0][0].Add(9);
  two.decisions[0][1].Add(4);
  two.decisions[1][0].Add(2);
  one.bad_frames[static_cast<size_t>(BadFrame::kTruncated)].Add(3);
  two.auth_failures.Add(2);
  one.peer_refusals.Add(1);
  two.split_refusals.Add(5);
  one.connections_opened.Add(3);
  m.AddKey(0, "x");
  ASSERT_TRUE(m.ownership_.SetMembers({"a:1"}, 4).ok());
  m.ReceiveFrom("z:9");

  const std::vector<std::pair<std::string, int64_t>> stats = m.metrics_.Stats();
  const std::map<std::string, std::string> text = SeriesValues(m.metrics_.Render());
  const auto stat = [&](const std::string& name) -> int64_t {
    for (const auto& [n, v] : stats) {
      if (n == name) return v;
    }
    return 0;  // STATS lists an op outcome only once counted
  };
  const auto rendered = [&](const std::string& series) -> std::string {
    const auto it = text.find(series);
    if (it == text.end()) {
      ADD_FAILURE() << "not rendered: " << series;
      return "";
    }
    return it->second;
  };
  // Every op type and outcome: from the same counts as STATS' ops_* names.
  for (int t = 0; t <= kOpTypes; ++t) {
    const std::string op(OpTypeName(t));
    const bool decides = t <= 1;
    for (const char* outcome : {"allowed", "denied", "error"}) {
      const std::string o = !decides && std::string(outcome) == "allowed" ? "ok" : outcome;
      std::string series = "limiter_ops_total{op=\"";
      series.append(op).append("\",outcome=\"").append(o).append("\"}");
      if (!decides && std::string(outcome) == "denied") {
        EXPECT_EQ(text.count(series), 0u) << "an op that decides nothing has no denials";
        continue;
      }
      std::string name = "ops_";
      name.append(op).append("_").append(o);
      EXPECT_EQ(rendered(series), std::to_string(stat(name))) << series;
    }
  }
  EXPECT_EQ(rendered("limiter_ops_total{op=\"check\",outcome=\"allowed\"}"), "11");
  EXPECT_EQ(rendered("limiter_ops_total{op=\"stats\",outcome=\"ok\"}"), "6");
  EXPECT_EQ(rendered("limiter_decisions_total{policy=\"api\",result=\"allowed\"}"), "9");
  EXPECT_EQ(rendered("limiter_decisions_total{policy=\"api\",result=\"denied\"}"), "4");
  EXPECT_EQ(rendered("limiter_decisions_total{policy=\"login\",result=\"allowed\"}"), "2");
  EXPECT_EQ(rendered("limiter_decisions_total{policy=\"login\",result=\"denied\"}"), "0");

  // The plain figures: the Prometheus sample and its STATS name.
  const std::pair<const char*, const char*> same[] = {
      {"limiter_keys", "keys"},
      {"limiter_max_keys", "max_keys"},
      {"limiter_key_units", "key_units"},
      {"limiter_key_units_committed", "key_units_committed"},
      {"limiter_evictions_total", "evictions"},
      {"limiter_reclaim_passes_total", "reclaim_passes"},
      {"limiter_refusals_total", "refusals"},
      {"limiter_auth_failures_total", "auth_failures"},
      {"limiter_peer_ops_refused_total", "peer_refusals"},
      {"limiter_sessions_revoked_total", "sessions_revoked"},
      {"limiter_frames_refused_total", "frames_refused"},
      {"limiter_split_refusals_total", "split_refusals"},
      {"limiter_split_changed_total", "split_changed"},
      {"limiter_handoff_moving_total", "handoff_moving"},
      {"limiter_handoff_jobs_total", "handoff_jobs"},
      {"limiter_handoff_keys_sent_total", "handoff_keys_sent"},
      {"limiter_handoff_keys_lost_total", "handoff_keys_lost"},
      {"limiter_handoff_keys_received_total", "handoff_keys_received"},
      {"limiter_handoff_keys_refused_total", "handoff_keys_refused"},
      {"limiter_handoff_batches_refused_total", "handoff_batches_refused"},
      {"limiter_handoff_waits_expired_total", "handoff_waits_expired"},
      {"limiter_handoff_waiting_slots", "handoff_waiting_slots"},
      {"limiter_membership_generation", "membership_generation"},
      {"limiter_membership_members", "membership_members"},
      {"limiter_bad_frames_total{reason=\"truncated\"}", "bad_frames_truncated"},
      {"limiter_bad_frames_total{reason=\"invalid\"}", "bad_frames_invalid"},
      {"limiter_connections", "connections_open"},
      {"limiter_connections_total", "connections_total"},
      {"limiter_policy_keys{policy=\"api\"}", "keys.api"},
      {"limiter_policy_key_units{policy=\"api\"}", "key_units.api"},
      {"limiter_policy_key_reserve{policy=\"login\"}", "key_reserve.login"},
      {"limiter_policy_key_cap{policy=\"login\"}", "key_cap.login"},
      {"limiter_policy_key_refusals_total{policy=\"api\"}", "key_refusals.api"},
  };
  for (const auto& [series, name] : same) {
    EXPECT_EQ(rendered(series), std::to_string(stat(name))) << series;
  }
  // Some of them are not zero, so that the comparison means something.
  EXPECT_EQ(rendered("limiter_keys"), "1");
  EXPECT_EQ(rendered("limiter_auth_failures_total"), "2");
  EXPECT_EQ(rendered("limiter_handoff_batches_refused_total"), "1");
  EXPECT_NE(rendered("limiter_handoff_waiting_slots"), "0");
  EXPECT_EQ(rendered("limiter_membership_generation"), "4");
}

TEST(NodeMetrics, EachRenderingReadsTheCountersOnce) {
  const PolicySet policies = testing::Policies(kPolicies, "metrics.yaml");
  Metrics m(policies);
  m.AddWorker().ops[kCheck][kAllowed].Add(1);
  m.collects_ = 0;
  (void)m.metrics_.Render();
  EXPECT_EQ(m.collects_, 1);
  (void)m.metrics_.Stats();
  EXPECT_EQ(m.collects_, 2);
}

TEST(NodeMetrics, EveryFamilyHasItsHelpAndTypeBeforeItsSamples) {
  const PolicySet policies = testing::Policies(kPolicies, "metrics.yaml");
  Metrics m(policies);
  WorkerCounters& w = m.AddWorker();
  w.ops[kCheck][kAllowed].Add(1);
  w.frame_latency_us.Record(250);
  const std::string text = m.metrics_.Render();
  std::map<std::string, std::string> type_of;
  std::set<std::string> helped;
  std::set<std::string> sampled;
  for (const std::string& line : Lines(text)) {
    ASSERT_FALSE(line.empty()) << "an empty line in the exposition";
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string rest = line.substr(7);
      const std::string name = rest.substr(0, rest.find(' '));
      EXPECT_TRUE(helped.insert(name).second) << "HELP twice: " << name;
      EXPECT_GT(rest.size(), name.size() + 1) << "an empty HELP: " << name;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string rest = line.substr(7);
      const std::string name = rest.substr(0, rest.find(' '));
      const std::string type = rest.substr(name.size() + 1);
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
      EXPECT_TRUE(type_of.emplace(name, type).second) << "TYPE twice: " << name;
      EXPECT_TRUE(helped.count(name)) << "TYPE before HELP: " << name;
      if (type == "counter") {
        EXPECT_TRUE(name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0)
            << "a counter's name ends in _total: " << name;
      }
      continue;
    }
    ASSERT_NE(line[0], '#') << "a comment that is neither HELP nor TYPE: " << line;
  }
  for (const Sample& s : Samples(text)) {
    std::string family = s.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string sfx = suffix;
      if (family.size() > sfx.size() &&
          family.compare(family.size() - sfx.size(), sfx.size(), sfx) == 0 &&
          type_of.count(family.substr(0, family.size() - sfx.size())) &&
          type_of[family.substr(0, family.size() - sfx.size())] == "histogram") {
        family.resize(family.size() - sfx.size());
      }
    }
    EXPECT_TRUE(type_of.count(family)) << "a sample with no TYPE: " << s.series;
    EXPECT_TRUE(helped.count(family)) << "a sample with no HELP: " << s.series;
    sampled.insert(family);
    EXPECT_NE(s.value, "") << s.series;
  }
  // And no family is announced without a sample.
  for (const auto& [name, type] : type_of) EXPECT_TRUE(sampled.count(name)) << name;
  // The histogram's buckets end with +Inf, which counts every frame.
  EXPECT_NE(text.find("limiter_frame_duration_seconds_bucket{le=\"+Inf\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("limiter_frame_duration_seconds_count 1\n"), std::string::npos);
}

TEST(NodeMetrics, APolicyNameWithQuotesIsEscapedInItsLabels) {
  // The policy file allows no such name; the text must stay well-formed whatever the name.
  Policy odd;
  odd.name = "we\"ird\\name\nx";
  odd.rate = Rate(10, 1000, 10);
  Policy plain;
  plain.name = "api";
  plain.rate = Rate(10, 1000, 10);
  const PolicySet policies("odd.yaml", {odd, plain});
  Metrics m(policies);
  m.AddWorker().decisions[0][1].Add(3);
  const std::string text = m.metrics_.Render();
  const std::string escaped = "policy=\"we\\\"ird\\\\name\\nx\"";
  EXPECT_NE(text.find("limiter_decisions_total{" + escaped + ",result=\"denied\"} 3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("limiter_policy_keys{" + escaped + "} 0\n"), std::string::npos);
  EXPECT_EQ(text.find("we\"ird"), std::string::npos) << "a raw quote in a label";
  // Every line is still a comment or a sample: the newline did not break one in two.
  for (const std::string& line : Lines(text)) {
    if (line[0] == '#') continue;
    EXPECT_EQ(line.rfind("limiter_", 0) == 0 || line.rfind("process_", 0) == 0, true) << line;
  }
}

}  // namespace
}  // namespace limiter
