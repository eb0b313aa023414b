#include "bench/node_bench.h"

#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>

#include "bench/node_load.h"
#include "bench/redis_load.h"
#include "common/policy_file.h"

namespace limiter::bench {
namespace {

// The warm-up that creates every key before the memory reading: frames this large, this many
// in flight.
constexpr int kWarmUpBatch = 1000;
constexpr int kWarmUpDepth = 4;

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

struct Report {
  std::string address;
  std::string node_banner;  // the local node's first line; empty for --server
  MemoryReport memory;
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
  out << "node:   " << r.address << ", policy '" << o.policy << "'";
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
  j["policy"] = o.policy;
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

Result<MemoryReport> MeasureMemory(const std::string& address, const NodeBenchOptions& o) {
  Result<std::unique_ptr<NodeConnection>> probe = NodeConnection::Connect(address, 5000, o.access);
  if (!probe) return Error{probe.error()};
  MemoryReport m;
  Result<NodeStats> before = ReadNodeStats(**probe);
  if (!before) return Error{before.error()};
  m.before = *before;
  {
    Result<std::unique_ptr<NodeChannel>> channel = NodeChannel::Connect(address, o.policy, o.access);
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

}  // namespace

int RunNodeBench(const NodeBenchOptions& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&](const std::string& message) {
    err << "limiter-bench: " << message << '\n';
    return 1;
  };
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

  if (o.vs_redis && !Runnable(o.redis_server)) {
    return fail("cannot run '" + o.redis_server +
                "' (install redis-server, or give --redis-server PATH)");
  }

  Report report;
  LocalNode local;
  report.address = o.server;
  if (o.server.empty()) {
    LocalNodeOptions node;
    node.program = o.limiterd.empty() ? DefaultLimiterdPath() : o.limiterd;
    if (node.program.empty() || !Runnable(node.program)) {
      return fail("no limiterd at '" + node.program + "' (build it, or give --limiterd PATH)");
    }
    node.policies = o.policies;
    node.max_keys = static_cast<int64_t>(2 * o.shape.keys + 1024);
    node.threads = o.node_threads;
    Result<LocalNode> started = StartLocalNode(node);
    if (!started) return fail(started.error());
    local = std::move(started).value();
    report.address = local.address;
    report.node_banner = local.banner;
  }

  Result<MemoryReport> memory = MeasureMemory(report.address, o);
  if (!memory) return fail("node " + report.address + ": " + memory.error());
  report.memory = *memory;

  report.batch = o.shape.batch;
  const std::optional<double> cpu_before =
      local.process ? CpuSeconds(local.process->pid()) : std::nullopt;
  Result<LoadResult> node =
      RunOver(o.connections, o.shape, [&]() -> Result<std::unique_ptr<LoadChannel>> {
        auto channel = NodeChannel::Connect(report.address, o.policy, o.access);
        if (!channel) return Error{channel.error()};
        return std::unique_ptr<LoadChannel>(std::move(channel).value());
      });
  if (!node) return fail("node " + report.address + ": " + node.error());
  report.node = std::move(node).value();
  if (cpu_before) {
    if (const std::optional<double> after = CpuSeconds(local.process->pid())) {
      report.node_cpu_s = *after - *cpu_before;
    }
  }
  local = LocalNode();  // stopped: the redis run has the machine to itself

  if (o.vs_redis) {
    Result<LoadResult> redis = RunRedis(o, policy->rate);
    if (!redis) return fail(redis.error());
    report.redis = std::move(redis).value();
  }

  if (o.json) {
    WriteJson(o, report, out);
  } else {
    WriteText(o, report, out);
  }
  return 0;
}

}  // namespace limiter::bench
