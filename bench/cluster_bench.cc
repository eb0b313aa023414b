#include "bench/cluster_bench.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <thread>

#include "bench/cluster_run.h"
#include "bench/cluster_workload.h"
#include "bench/fleet_report.h"
#include "bench/node_load.h"
#include "bench/redis_load.h"
#include "bench/report_chart.h"
#include "common/histogram.h"
#include "common/policy_file.h"
#include "protocol/node_connection.h"

namespace limiter::bench {
namespace {

using Json = nlohmann::json;

struct RedisRow {
  double offered_rps = 0;
  double achieved_rps = 0;
  uint64_t p99_us = 0;
  uint64_t errors = 0;
};

// The same arrival rate, one EVALSHA (a Lua token bucket with the api_key numbers) per
// request, over 4 connections with their own threads, against a local redis-server.
Result<RedisRow> RunRedis(const Scenario& s, const ClusterBenchOptions& o, const Policy& api_key) {
  Result<std::unique_ptr<RedisServer>> server = RedisServer::Start(o.redis_server);
  if (!server) return Error{"redis: " + server.error()};
  Result<std::string> sha = (*server)->LoadScript();
  if (!sha) return Error{"redis: " + sha.error()};
  constexpr int kConnections = 4;
  std::vector<std::unique_ptr<RedisChannel>> channels;
  std::vector<LoadChannel*> raw;
  for (int i = 0; i < kConnections; ++i) {
    Result<std::unique_ptr<RedisChannel>> c =
        RedisChannel::Connect(**server, *sha, api_key.rate, "api_key:");
    if (!c) return Error{"redis: " + c.error()};
    raw.push_back(c->get());
    channels.push_back(std::move(c).value());
  }
  LoadShape shape;
  shape.batch = 1;
  shape.keys = static_cast<uint64_t>(s.keys);
  shape.duration_s = o.duration_s;
  shape.rate = s.rate;
  shape.seed = o.seed;
  Result<LoadResult> load = RunLoad(raw, shape);
  if (!load) return Error{"redis: " + load.error()};
  RedisRow row;
  row.offered_rps = s.rate;
  row.achieved_rps = load->checks_per_s();
  row.p99_us = load->latency_us.Quantile(0.99);
  row.errors = load->counts.errors;
  return row;
}

std::string Fmt(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

// Writes the report of `run` (one part or many merged): the Markdown to `out`, and the JSON
// and the report folder where asked.
Status WriteReport(const RunTotals& run, const PolicySet& policies, const std::string& json_file,
                   const std::string& report_dir, std::ostream& out, Json* extra = nullptr) {
  std::optional<Scenario> scenario = FindScenario(run.scenario);
  if (!scenario) return Error{"unknown scenario '" + run.scenario + "'"};
  const Workload workload(*scenario);
  std::string md;
  Result<Json> built = BuildReport(run, policies, workload, &md);
  if (!built) return built.status();
  Json& report = *built;
  if (extra) report.update(*extra);
  out << '\n' << md;
  if (!json_file.empty()) {
    std::ofstream f(json_file);
    f << report.dump(2) << '\n';
    if (!f) return Error{"cannot write " + json_file};
  }
  if (!report_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(report_dir, ec);
    if (ec) return Error{"cannot create " + report_dir + ": " + ec.message()};
    std::ofstream f(report_dir + "/report.md");
    f << md;
    if (!f) return Error{"cannot write " + report_dir + "/report.md"};
    if (Status s = WriteChart(report_dir, ChartRowsOf(run),
                              "limiter-bench cluster " + run.scenario + ": throughput and p99");
        !s.ok()) {
      return s;
    }
    out << "report: " << report_dir << "/report.md, chart.png\n";
  }
  return Status::Ok();
}

// Each node's CPU and store ops over a run (local nodes: CPU from /proc; all: STATS).
class NodeMeter {
 public:
  NodeMeter(const std::vector<std::string>& members, const std::vector<LocalNode>& local,
            const NodeAccess& access)
      : members_(members), local_(local), access_(access) {
    for (size_t i = 0; i < members.size(); ++i) {
      cpu_.push_back(i < local.size() ? CpuSeconds(local[i].process->pid()) : std::nullopt);
      stats_.push_back(Read(i));
    }
    start_ = std::chrono::steady_clock::now();
  }

  std::vector<NodeUsage> Usage() const {
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::vector<NodeUsage> out;
    for (size_t i = 0; i < members_.size(); ++i) {
      NodeUsage u;
      u.address = members_[i];
      u.wall_s = wall;
      if (i < local_.size() && cpu_[i]) {
        if (const std::optional<double> after = CpuSeconds(local_[i].process->pid())) {
          u.cpu_s = *after - *cpu_[i];
        }
      }
      const std::optional<NodeStats> now = Read(i);
      if (now) u.rss_bytes = now->resident_bytes;
      u.frames = now && stats_[i] ? now->frames - stats_[i]->frames : -1;
      u.store_ops = now && stats_[i] ? now->store_ops - stats_[i]->store_ops : -1;
      out.push_back(u);
    }
    return out;
  }

 private:
  std::optional<NodeStats> Read(size_t i) const {
    Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(members_[i], 5000, access_);
    if (!c) return std::nullopt;
    Result<NodeStats> stats = ReadNodeStats(**c);
    if (!stats) return std::nullopt;
    return *stats;
  }

  const std::vector<std::string>& members_;
  const std::vector<LocalNode>& local_;
  const NodeAccess& access_;
  std::vector<std::optional<double>> cpu_;
  std::vector<std::optional<NodeStats>> stats_;
  std::chrono::steady_clock::time_point start_;
};

// Whether a run at its rate met the bar: p99 at most 1 ms and 99.9% of offered achieved.
bool Passes(const RunTotals& r) {
  const double offered = static_cast<double>(r.issued) / r.duration_s;
  const double achieved = static_cast<double>(r.decided) / std::max(r.duration_s, r.decided_span_s);
  return r.latency.Quantile(0.99) <= 1000 && offered > 0 && achieved >= 0.999 * offered;
}

}  // namespace

std::optional<std::pair<int, int>> ParsePart(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return std::nullopt;
  try {
    size_t used = 0;
    const int i = std::stoi(text.substr(0, slash), &used);
    if (used != slash) return std::nullopt;
    const std::string rest = text.substr(slash + 1);
    const int n = std::stoi(rest, &used);
    if (used != rest.size() || n < 1 || i < 0 || i >= n) return std::nullopt;
    return std::make_pair(i, n);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

int RunClusterBench(const ClusterBenchOptions& o, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& why, int code = 1) {
    err << "limiter-bench cluster: " << why << '\n';
    return code;
  };
  Result<Scenario> resolved = ResolveScenario(o.scenario, o.rate, o.gateways, o.spread);
  if (!resolved) return fail(resolved.error(), 2);
  const Scenario& scenario = *resolved;
  if (o.parts < 1 || o.part < 0 || o.part >= o.parts) {
    return fail("--part: want I/N with 0 <= I < N", 2);
  }
  if (o.parts > 1 && o.json_file.empty()) {
    return fail(
        "--part writes a partial report: give --json FILE (merge them with "
        "limiter-bench merge)",
        2);
  }
  if (o.parts > 1 && (o.vs_redis || o.find_max)) {
    return fail(
        "--part runs one rate of one share of the gateways: not with --vs-redis or "
        "--find-max",
        2);
  }
  Result<PolicySet> policies = LoadPolicyFile(o.policies);
  if (!policies) return fail(policies.error());
  for (const char* name : {"api_key", "login", "tenant_daily"}) {
    if (!policies->Find(name)) return fail(o.policies + " has no policy '" + name + "'", 2);
  }
  if (!o.report_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.report_dir, ec);
    if (ec) return fail("cannot create " + o.report_dir + ": " + ec.message());
  }
  const Workload workload(scenario);

  // The cluster.
  std::vector<LocalNode> local;
  std::vector<std::string> members = o.cluster;
  auto start_local = [&]() -> Status {
    LocalNodeOptions node;
    node.program = o.limiterd.empty() ? DefaultLimiterdPath() : o.limiterd;
    node.policies = o.policies;
    node.threads = o.node_threads;
    local.clear();
    Result<std::vector<LocalNode>> started = StartLocalCluster(o.nodes, node);
    if (!started) return started.status();
    local = std::move(started).value();
    members.clear();
    for (const LocalNode& n : local) members.push_back(n.address);
    return Status::Ok();
  };
  if (members.empty()) {
    if (Status s = start_local(); !s.ok()) return fail(s.error());
  }

  // --find-max: the rate steps up by a quarter from --rate (or 10,000/s) until a run misses
  // the bar; each step on a fresh local cluster (or the same remote one).
  if (o.find_max) {
    double rate = o.rate > 0 ? o.rate : 10'000;
    double best = 0;
    Json steps = Json::array();
    for (int step = 0; step < 40; ++step) {
      if (step > 0 && o.cluster.empty()) {
        if (Status s = start_local(); !s.ok()) return fail(s.error());
      }
      ClusterRunSpec spec{scenario, 0, 1};
      spec.scenario.rate = rate;
      out << Fmt("--find-max: %.0f requests/s\n", rate) << std::flush;
      Result<RunTotals> run = RunClusterOnce(spec, o, *policies, workload, members, out);
      const bool passed = run.ok() && Passes(*run);
      Json row = {{"rate", rate}, {"passed", passed}};
      if (run.ok()) {
        const double offered = static_cast<double>(run->issued) / run->duration_s;
        row["p99_us"] = run->latency.Quantile(0.99);
        row["achieved_ratio"] = offered > 0
                                    ? static_cast<double>(run->decided) /
                                          std::max(run->duration_s, run->decided_span_s) / offered
                                    : 0;
        int64_t lag = 0;
        for (size_t i = static_cast<size_t>(o.warmup_s); i < run->seconds.size(); ++i) {
          lag = std::max(lag, run->seconds[i].lag_us);
        }
        row["loop_lag_max_us"] = lag;
        out << Fmt("--find-max: %.0f/s: p99 %" PRIu64 " us, achieved %.3f%%, loop lag %" PRId64
                   " us: %s\n",
                   rate, row["p99_us"].get<uint64_t>(), 100 * row["achieved_ratio"].get<double>(),
                   lag, passed ? "passes" : "misses")
            << std::flush;
      } else {
        row["error"] = run.error();
        out << "--find-max: " << run.error() << "\n";
      }
      steps.push_back(row);
      if (!passed) break;
      best = rate;
      rate *= 1.25;
    }
    out << Fmt("\nhighest rate with p99 <= 1 ms and >= 99.9%% achieved: %.0f requests/s\n", best);
    if (!o.json_file.empty()) {
      std::ofstream f(o.json_file);
      f << Json{{"scenario", o.scenario}, {"highest_passing_rps", best}, {"steps", steps}}.dump(2)
        << '\n';
      if (!f) return fail("cannot write " + o.json_file);
    }
    return 0;
  }

  out << "limiter-bench cluster: scenario " << o.scenario << ", " << scenario.rate
      << " requests/s for " << o.duration_s << " s, " << scenario.gateways << " gateways";
  if (o.parts > 1) out << " (part " << o.part << " of " << o.parts << ")";
  out << ", " << members.size() << (local.empty() ? " nodes at " : " local nodes at ");
  for (size_t i = 0; i < members.size(); ++i) out << (i ? "," : "") << members[i];
  out << "\n" << std::flush;

  NodeMeter meter(members, local, o.access);
  Result<RunTotals> run = RunClusterOnce(ClusterRunSpec{scenario, o.part, o.parts}, o, *policies,
                                         workload, members, out);
  if (!run) return fail(run.error());
  run->node_usage = meter.Usage();
  if (o.parts > 1) {
    if (Status s = WritePartial(*run, o.json_file); !s.ok()) return fail(s.error());
    out << Fmt("part %d of %d: %" PRIu64 " decisions; partial report %s (and .records)\n", o.part,
               o.parts, run->decided, o.json_file.c_str());
    return 0;
  }
  Json extra;
  if (o.vs_redis) {
    out << "the same arrivals against redis-server, one EVALSHA per request...\n" << std::flush;
    Result<RedisRow> redis = RunRedis(scenario, o, *policies->Find("api_key"));
    if (!redis) return fail(redis.error());
    const uint64_t p99 = run->latency.Quantile(0.99);
    extra["redis"] = {
        {"offered_rps", redis->offered_rps},
        {"achieved_rps", redis->achieved_rps},
        {"p99_us", redis->p99_us},
        {"errors", redis->errors},
        {"p99_ratio",
         redis->p99_us > 0 ? static_cast<double>(p99) / static_cast<double>(redis->p99_us) : 0}};
    out << Fmt("\nlimiter vs redis + Lua at %.0f requests/s: p99 %" PRIu64 " us vs %" PRIu64
               " us; redis achieved %.0f/s\n",
               scenario.rate, p99, redis->p99_us, redis->achieved_rps);
  }
  if (Status s = WriteReport(*run, *policies, o.json_file, o.report_dir, out,
                             extra.is_null() ? nullptr : &extra);
      !s.ok()) {
    return fail(s.error());
  }
  return 0;
}

int RunMerge(const MergeOptions& o, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& why, int code = 1) {
    err << "limiter-bench merge: " << why << '\n';
    return code;
  };
  if (o.parts.empty()) return fail("no partial reports given", 2);
  RunTotals total;
  for (const std::string& path : o.parts) {
    Result<RunTotals> part = ReadPartial(path);
    if (!part) return fail(part.error());
    if (!total.parts_included.empty()) {
      if (SettingsJson(*part) != SettingsJson(total)) {
        return fail(path +
                    " is a part of another run (scenario, seed, rate, gateways, nodes, "
                    "duration, warm-up, spread, loops, deadline and parts must all match)");
      }
      for (int i : part->parts_included) {
        if (std::find(total.parts_included.begin(), total.parts_included.end(), i) !=
            total.parts_included.end()) {
          return fail(path + ": part " + std::to_string(i) + " is given twice");
        }
      }
    }
    if (Status s = MergeInto(total, std::move(part).value()); !s.ok()) {
      return fail(path + ": " + s.error());
    }
  }
  if (static_cast<int>(total.parts_included.size()) != total.parts) {
    err << "limiter-bench merge: warning: " << total.parts_included.size() << " of " << total.parts
        << " parts given; the report covers those gateways only\n";
  }
  Result<PolicySet> policies = LoadPolicyFile(o.policies);
  if (!policies) return fail(policies.error());
  for (const char* name : {"api_key", "login", "tenant_daily"}) {
    if (!policies->Find(name)) return fail(o.policies + " has no policy '" + name + "'", 2);
  }
  if (Status s = WriteReport(total, *policies, o.json_file, o.report_dir, out); !s.ok()) {
    return fail(s.error());
  }
  return 0;
}

}  // namespace limiter::bench
