#include "bench/cluster_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <thread>

#include "bench/node_load.h"
#include "common/promise_check.h"
#include "bench/redis_load.h"
#include "client/asio_scheduler.h"
#include "client/client_core.h"
#include "client/node_connection.h"
#include "client/tcp_transport.h"
#include "common/histogram.h"
#include "common/policy_file.h"
#include "common/read_file.h"
#include "common/subprocess.h"

namespace limiter::bench {
namespace {

using Json = nlohmann::json;

// The seed's workload. Key popularity is Zipf over key ranks; key rank r belongs to tenant
// r / keys_per_tenant, so the tenants holding the top keys are the few hot ones.
struct Scenario {
  double rate = 50'000;
  int gateways = 40;
  int64_t keys = 200'000;
  int64_t tenants = 20'000;
  double zipf_s = 1.0;
  double report_share = 0.01;  // requests to the report endpoint (cost 20)
  double login_share = 0.01;   // login attempts, per account (security, strict)
  int64_t accounts = 100'000;
};

std::optional<Scenario> FindScenario(const std::string& name) {
  Scenario s;
  if (name == "50k") return s;
  if (name == "500k") {
    s.rate = 500'000;
    s.gateways = 100;
    return s;
  }
  return std::nullopt;
}

// Draws ranks 0..n-1 with P(r) proportional to 1/(r+1)^s: a table of the cumulative
// distribution and a binary search.
class Zipf {
 public:
  Zipf(int64_t n, double s) : cdf_(static_cast<size_t>(n)) {
    double sum = 0;
    for (int64_t r = 0; r < n; ++r) {
      sum += 1.0 / std::pow(static_cast<double>(r + 1), s);
      cdf_[static_cast<size_t>(r)] = sum;
    }
    for (double& c : cdf_) c /= sum;
  }
  int64_t Draw(double u) const {
    return std::min<int64_t>(static_cast<int64_t>(cdf_.size()) - 1,
                             std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

enum Kind { kApiKey, kLogin, kKinds };

// One gateway: a whole client, sharing the harness's I/O thread with the others.
struct Gateway {
  std::unique_ptr<TcpTransport> transport;
  std::unique_ptr<ClientCore> core;
};

struct Second {
  double t = 0;
  uint64_t offered = 0;
  uint64_t decided = 0;
  uint64_t store_ops = 0;
  uint64_t fallbacks = 0;
  uint64_t p99_us = 0;
  int64_t lag_us = 0;  // the longest an arrival loop was late in the second
  bool warm_up = false;
};

Histogram::Snapshot Minus(const Histogram::Snapshot& a, const Histogram::Snapshot& b) {
  Histogram::Snapshot d;
  for (size_t i = 0; i < d.counts.size(); ++i) d.counts[i] = a.counts[i] - b.counts[i];
  d.count = a.count - b.count;
  d.sum = a.sum - b.sum;
  d.max = a.max;  // an upper bound for the second; Quantile caps at it
  return d;
}

// The workload's names and popularity, shared read-only by every event loop.
struct Workload {
  Workload(const Scenario& s)
      : zipf_keys(s.keys, s.zipf_s), zipf_accounts(s.accounts, s.zipf_s) {
    for (int64_t k = 0; k < s.keys; ++k) keys.push_back("k" + std::to_string(k));
    for (int64_t t = 0; t < s.tenants; ++t) tenants.push_back("t" + std::to_string(t));
    for (int64_t a = 0; a < s.accounts; ++a) accounts.push_back("a" + std::to_string(a));
  }
  const std::string& name(Kind k, size_t i) const { return k == kApiKey ? keys[i] : accounts[i]; }

  const Zipf zipf_keys;
  const Zipf zipf_accounts;
  std::vector<std::string> keys, tenants, accounts;
};

// One event loop's share of the run: its gateways, and arrivals at rate/loops. Everything
// it does happens on its scheduler's thread (arrivals, decisions that complete locally and
// those that complete when a node answers); the progress counters may be read from any
// thread.
class LoopRun {
 public:
  LoopRun(const Scenario& scenario, const ClusterBenchOptions& o, const Workload& workload,
          std::array<int64_t, kKinds> lease_ttl_us, double rate, uint64_t seed,
          AsioScheduler& scheduler, std::vector<Gateway*> gateways)
      : s_(scenario),
        lease_ttl_us_(lease_ttl_us),
        o_(o),
        w_(workload),
        rate_(rate),
        scheduler_(scheduler),
        gateways_(std::move(gateways)),
        rng_(seed) {
    admissions_[kApiKey].resize(static_cast<size_t>(s_.keys));
    admissions_[kLogin].resize(static_cast<size_t>(s_.accounts));
  }

  // Runs the arrivals for warmup_s + duration_s; the future is ready once every decision
  // is in.
  std::future<void> Start() {
    scheduler_.Post([this] {
      t0_ = scheduler_.NowUs();
      measure_us_ = t0_ + static_cast<int64_t>(o_.warmup_s * 1e6);
      end_us_ = measure_us_ + static_cast<int64_t>(o_.duration_s * 1e6);
      next_us_ = t0_;
      Tick();
      scheduler_.After(measure_us_ - t0_, [this] { ops_at_measure_ = StoreOps(); });
    });
    return finished_.get_future();
  }

  // --- Progress, from any thread ---
  uint64_t offered_so_far() const { return offered_.load(std::memory_order_relaxed); }
  uint64_t decided_so_far() const { return decided_.load(std::memory_order_relaxed); }
  void AddLatencyTo(Histogram::Snapshot& s) const { all_latency_.AddTo(s); }
  // The longest the arrival loop was late since the last call.
  int64_t TakeLag() { return lag_us_.exchange(0, std::memory_order_relaxed); }
  // Store ops and fallback decisions so far, over this loop's gateways (one counters()
  // read each: it takes every shard's lock).
  std::pair<uint64_t, uint64_t> StoreOpsAndFallbacks() const {
    uint64_t ops = 0, fallbacks = 0;
    for (const Gateway* g : gateways_) {
      const client::Counters c = g->core->counters();
      ops += c.store_calls;
      fallbacks += c.by_source[static_cast<size_t>(client::Source::kFallback)];
    }
    return {ops, fallbacks};
  }
  uint64_t StoreOps() const { return StoreOpsAndFallbacks().first; }

  // --- Read after the future is ready ---
  // From the end of the warm-up to the last decision.
  double decided_span_s() const {
    return std::max(o_.duration_s, static_cast<double>(last_done_us_ - measure_us_) / 1e6);
  }
  // Arrivals, decisions and store ops after the warm-up.
  uint64_t issued() const { return issued_measured_; }
  uint64_t decided() const { return decided_measured_; }
  uint64_t store_ops() const { return ops_at_end_ - ops_at_measure_; }
  uint64_t allowed() const { return allowed_; }
  uint64_t errors() const { return errors_; }
  const std::string& first_error() const { return first_error_; }
  const std::array<uint64_t, 3>& by_source() const { return by_source_; }
  void AddMeasuredLatencyTo(Histogram::Snapshot& s) const { latency_.AddTo(s); }
  std::vector<std::vector<Admission>>& admissions(Kind k) { return admissions_[k]; }

 private:
  static constexpr int64_t kTickUs = 100;  // arrivals due are issued at least this often

  void Tick() {
    const int64_t now = scheduler_.NowUs();
    if (last_tick_us_ > 0 && now - last_tick_us_ > lag_us_.load(std::memory_order_relaxed)) {
      lag_us_.store(now - last_tick_us_, std::memory_order_relaxed);
    }
    last_tick_us_ = now;
    const int64_t due = std::min(now, end_us_ - 1);
    while (next_us_ <= due) {
      Issue(next_us_);
      ++issued_;
      next_us_ = t0_ + static_cast<int64_t>(static_cast<double>(issued_) * 1e6 / rate_);
    }
    if (next_us_ < end_us_) {
      scheduler_.After(std::max<int64_t>(kTickUs, next_us_ - scheduler_.NowUs()),
                       [this] { Tick(); });
    } else {
      issuing_done_ = true;
      ops_at_end_ = StoreOps();
      MaybeFinish();
    }
  }

  void Issue(int64_t intended_us) {
    const double endpoint = uniform_(rng_);
    client::Request request;
    Kind kind = kApiKey;
    size_t index = 0;
    int64_t cost = 1;
    if (endpoint < s_.login_share) {
      kind = kLogin;
      index = static_cast<size_t>(w_.zipf_accounts.Draw(uniform_(rng_)));
      request.policy = "login";
      request.key = w_.accounts[index];
    } else {
      index = static_cast<size_t>(w_.zipf_keys.Draw(uniform_(rng_)));
      request.policy = "api_key";
      request.key = w_.keys[index];
      request.tenant =
          w_.tenants[index * static_cast<size_t>(s_.tenants) / static_cast<size_t>(s_.keys)];
      if (endpoint < s_.login_share + s_.report_share) {
        request.operation = "report";
        cost = 20;
      }
    }
    const size_t gateway = PickGateway(kind, index);
    offered_.fetch_add(1, std::memory_order_relaxed);
    if (intended_us >= measure_us_) ++issued_measured_;
    gateways_[gateway]->core->DecideAsync(
        request, [this, intended_us, kind, index, cost](client::Decision d) {
          Done(intended_us, kind, index, cost, d);
        });
  }

  // even: round robin; random: uniformly; sticky: each API key's (or account's) requests
  // come from one client connection, so one gateway (an L4 balancer with keep-alive). The
  // loops split the gateways, and `sticky` keys the pick on the key alone, so a key stays
  // with one gateway whichever loop draws it... within this loop's share.
  size_t PickGateway(Kind kind, size_t index) {
    if (o_.spread == "even") return static_cast<size_t>(issued_ % gateways_.size());
    if (o_.spread == "random") return static_cast<size_t>(rng_() % gateways_.size());
    uint64_t h = index * 2 + static_cast<uint64_t>(kind);
    h = (h ^ (h >> 31)) * 0x9e3779b97f4a7c15ull;
    return static_cast<size_t>((h >> 32) % gateways_.size());
  }

  void Done(int64_t intended_us, Kind kind, size_t index, int64_t cost,
            const client::Decision& d) {
    const int64_t now = scheduler_.NowUs();
    const uint64_t latency = static_cast<uint64_t>(std::max<int64_t>(0, now - intended_us));
    all_latency_.Record(latency);
    decided_.fetch_add(1, std::memory_order_relaxed);
    ++decided_all_;
    last_done_us_ = std::max(last_done_us_, now);
    if (intended_us >= measure_us_) {
      latency_.Record(latency);
      ++decided_measured_;
      by_source_[static_cast<size_t>(d.source)]++;
      if (!d.error.empty()) {
        if (errors_++ == 0) first_error_ = d.error;
      } else if (d.allowed) {
        ++allowed_;
      }
    }
    // Every admission counts for accuracy, the warm-up's included. Times are on the
    // steady clock every loop shares.
    // An admission the node decided was charged between the request's arrival and its
    // decision; one spent from a lease was charged when its units were leased, at most the
    // lease TTL before the request arrived (DESIGN: leased units were already subtracted at
    // the store, so the fleet never exceeds the bucket). A fallback admission was charged
    // nowhere but here.
    if (d.error.empty() && d.allowed) {
      const int64_t from = d.source == client::Source::kLease
                               ? intended_us - lease_ttl_us_[kind]
                               : intended_us;
      admissions_[kind][index].push_back({from, now, cost});
    }
    MaybeFinish();
  }

  void MaybeFinish() {
    if (issuing_done_ && decided_all_ == issued_ && !finished_set_) {
      finished_set_ = true;
      finished_.set_value();
    }
  }

  const Scenario s_;
  const std::array<int64_t, kKinds> lease_ttl_us_;
  const ClusterBenchOptions& o_;
  const Workload& w_;
  const double rate_;
  AsioScheduler& scheduler_;
  const std::vector<Gateway*> gateways_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};

  int64_t t0_ = 0, measure_us_ = 0, end_us_ = 0, next_us_ = 0, last_done_us_ = 0;
  int64_t last_tick_us_ = 0;
  uint64_t issued_ = 0, decided_all_ = 0, allowed_ = 0, errors_ = 0;
  uint64_t issued_measured_ = 0, decided_measured_ = 0;
  uint64_t ops_at_measure_ = 0, ops_at_end_ = 0;
  std::string first_error_;
  std::array<uint64_t, 3> by_source_{};
  Histogram latency_;      // after the warm-up
  Histogram all_latency_;  // all, for the progress lines
  std::atomic<uint64_t> offered_{0}, decided_{0};
  std::atomic<int64_t> lag_us_{0};
  std::array<std::vector<std::vector<Admission>>, kKinds> admissions_;
  bool issuing_done_ = false, finished_set_ = false;
  std::promise<void> finished_;
};

// Every event loop's share, and the progress line each second, read from the main thread.
class Harness {
 public:
  Harness(const Scenario& s, const ClusterBenchOptions& o, const PolicySet& policies,
          const std::vector<std::string>& members)
      : s_(s), o_(o), workload_(s) {
    const int loops = std::max(1, std::min(o.loops, s.gateways));
    std::array<int64_t, kKinds> lease_ttl_us{};
    lease_ttl_us[kApiKey] = policies.Find("api_key")->lease.ttl_ms * 1000;
    lease_ttl_us[kLogin] = policies.Find("login")->lease.ttl_ms * 1000;
    for (int l = 0; l < loops; ++l) schedulers_.push_back(std::make_unique<AsioScheduler>());
    ClientCoreOptions core_options;
    core_options.gateways = s.gateways;
    core_options.deadline_us = o.deadline_us;
    gateways_.resize(static_cast<size_t>(s.gateways));
    std::vector<std::vector<Gateway*>> shares(static_cast<size_t>(loops));
    for (size_t g = 0; g < gateways_.size(); ++g) {
      AsioScheduler& scheduler = *schedulers_[g % static_cast<size_t>(loops)];
      gateways_[g].transport = std::make_unique<TcpTransport>(scheduler.io(), o.access);
      gateways_[g].core = std::make_unique<ClientCore>(policies, members, scheduler,
                                                       *gateways_[g].transport, core_options);
      gateways_[g].core->WarmUp();
      shares[g % static_cast<size_t>(loops)].push_back(&gateways_[g]);
    }
    for (int l = 0; l < loops; ++l) {
      runs_.push_back(std::make_unique<LoopRun>(s, o, workload_, lease_ttl_us, s.rate / loops,
                                            o.seed * 1000003 + static_cast<uint64_t>(l),
                                            *schedulers_[static_cast<size_t>(l)],
                                            std::move(shares[static_cast<size_t>(l)])));
    }
  }

  ~Harness() {
    // Connections belong to their loop's thread: close them there as its last handler, so
    // nothing reopens one, before the clients go.
    for (size_t l = 0; l < schedulers_.size(); ++l) {
      schedulers_[l]->RunAndStop([&] {
        for (size_t g = l; g < gateways_.size(); g += schedulers_.size()) {
          gateways_[g].transport->CloseAll();
        }
      });
    }
  }

  int loops() const { return static_cast<int>(runs_.size()); }

  // Runs every loop, writing a progress line a second; false when the decisions were not
  // all in 10 s after the last arrival was due.
  bool RunAll(std::ostream& out) {
    std::vector<std::future<void>> finished;
    for (auto& r : runs_) finished.push_back(r->Start());
    const auto start = std::chrono::steady_clock::now();
    const auto until = start + std::chrono::milliseconds(static_cast<int64_t>(
                                   (o_.warmup_s + o_.duration_s + 10) * 1000));
    uint64_t last_offered = 0, last_decided = 0, last_ops = 0, last_fallbacks = 0;
    Histogram::Snapshot last_latency;
    for (int second = 1;; ++second) {
      const auto tick = start + std::chrono::seconds(second);
      bool all_done = true;
      for (auto& f : finished) {
        // Integer durations: libstdc++ 12's wait_until spins on a floating-point one.
        if (f.wait_until(std::min(tick, until)) != std::future_status::ready) all_done = false;
      }
      if (all_done) return true;
      if (std::chrono::steady_clock::now() >= until) return false;
      Second s;
      s.t = second;
      s.warm_up = second <= o_.warmup_s;
      uint64_t offered = 0, decided = 0, ops = 0, fallbacks = 0;
      Histogram::Snapshot latency;
      for (auto& r : runs_) {
        offered += r->offered_so_far();
        decided += r->decided_so_far();
        const auto [run_ops, run_fallbacks] = r->StoreOpsAndFallbacks();
        ops += run_ops;
        fallbacks += run_fallbacks;
        r->AddLatencyTo(latency);
        s.lag_us = std::max(s.lag_us, r->TakeLag());
      }
      s.offered = offered - last_offered;
      s.decided = decided - last_decided;
      s.store_ops = ops - last_ops;
      s.fallbacks = fallbacks - last_fallbacks;
      s.p99_us = Minus(latency, last_latency).Quantile(0.99);
      last_offered = offered;
      last_decided = decided;
      last_ops = ops;
      last_fallbacks = fallbacks;
      last_latency = latency;
      seconds_.push_back(s);
      char line[240];
      std::snprintf(line, sizeof(line),
                    "[%3.0fs] offered %7" PRIu64 "/s  decided %7" PRIu64 "/s  store ops %6" PRIu64
                    "/s  p99 %6" PRIu64 " us  fallbacks %5" PRIu64 "  loop lag %5" PRId64
                    " us%s\n",
                    s.t, s.offered, s.decided, s.store_ops, s.p99_us, s.fallbacks, s.lag_us,
                    s.warm_up ? "  (warm-up)" : "");
      out << line << std::flush;
    }
  }

  const std::vector<std::unique_ptr<LoopRun>>& runs() const { return runs_; }
  const std::vector<Second>& per_second() const { return seconds_; }
  const Workload& workload() const { return workload_; }
  std::vector<Gateway>& gateways() { return gateways_; }

 private:
  const Scenario s_;
  const ClusterBenchOptions& o_;
  const Workload workload_;
  std::vector<std::unique_ptr<AsioScheduler>> schedulers_;
  std::vector<Gateway> gateways_;
  std::vector<std::unique_ptr<LoopRun>> runs_;
  std::vector<Second> seconds_;
};

struct NodeUsage {
  std::string address;
  std::optional<double> cpu_percent;  // local nodes only
  int64_t rss_bytes = -1;
};

struct PromiseResult {
  uint64_t keys_checked = 0;
  uint64_t keys_over = 0;
  std::string worst_policy, worst_key;
  WorstWindow worst;
  bool have_worst = false;
  double worst_excess = 0;  // admitted - allowed in the worst window (<= 0 when kept)
};

// Every key's admissions from every loop, in decision order, against its promise.
PromiseResult CheckPromises(Harness& harness, const PolicySet& policies) {
  PromiseResult result;
  const std::pair<Kind, const char*> kinds[] = {{kApiKey, "api_key"}, {kLogin, "login"}};
  for (const auto& [kind, name] : kinds) {
    const Policy* p = policies.Find(name);
    if (p == nullptr) continue;
    const PromiseBound bound{p->rate.limit(), p->rate.window_ms() * 1000, p->rate.burst(),
                             /*resolution_us=*/1000};
    std::vector<std::vector<std::vector<Admission>>*> parts;
    for (const auto& run : harness.runs()) parts.push_back(&run->admissions(kind));
    std::vector<Admission> merged;
    for (size_t i = 0; i < parts.front()->size(); ++i) {
      merged.clear();
      for (std::vector<std::vector<Admission>>* part : parts) {
        merged.insert(merged.end(), (*part)[i].begin(), (*part)[i].end());
      }
      if (merged.empty()) continue;
      if (parts.size() > 1) {
        std::sort(merged.begin(), merged.end(),
                  [](const Admission& a, const Admission& b) { return a.end_us < b.end_us; });
      }
      ++result.keys_checked;
      const WorstWindow w = FindWorstWindow(merged, bound);
      if (w.over) ++result.keys_over;
      const double excess = static_cast<double>(w.admitted) - w.allowed;
      if (!result.have_worst || excess > result.worst_excess) {
        result.have_worst = true;
        result.worst_excess = excess;
        result.worst = w;
        result.worst_policy = name;
        result.worst_key = harness.workload().name(kind, i);
      }
    }
  }
  return result;
}

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

std::string Markdown(const Json& r) {
  std::string md = "# limiter-bench cluster: scenario " + r["scenario"].get<std::string>() + "\n\n";
  md += Fmt("%d gateways, %d nodes, %.0f s measured after a %.0f s warm-up, spread %s\n\n",
            r["gateways"].get<int>(), r["nodes"].get<int>(), r["duration_s"].get<double>(),
            r["warmup_s"].get<double>(),
            r["spread"].get<std::string>().c_str());
  md += "| measure | value |\n|---|---|\n";
  auto row = [&](const std::string& name, const std::string& value) {
    md += "| " + name + " | " + value + " |\n";
  };
  row("offered requests/s", Fmt("%.0f", r["offered_rps"].get<double>()));
  row("achieved decisions/s", Fmt("%.0f (%.3f%% of offered)", r["achieved_rps"].get<double>(),
                                  100 * r["achieved_ratio"].get<double>()));
  row("allowed / denied / errors",
      Fmt("%" PRIu64 " / %" PRIu64 " / %" PRIu64, r["allowed"].get<uint64_t>(),
          r["denied"].get<uint64_t>(), r["errors"].get<uint64_t>()));
  row("store operations/s", Fmt("%.0f (1 per %.1f requests)", r["store_ops_per_s"].get<double>(),
                                1 / std::max(1e-9, r["store_ops_per_request"].get<double>())));
  row("added latency p50 / p99 / p999 / max",
      Fmt("%" PRIu64 " / %" PRIu64 " / %" PRIu64 " / %" PRIu64 " us", r["p50_us"].get<uint64_t>(),
          r["p99_us"].get<uint64_t>(), r["p999_us"].get<uint64_t>(), r["max_us"].get<uint64_t>()));
  const Json& w = r["worst_window"];
  row("keys over their promise", Fmt("%" PRIu64 " of %" PRIu64 " checked",
                                      r["keys_over_promise"].get<uint64_t>(),
                                      r["keys_checked"].get<uint64_t>()));
  row("worst window", w.is_null() ? "none"
                                  : Fmt("%s %s: %" PRId64 " admitted in %.1f ms, %.1f allowed",
                                        w["policy"].get<std::string>().c_str(),
                                        w["key"].get<std::string>().c_str(),
                                        w["admitted"].get<int64_t>(), w["interval_ms"].get<double>(),
                                        w["allowed"].get<double>()));
  const Json& f = r["fallbacks_by_class"];
  row("fallbacks by class",
      Fmt("security %" PRIu64 ", contract %" PRIu64 ", billing %" PRIu64 ", capacity %" PRIu64,
          f["security"].get<uint64_t>(), f["contract"].get<uint64_t>(),
          f["billing"].get<uint64_t>(), f["capacity"].get<uint64_t>()));
  for (const Json& n : r["node_usage"]) {
    std::string cpu = n["cpu_percent"].is_null() ? "?" : Fmt("%.0f%%", n["cpu_percent"].get<double>());
    row("node " + n["address"].get<std::string>(),
        "CPU " + cpu + ", RSS " + Fmt("%.1f MiB", static_cast<double>(n["rss_bytes"].get<int64_t>()) / (1 << 20)));
  }
  if (r.contains("redis")) {
    const Json& x = r["redis"];
    row("redis + Lua, one EVALSHA per request",
        Fmt("%.0f/s achieved, p99 %" PRIu64 " us", x["achieved_rps"].get<double>(),
            x["p99_us"].get<uint64_t>()));
  }
  return md;
}

// per_second.tsv, chart.gp and chart.png (gnuplot) in `dir`; an error when a file cannot be
// written or gnuplot fails.
std::optional<std::string> WriteChart(const std::string& dir, const std::vector<Second>& seconds,
                                      const std::string& title) {
  const std::string tsv = dir + "/per_second.tsv";
  {
    std::ofstream f(tsv);
    f << "# t_s\tdecided_per_s\tstore_ops_per_s\tp99_us\n";
    for (const Second& s : seconds) {
      f << s.t << '\t' << s.decided << '\t' << s.store_ops << '\t' << s.p99_us << '\n';
    }
    if (!f) return "cannot write " + tsv;
  }
  const std::string gp = dir + "/chart.gp";
  {
    std::ofstream f(gp);
    f << "set terminal png size 900,450\n"
      << "set output '" << dir << "/chart.png'\n"
      << "set title '" << title << "'\n"
      << "set xlabel 'seconds'\nset ylabel 'decisions/s'\nset y2label 'p99 added latency (us)'\n"
      << "set ytics nomirror\nset y2tics\nset yrange [0:*]\nset y2range [0:*]\nset key bottom right\n"
      << "plot '" << tsv << "' using 1:2 with linespoints title 'decisions/s' axes x1y1, \\\n"
      << "     '" << tsv << "' using 1:3 with linespoints title 'store ops/s' axes x1y1, \\\n"
      << "     '" << tsv << "' using 1:4 with linespoints title 'p99 (us)' axes x1y2\n";
    if (!f) return "cannot write " + gp;
  }
  Result<std::unique_ptr<Subprocess>> gnuplot = Subprocess::Start({"gnuplot", gp});
  if (!gnuplot) return "cannot run gnuplot: " + gnuplot.error();
  const std::optional<int> status = (*gnuplot)->Wait(30'000);
  if (!status || *status != 0) return "gnuplot failed on " + gp;
  return std::nullopt;
}

}  // namespace

int RunClusterBench(const ClusterBenchOptions& o, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& why, int code = 1) {
    err << "limiter-bench cluster: " << why << '\n';
    return code;
  };
  std::optional<Scenario> found = FindScenario(o.scenario);
  if (!found) return fail("unknown scenario '" + o.scenario + "' (known: 50k, 500k)", 2);
  Scenario scenario = *found;
  if (o.rate > 0) scenario.rate = o.rate;
  if (o.gateways > 0) scenario.gateways = o.gateways;
  if (o.spread != "even" && o.spread != "random" && o.spread != "sticky") {
    return fail("--spread must be even, random or sticky, got '" + o.spread + "'", 2);
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

  // The cluster.
  std::vector<LocalNode> local;
  std::vector<std::string> members = o.cluster;
  if (members.empty()) {
    LocalNodeOptions node;
    node.program = o.limiterd.empty() ? DefaultLimiterdPath() : o.limiterd;
    node.policies = o.policies;
    node.threads = o.node_threads;
    Result<std::vector<LocalNode>> started = StartLocalCluster(o.nodes, node);
    if (!started) return fail(started.error());
    local = std::move(started).value();
    for (const LocalNode& n : local) members.push_back(n.address);
  }
  out << "limiter-bench cluster: scenario " << o.scenario << ", " << scenario.rate
      << " requests/s for " << o.duration_s << " s, " << scenario.gateways << " gateways, "
      << members.size() << (local.empty() ? " nodes at " : " local nodes at ");
  for (size_t i = 0; i < members.size(); ++i) out << (i ? "," : "") << members[i];
  out << "\n" << std::flush;

  std::vector<std::optional<double>> cpu_before;
  for (const LocalNode& n : local) cpu_before.push_back(CpuSeconds(n.process->pid()));

  Harness harness(scenario, o, *policies, members);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the connections open
  const auto run_start = std::chrono::steady_clock::now();
  const bool complete = harness.RunAll(out);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  if (!complete) {
    return fail(Fmt("the run had not finished 10 s after its last arrival was due: this "
                    "machine cannot issue and decide %.0f requests/s (lower --rate)",
                    scenario.rate));
  }
  uint64_t issued = 0, decided = 0, allowed = 0, errors = 0, store_ops = 0;
  double span_s = 0;
  std::array<uint64_t, 3> by_source{};
  std::string first_error;
  Histogram::Snapshot latency;
  for (const auto& run : harness.runs()) {
    issued += run->issued();
    decided += run->decided();
    allowed += run->allowed();
    errors += run->errors();
    store_ops += run->store_ops();
    span_s = std::max(span_s, run->decided_span_s());
    for (size_t i = 0; i < by_source.size(); ++i) by_source[i] += run->by_source()[i];
    if (first_error.empty()) first_error = run->first_error();
    run->AddMeasuredLatencyTo(latency);
  }
  client::Counters total;
  for (const Gateway& g : harness.gateways()) {
    const client::Counters c = g.core->counters();
    total.store_errors += c.store_errors;
    total.deadline_misses += c.deadline_misses;
    for (int i = 0; i < 4; ++i) total.fallback_by_class[i] += c.fallback_by_class[i];
  }

  std::vector<NodeUsage> usage;
  for (size_t i = 0; i < members.size(); ++i) {
    NodeUsage u;
    u.address = members[i];
    if (i < local.size()) {
      const std::optional<double> after = CpuSeconds(local[i].process->pid());
      if (after && cpu_before[i]) u.cpu_percent = 100 * (*after - *cpu_before[i]) / wall;
    }
    if (Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(members[i], 5000, o.access)) {
      if (Result<NodeStats> stats = ReadNodeStats(**c)) u.rss_bytes = stats->resident_bytes;
    }
    usage.push_back(u);
  }
  const PromiseResult promise = CheckPromises(harness, *policies);

  const double offered = static_cast<double>(issued) / o.duration_s;
  const double achieved = static_cast<double>(decided) / span_s;
  Json report = {
      {"scenario", o.scenario},
      {"gateways", scenario.gateways},
      {"nodes", static_cast<int>(members.size())},
      {"duration_s", o.duration_s},
      {"spread", o.spread},
      {"loops", harness.loops()},
      {"offered_rps", offered},
      {"achieved_rps", achieved},
      {"achieved_ratio", offered > 0 ? achieved / offered : 0},
      {"decisions_per_s", achieved},
      {"allowed", allowed},
      {"denied", decided - allowed - errors},
      {"errors", errors},
      {"by_source",
       {{"store", by_source[0]}, {"lease", by_source[1]}, {"fallback", by_source[2]}}},
      {"warmup_s", o.warmup_s},
      {"store_ops_per_s", static_cast<double>(store_ops) / span_s},
      {"store_ops_per_request",
       issued ? static_cast<double>(store_ops) / static_cast<double>(issued) : 0},
      {"store_errors", total.store_errors},
      {"deadline_misses", total.deadline_misses},
      {"p50_us", latency.Quantile(0.5)},
      {"p99_us", latency.Quantile(0.99)},
      {"p999_us", latency.Quantile(0.999)},
      {"max_us", latency.max},
      {"keys_checked", promise.keys_checked},
      {"keys_over_promise", promise.keys_over},
      {"worst_window", nullptr},
      {"fallbacks_by_class",
       {{"security", total.fallback_by_class[0]},
        {"contract", total.fallback_by_class[1]},
        {"billing", total.fallback_by_class[2]},
        {"capacity", total.fallback_by_class[3]}}},
      {"node_usage", Json::array()},
      {"per_second", Json::array()}};
  if (!first_error.empty()) report["first_error"] = first_error;
  if (promise.have_worst) {
    report["worst_window"] = {{"policy", promise.worst_policy},
                              {"key", promise.worst_key},
                              {"admitted", promise.worst.admitted},
                              {"interval_ms", static_cast<double>(promise.worst.interval_us) / 1000},
                              {"allowed", promise.worst.allowed}};
  }
  for (const NodeUsage& u : usage) {
    report["node_usage"].push_back({{"address", u.address},
                                    {"cpu_percent", u.cpu_percent ? Json(*u.cpu_percent) : Json()},
                                    {"rss_bytes", u.rss_bytes}});
  }
  for (const Second& s : harness.per_second()) {
    report["per_second"].push_back({{"t", s.t},
                                    {"offered", s.offered},
                                    {"decided", s.decided},
                                    {"store_ops", s.store_ops},
                                    {"p99_us", s.p99_us},
                                    {"warm_up", s.warm_up},
                                    {"loop_lag_us", s.lag_us},
                                    {"fallbacks", s.fallbacks}});
  }
  if (o.vs_redis) {
    out << "the same arrivals against redis-server, one EVALSHA per request...\n" << std::flush;
    Result<RedisRow> redis = RunRedis(scenario, o, *policies->Find("api_key"));
    if (!redis) return fail(redis.error());
    report["redis"] = {{"offered_rps", redis->offered_rps},
                       {"achieved_rps", redis->achieved_rps},
                       {"p99_us", redis->p99_us},
                       {"errors", redis->errors},
                       {"p99_ratio", redis->p99_us > 0 ? static_cast<double>(latency.Quantile(0.99)) /
                                                             static_cast<double>(redis->p99_us)
                                                       : 0}};
  }

  const std::string md = Markdown(report);
  out << '\n' << md;
  if (report.contains("redis")) {
    out << Fmt("\nlimiter vs redis + Lua at %.0f requests/s: p99 %" PRIu64 " us vs %" PRIu64
               " us (%.2fx); store ops %.0f/s vs %.0f/s\n",
               offered, latency.Quantile(0.99), report["redis"]["p99_us"].get<uint64_t>(),
               report["redis"]["p99_ratio"].get<double>(), report["store_ops_per_s"].get<double>(),
               report["redis"]["achieved_rps"].get<double>());
  }
  if (!o.json_file.empty()) {
    std::ofstream f(o.json_file);
    f << report.dump(2) << '\n';
    if (!f) return fail("cannot write " + o.json_file);
  }
  if (!o.report_dir.empty()) {
    std::ofstream f(o.report_dir + "/report.md");
    f << md;
    if (!f) return fail("cannot write " + o.report_dir + "/report.md");
    if (auto e = WriteChart(o.report_dir, harness.per_second(),
                            "limiter-bench cluster " + o.scenario + ": throughput and p99")) {
      return fail(*e);
    }
    out << "report: " << o.report_dir << "/report.md, chart.png\n";
  }
  return 0;
}

}  // namespace limiter::bench
