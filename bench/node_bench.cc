#include "bench/node_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <vector>

#include "bench/hiccups.h"
#include "bench/node_load.h"
#include "bench/redis_load.h"
#include "common/policy_file.h"

namespace limiter::bench {
namespace {

// The warm-up that creates every key before the memory reading: frames this large, this many
// in flight.
constexpr int kWarmUpBatch = 1000;
constexpr int kWarmUpDepth = 4;
// A durable node writes what is queued before it exits: minutes, if its committer fell far
// behind.
constexpr int kStopTimeoutMs = 600'000;

struct MemoryReport {
  NodeStats before;
  NodeStats after;
  CheckCounts warm_up;
  std::optional<double> bytes_per_key() const {
    const int64_t keys = after.keys - before.keys;
    if (keys <= 0) return std::nullopt;
    return static_cast<double>(after.resident_bytes - before.resident_bytes) /
           static_cast<double>(keys);
  }
};

// A durable run's side of the report.
struct DurableReport {
  DurabilityMode mode = DurabilityMode::kSync;
  std::string fs;                       // the file system of the data dir
  NodeDurableStats before, after;       // the node's counters before and after the load
  GroupCommitFigures commit;            // over the load
  int64_t rss_end = 0;                  // the node's rss after the load
  double stop_ms = 0;                   // SIGTERM until it exited: what was queued is written
  std::optional<DataDirBytes> stopped;  // the data dir after the node's clean stop
};

struct Report {
  NodeDurability durability;
  std::string policy;  // the policy the checks named
  std::string address;
  std::string node_banner;  // the local node's first line; empty for --server
  MemoryReport memory;
  std::optional<DurableReport> durable;
  std::optional<double> vs_memory;  // checks/s over the memory-only runs' mean, when any ran
  LoadResult node;
  std::optional<LoadResult> redis;
  // A local node's CPU over the load (from /proc), per frame and per check: the costs
  // `limiter-bench sim` models a node with.
  std::optional<double> node_cpu_s;
  double us_per_frame() const {
    const double frames = static_cast<double>(node.counts.checks) / std::max(1, batch);
    return node_cpu_s && frames > 0 ? *node_cpu_s * 1e6 / frames : 0;
  }
  double us_per_check() const {
    return node_cpu_s && node.counts.checks > 0
               ? *node_cpu_s * 1e6 / static_cast<double>(node.counts.checks)
               : 0;
  }
  int batch = 1;
};

// The node's --sync-interval-ms: the flag's, else limiterd's default.
int64_t SyncIntervalMs(const NodeBenchOptions& o) {
  return o.sync_interval_ms > 0 ? o.sync_interval_ms : DurableOptions().interval_ms;
}

std::string Format(const char* format, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

std::string Mib(int64_t bytes) {
  return Format("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

// "N checks: A allowed, D denied, E errors", and the first error's text when there is one.
std::string CountsLine(const CheckCounts& c) {
  std::string line =
      Format("%" PRIu64 " checks: %" PRIu64 " allowed, %" PRIu64 " denied, %" PRIu64 " errors",
             c.checks, c.allowed, c.denied, c.errors);
  if (c.errors > 0) line += " (first: " + c.first_error + ")";
  return line;
}

std::string ResultLine(const char* name, const LoadResult& r) {
  const Histogram::Snapshot& h = r.latency_us;
  std::string line =
      Format("%-6s %12.0f checks/s   p50 %" PRIu64 " us   p99 %" PRIu64 " us   p999 %" PRIu64
             " us   max %" PRIu64 " us",
             name, r.checks_per_s(), h.Quantile(0.50), h.Quantile(0.99), h.Quantile(0.999), h.max);
  if (r.send_lag_us.count > 0) {
    line += Format("\n       sends late against the schedule: p99 %" PRIu64 " us, max %" PRIu64
                   " us (included above)",
                   r.send_lag_us.Quantile(0.99), r.send_lag_us.max);
  }
  return line;
}

void WriteText(const NodeBenchOptions& o, const Report& r, std::ostream& out) {
  const LoadShape& s = o.shape;
  out << "node:   " << r.address << ", policy '" << r.policy << "'";
  if (!r.node_banner.empty()) out << " (started: " << r.node_banner << ")";
  out << '\n';
  if (s.rate > 0) {
    out << Format("load:   open loop, %.0f checks/s over %d connections, %d checks a frame", s.rate,
                  o.connections, s.batch);
  } else {
    out << Format("load:   closed loop, %d connections x %d frames in flight x %d checks a frame",
                  o.connections, s.depth, s.batch);
  }
  out << Format(", %" PRIu64 " keys, %.1f s, seed %" PRIu64 "\n", s.keys, s.duration_s, s.seed);
  // The CPUs this process may run on (taskset); 0 when that cannot be told.
  const int cpus = static_cast<int>(CpusInAffinity().size());
  if (s.rate > 0 && cpus > 0 && o.connections > cpus) {
    // Each open-loop connection is a thread that sleeps until its next send or reply; more
    // of them than CPUs wait for each other, and that wait shows as latency.
    out << Format(
        "note:   %d connection threads share %d CPU%s, so their own wake-ups add to the "
        "latency below; --connections %d keeps them apart\n",
        o.connections, cpus, cpus == 1 ? "" : "s", cpus);
  }

  const MemoryReport& m = r.memory;
  out << "memory: node rss " << Mib(m.after.resident_bytes) << " holding " << m.after.keys
      << " keys; warm-up added " << m.after.keys - m.before.keys << " keys and "
      << Mib(m.after.resident_bytes - m.before.resident_bytes);
  if (auto per_key = m.bytes_per_key()) {
    out << Format(": %.1f bytes/key", *per_key);
  } else {
    out << ": bytes/key n/a (no new keys; were they there already?)";
  }
  out << '\n';
  if (m.warm_up.errors > 0) out << "        warm-up: " << CountsLine(m.warm_up) << '\n';
  if (m.after.evictions > m.before.evictions) {
    out << "        the node evicted " << m.after.evictions - m.before.evictions
        << " keys during the warm-up: bytes/key is overstated\n";
  }

  out << ResultLine("node", r.node) << '\n' << "       " << CountsLine(r.node.counts) << '\n';
  if (r.node_cpu_s) {
    out << Format("cpu:    the node used %.2f CPU s: %.2f us per frame, %.3f us per check\n",
                  *r.node_cpu_s, r.us_per_frame(), r.us_per_check());
  }
  if (r.durable) {
    const DurableReport& d = *r.durable;
    out << "durable: " << DurabilityModeName(d.mode);
    if (d.mode == DurabilityMode::kInterval) {
      out << " every " << SyncIntervalMs(o) << " ms";
    }
    out << ", data dir on " << d.fs << (d.fs == "tmpfs" ? " (an fsync there costs nothing)" : "")
        << Format("; the load queued %" PRId64 " writes in %" PRId64
                  " commits: %.0f commits (fsyncs)/s, %.1f writes a commit\n",
                  d.commit.writes, d.commit.commits, d.commit.commits_per_s,
                  d.commit.writes_per_commit);
    out << Format("         %.0f records/s were written, the committer took %.0f/s off the queue",
                  d.commit.written_per_s, d.commit.taken_per_s);
    if (d.commit.behind()) out << ": it fell behind, the checks/s above is not sustained";
    out << '\n';
    out << "         at the end: " << d.after.keys
        << " records (RocksDB's estimate: overwrites count until compacted), "
        << Mib(d.after.disk_bytes) << " of SST + WAL, node rss " << Mib(d.rss_end);
    if (d.after.pending > 0) out << "; " << d.after.pending << " records still queued";
    if (d.after.errors > 0) out << "; " << d.after.errors << " durable errors";
    out << '\n';
    if (d.stopped) {
      out << Format("         clean stop (SIGTERM) in %.0f ms, then %s of SST + WAL\n", d.stop_ms,
                    Mib(d.stopped->sst_and_wal()).c_str());
    }
  }
  if (r.vs_memory) out << Format("vs memory-only: %.2fx checks/s\n", *r.vs_memory);
  if (r.redis) {
    out << ResultLine("redis", *r.redis) << '\n'
        << "       " << CountsLine(r.redis->counts) << '\n';
    const double redis = r.redis->checks_per_s();
    if (redis > 0)
      out << Format("ratio:  %.2fx (node checks/s / redis checks/s)\n",
                    r.node.checks_per_s() / redis);
  }
}

void AddLoad(nlohmann::json& j, const std::string& prefix, const LoadResult& r) {
  const Histogram::Snapshot& h = r.latency_us;
  j[prefix + "checks"] = r.counts.checks;
  j[prefix + "checks_per_s"] = r.checks_per_s();
  j[prefix + "seconds"] = r.seconds;
  j[prefix + "p50_us"] = h.Quantile(0.50);
  j[prefix + "p99_us"] = h.Quantile(0.99);
  j[prefix + "p999_us"] = h.Quantile(0.999);
  j[prefix + "max_us"] = h.max;
  j[prefix + "allowed"] = r.counts.allowed;
  j[prefix + "denied"] = r.counts.denied;
  j[prefix + "errors"] = r.counts.errors;
  if (r.counts.errors > 0) j[prefix + "first_error"] = r.counts.first_error;
  if (r.send_lag_us.count > 0) {
    j[prefix + "send_lag_p99_us"] = r.send_lag_us.Quantile(0.99);
    j[prefix + "send_lag_max_us"] = r.send_lag_us.max;
  }
}

void WriteJson(const NodeBenchOptions& o, const Report& r, std::ostream& out) {
  const LoadShape& s = o.shape;
  nlohmann::json j;
  j["server"] = r.address;
  j["policy"] = r.policy;
  j["durability"] = NodeDurabilityName(r.durability);
  j["mode"] = s.rate > 0 ? "open" : "closed";
  if (s.rate > 0) j["rate"] = s.rate;
  j["connections"] = o.connections;
  j["depth"] = s.depth;
  j["batch"] = s.batch;
  j["key_space"] = s.keys;
  j["duration_s"] = s.duration_s;
  j["seed"] = s.seed;
  AddLoad(j, "", r.node);
  const MemoryReport& m = r.memory;
  j["node_rss_bytes"] = m.after.resident_bytes;
  j["keys"] = m.after.keys;
  if (auto per_key = m.bytes_per_key()) {
    j["bytes_per_key"] = *per_key;
  } else {
    j["bytes_per_key"] = nullptr;
  }
  j["warmup_errors"] = m.warm_up.errors;
  if (r.node_cpu_s) {
    j["node_cpu_s"] = *r.node_cpu_s;
    j["node_cpu_us_per_frame"] = r.us_per_frame();
    j["node_cpu_us_per_check"] = r.us_per_check();
  }
  j["warmup_evictions"] = m.after.evictions - m.before.evictions;
  if (r.durable) {
    const DurableReport& d = *r.durable;
    if (d.mode == DurabilityMode::kInterval) {
      j["sync_interval_ms"] = SyncIntervalMs(o);
    }
    j["data_dir_fs"] = d.fs;
    j["durable_writes"] = d.commit.writes;
    j["durable_commits"] = d.commit.commits;
    j["durable_commits_per_s"] = d.commit.commits_per_s;
    j["durable_writes_per_commit"] = d.commit.writes_per_commit;
    j["durable_errors"] = d.after.errors;
    j["durable_keys"] = d.after.keys;
    j["durable_disk_bytes"] = d.after.disk_bytes;
    j["durable_pending"] = d.after.pending;
    j["durable_backlog"] = d.commit.backlog;
    j["durable_taken_per_s"] = d.commit.taken_per_s;
    j["durable_behind"] = d.commit.behind();
    j["node_rss_end_bytes"] = d.rss_end;
    if (d.stopped) {
      j["stop_ms"] = d.stop_ms;
      j["durable_disk_bytes_stopped"] = d.stopped->sst_and_wal();
      j["durable_dir_bytes_stopped"] = d.stopped->total();
    }
  }
  if (r.vs_memory) j["vs_memory"] = *r.vs_memory;
  if (r.redis) {
    AddLoad(j, "redis_", *r.redis);
    const double redis = r.redis->checks_per_s();
    j["ratio"] = redis > 0 ? nlohmann::json(r.node.checks_per_s() / redis) : nlohmann::json();
  }
  out << j.dump() << '\n';
}

// Whether `program` (a path, or a name looked up in PATH as execvp does) can be run: checked
// up front, so that a missing redis-server is one error line before the node's run, not after.
bool Runnable(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    const std::string candidate = std::string(dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
  }
  return false;
}

// Connects `connections` channels with `connect`, runs the load over them.
template <class Connect>
Result<LoadResult> RunOver(int connections, const LoadShape& shape, Connect connect) {
  std::vector<std::unique_ptr<LoadChannel>> owned;
  std::vector<LoadChannel*> channels;
  for (int i = 0; i < connections; ++i) {
    auto channel = connect();
    if (!channel) return Error{channel.error()};
    owned.push_back(std::move(channel).value());
    channels.push_back(owned.back().get());
  }
  return RunLoad(channels, shape);
}

Result<MemoryReport> MeasureMemory(const std::string& address, const std::string& policy,
                                   const NodeBenchOptions& o) {
  Result<std::unique_ptr<NodeConnection>> probe = NodeConnection::Connect(address, 5000, o.access);
  if (!probe) return Error{probe.error()};
  MemoryReport m;
  Result<NodeStats> before = ReadNodeStats(**probe);
  if (!before) return Error{before.error()};
  m.before = *before;
  {
    Result<std::unique_ptr<NodeChannel>> channel = NodeChannel::Connect(address, policy, o.access);
    if (!channel) return Error{channel.error()};
    Result<CheckCounts> touched =
        TouchEveryKey(**channel, o.shape.keys, kWarmUpBatch, kWarmUpDepth);
    if (!touched) return Error{"warm-up: " + touched.error()};
    m.warm_up = *touched;
  }
  Result<NodeStats> after = ReadNodeStats(**probe);
  if (!after) return Error{after.error()};
  m.after = *after;
  return m;
}

Result<LoadResult> RunRedis(const NodeBenchOptions& o, const Rate& rate) {
  Result<std::unique_ptr<RedisServer>> server = RedisServer::Start(o.redis_server);
  if (!server) return Error{server.error()};
  Result<std::string> sha = (*server)->LoadScript();
  if (!sha) return Error{sha.error()};
  const auto connect = [&]() -> Result<std::unique_ptr<LoadChannel>> {
    auto channel = RedisChannel::Connect(**server, *sha, rate, o.policy);
    if (!channel) return Error{channel.error()};
    return std::unique_ptr<LoadChannel>(std::move(channel).value());
  };
  // The same warm-up as the node's: every key exists before the run.
  {
    auto channel = connect();
    if (!channel) return Error{channel.error()};
    Result<CheckCounts> touched =
        TouchEveryKey(**channel, o.shape.keys, kWarmUpBatch, kWarmUpDepth);
    if (!touched) return Error{"redis warm-up: " + touched.error()};
  }
  return RunOver(o.connections, o.shape, connect);
}

// One run on a node: a fresh local one with `durability`, or --server's.
Result<Report> RunNode(const NodeBenchOptions& o, const NodeDurability& durability) {
  Report report;
  report.durability = durability;
  report.policy = durability ? o.durable_policy : o.policy;
  report.address = o.server;
  std::unique_ptr<TempDataDir> dir;  // outlives the node: removed once it has stopped
  LocalNode local;
  if (o.server.empty()) {
    LocalNodeOptions node;
    node.program = o.limiterd.empty() ? DefaultLimiterdPath() : o.limiterd;
    if (node.program.empty() || !Runnable(node.program)) {
      return Error{"no limiterd at '" + node.program + "' (build it, or give --limiterd PATH)"};
    }
    node.policies = durability ? o.durable_policies : o.policies;
    node.max_keys = static_cast<int64_t>(2 * o.shape.keys + 1024);
    node.threads = o.node_threads;
    if (durability) {
      Result<std::unique_ptr<TempDataDir>> made = TempDataDir::Make(o.data_parent);
      if (!made) return Error{made.error()};
      dir = std::move(made).value();
      report.durable.emplace();
      report.durable->mode = *durability;
      report.durable->fs = FileSystemName(dir->path());
      node.extra_args = {"--data-dir", dir->path(), "--durability",
                         std::string(DurabilityModeName(*durability))};
      if (o.sync_interval_ms > 0) {
        node.extra_args.push_back("--sync-interval-ms");
        node.extra_args.push_back(std::to_string(o.sync_interval_ms));
      }
    }
    Result<LocalNode> started = StartLocalNode(node);
    if (!started) return Error{started.error()};
    local = std::move(started).value();
    report.address = local.address;
    report.node_banner = local.banner;
  }

  Result<MemoryReport> memory = MeasureMemory(report.address, report.policy, o);
  if (!memory) return Error{"node " + report.address + ": " + memory.error()};
  report.memory = *memory;
  if (report.durable) {
    if (!report.memory.after.durable) {
      return Error{"node " + report.address + " reports no durable_* counters: is policy '" +
                   report.policy + "' durable: true in " + o.durable_policies + "?"};
    }
    report.durable->before = *report.memory.after.durable;
  }

  report.batch = o.shape.batch;
  const std::optional<double> cpu_before =
      local.process ? CpuSeconds(local.process->pid()) : std::nullopt;
  Result<LoadResult> node =
      RunOver(o.connections, o.shape, [&]() -> Result<std::unique_ptr<LoadChannel>> {
        auto channel = NodeChannel::Connect(report.address, report.policy, o.access);
        if (!channel) return Error{channel.error()};
        return std::unique_ptr<LoadChannel>(std::move(channel).value());
      });
  if (!node) return Error{"node " + report.address + ": " + node.error()};
  report.node = std::move(node).value();
  if (cpu_before) {
    if (const std::optional<double> after = CpuSeconds(local.process->pid())) {
      report.node_cpu_s = *after - *cpu_before;
    }
  }
  if (report.durable) {
    Result<std::unique_ptr<NodeConnection>> probe =
        NodeConnection::Connect(report.address, 5000, o.access);
    if (!probe) return Error{"node " + report.address + ": " + probe.error()};
    Result<NodeStats> after = ReadNodeStats(**probe);
    if (!after) return Error{"node " + report.address + ": " + after.error()};
    DurableReport& d = *report.durable;
    d.after = after->durable.value_or(NodeDurableStats());
    d.rss_end = after->resident_bytes;
    d.commit = GroupCommit(d.before, d.after, report.node.seconds);
    probe->reset();
    const auto stopping = std::chrono::steady_clock::now();
    Result<int> status = StopLocalNode(local, kStopTimeoutMs);
    d.stop_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - stopping)
            .count();
    if (!status) return Error{"node " + report.address + ": " + status.error()};
    if (*status != 0) {
      return Error{"node " + report.address + " exited with status " + std::to_string(*status) +
                   " on SIGTERM"};
    }
    d.stopped = MeasureDataDir(dir->path());
  }
  return report;
}

// The runs side by side, when there are several.
void WriteSummary(const std::vector<Report>& reports, std::ostream& out) {
  out << "\nruns:   durability      checks/s   p50 us   p99 us   fsyncs/s  writes/commit  vs memory"
         "  committer\n";
  for (const Report& r : reports) {
    const Histogram::Snapshot& h = r.node.latency_us;
    out << Format("        %-10s %12.0f %8" PRIu64 " %8" PRIu64,
                  std::string(NodeDurabilityName(r.durability)).c_str(), r.node.checks_per_s(),
                  h.Quantile(0.50), h.Quantile(0.99));
    out << (r.durable ? Format(" %10.0f %14.1f", r.durable->commit.commits_per_s,
                               r.durable->commit.writes_per_commit)
                      : Format(" %10s %14s", "-", "-"));
    out << (r.vs_memory ? Format(" %9.2fx", *r.vs_memory) : Format(" %10s", "-"));
    if (r.durable) out << (r.durable->commit.behind() ? "  fell behind" : "  kept up");
    out << '\n';
  }
}

}  // namespace

int RunNodeBench(const NodeBenchOptions& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&](const std::string& message) {
    err << "limiter-bench: " << message << '\n';
    return 1;
  };
  if (o.durability.empty()) return fail("no run: --durable names none");
  const bool any_durable = std::any_of(o.durability.begin(), o.durability.end(),
                                       [](const auto& d) { return d.has_value(); });
  if (any_durable && !o.server.empty()) {
    return fail("--durable needs a local node (it gives it a data dir): drop --server");
  }
  // The policy file gives a local node its policies and the redis bucket its numbers.
  std::optional<PolicySet> policies;
  const Policy* policy = nullptr;
  if (o.server.empty() || o.vs_redis) {
    Result<PolicySet> loaded = LoadPolicyFile(o.policies);
    if (!loaded) return fail(loaded.error());
    policies = std::move(loaded).value();
    policy = policies->Find(o.policy);
    if (policy == nullptr) return fail("no policy '" + o.policy + "' in " + o.policies);
  }
  if (any_durable) {
    Result<PolicySet> loaded = LoadPolicyFile(o.durable_policies);
    if (!loaded) return fail(loaded.error());
    const Policy* durable = loaded->Find(o.durable_policy);
    if (durable == nullptr) {
      return fail("no policy '" + o.durable_policy + "' in " + o.durable_policies);
    }
    if (!durable->durable) {
      return fail("policy '" + o.durable_policy + "' in " + o.durable_policies +
                  " is not durable: true");
    }
  }

  if (o.vs_redis && !Runnable(o.redis_server)) {
    return fail("cannot run '" + o.redis_server +
                "' (install redis-server, or give --redis-server PATH)");
  }

  std::vector<Report> reports;
  for (const NodeDurability& durability : o.durability) {
    Result<Report> report = RunNode(o, durability);  // its node stopped: the next has the machine
    if (!report) return fail(report.error());
    reports.push_back(std::move(report).value());
  }
  double memory_sum = 0;
  int memory_runs = 0;
  for (const Report& r : reports) {
    if (!r.durability) {
      memory_sum += r.node.checks_per_s();
      ++memory_runs;
    }
  }
  if (memory_runs > 0 && memory_sum > 0 && reports.size() > 1) {
    for (Report& r : reports) r.vs_memory = r.node.checks_per_s() / (memory_sum / memory_runs);
  }

  if (o.vs_redis) {
    Result<LoadResult> redis = RunRedis(o, policy->rate);
    if (!redis) return fail(redis.error());
    for (Report& r : reports) r.redis = *redis;
  }

  for (size_t i = 0; i < reports.size(); ++i) {
    if (o.json) {
      WriteJson(o, reports[i], out);
    } else {
      if (i > 0) out << '\n';
      WriteText(o, reports[i], out);
    }
  }
  if (!o.json && reports.size() > 1) WriteSummary(reports, out);
  return 0;
}

}  // namespace limiter::bench
