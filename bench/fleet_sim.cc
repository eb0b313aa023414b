#include "bench/fleet_sim.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>

#include "bench/cluster_workload.h"
#include "bench/fleet_accounting.h"
#include "bench/fleet_report.h"
#include "bench/report_chart.h"
#include "client/client_core.h"
#include "common/policy_file.h"
#include "protocol/key_id.h"
#include "protocol/ring.h"
#include "protocol/rules.h"
#include "sim/faults.h"

namespace limiter::bench {
namespace {

using Json = nlohmann::json;
using sim::Fault;
constexpr int64_t kStartUs = 1'000'000'000;  // the simulated clock's origin
// The key-id seed of every simulation: fixed, so that the nodes' tables and sketches repeat.
constexpr uint64_t kSimKeySeed = 0x73696d2d6b657973;  // "sim-keys"

std::string NodeAddress(size_t i) { return "node-" + std::to_string(i + 1) + ":7000"; }

struct SecondStats {
  uint64_t offered = 0, decided = 0, fallbacks = 0, store_ops = 0;
  std::unique_ptr<Histogram> latency = std::make_unique<Histogram>();
};

// One run: the fleet, its arrivals and faults, and what they produced.
class FleetSim {
 public:
  FleetSim(const FleetSimOptions& o, const Scenario& s, const PolicySet& policies,
           std::vector<Fault> faults)
      : o_(o),
        s_(s),
        policies_(policies),
        checked_(policies),
        workload_(s),
        faults_(std::move(faults)),
        clock_(sched_),
        net_(sched_, o.model, o.seed * 7919 + 17),
        arrivals_rng_(o.seed),
        hot_rng_(o.seed * 31 + 7) {
    for (int i = 0; i < s.nodes; ++i) members_.push_back(NodeAddress(static_cast<size_t>(i)));
    for (int i = 0; i < s.nodes; ++i) {
      net_.AddNode(members_[static_cast<size_t>(i)], NewNode(Options(i)));
    }
    ClientCoreOptions core;
    core.gateways = s.gateways;
    core.deadline_us = o.deadline_us;
    core.generation = generation_;
    for (int g = 0; g < s.gateways; ++g) {
      core.seed = o.seed * 1'000'003 + static_cast<uint64_t>(g) + 1;
      gateways_.push_back(
          std::make_unique<ClientCore>(policies, members_, sched_, net_.Gateway(g), core));
    }
  }

  void Run(std::ostream& out) {
    t0_ = sched_.NowUs();
    measure_us_ = t0_ + static_cast<int64_t>(o_.warmup_s * 1e6);
    end_us_ = measure_us_ + static_cast<int64_t>(o_.duration_s * 1e6);
    const double main_gap_us = 1e6 / s_.rate;
    NextMain(0, main_gap_us);
    for (const Fault& f : faults_) Schedule(f);
    Periodic(0);
    sched_.After(measure_us_ - t0_, [this] {
      ops_at_measure_ = StoreOps();
      sent_at_measure_ = net_.sent_by_kind();
    });
    sched_.After(end_us_ - t0_, [this] {
      ops_at_end_ = StoreOps();
      sent_at_end_ = net_.sent_by_kind();
    });
    for (int64_t second = 1; t0_ + second * 1'000'000 <= end_us_; ++second) {
      sched_.RunUntil(t0_ + second * 1'000'000);
      Progress(out, second);
    }
    // The decisions still out (at most a deadline each), then the leases' lapse.
    sched_.RunUntil(end_us_ + 1'000'000);
  }

  Json Report() const;

 private:
  NodeOptions Options(int i) const {
    NodeOptions n;
    n.name = "sim-node-" + std::to_string(i + 1);
    n.members = members_;
    n.generation = generation_;
    n.self = NodeAddress(static_cast<size_t>(i));
    n.lease_id_start = (static_cast<uint64_t>(i) + 1) << 40 | ++lives_;
    return n;
  }
  std::unique_ptr<Node> NewNode(NodeOptions options) const {
    return std::make_unique<Node>(policies_, clock_, std::move(options));
  }

  uint64_t StoreOps() const {
    uint64_t ops = 0;
    for (const auto& g : gateways_) ops += g->counters().store_calls;
    return ops;
  }

  // Arrivals at a constant rate from t0 to the end, each drawn from the workload.
  void NextMain(uint64_t n, double gap_us) {
    const int64_t at = t0_ + static_cast<int64_t>(static_cast<double>(n) * gap_us);
    if (at >= end_us_) return;
    sched_.After(at - sched_.NowUs(), [this, n, gap_us, at] {
      Issue(workload_.Draw(arrivals_rng_), at);
      NextMain(n + 1, gap_us);
    });
  }

  // The hot tenant's extra arrivals, uniform over its keys.
  void NextHot(const Fault& f, uint64_t n) {
    const int64_t at = t0_ + f.at_us + static_cast<int64_t>(static_cast<double>(n) * 1e6 / f.rate);
    const int64_t until = f.until_us < 0 ? end_us_ : std::min(end_us_, t0_ + f.until_us);
    if (at >= until) return;
    sched_.After(at - sched_.NowUs(), [this, &f, n, at] {
      const auto [first, count] = workload_.keys_of_tenant(static_cast<size_t>(f.tenant));
      std::uniform_int_distribution<size_t> pick(0, std::max<size_t>(1, count) - 1);
      Issue(workload_.ForKey(first + pick(hot_rng_), hot_rng_), at);
      NextHot(f, n + 1);
    });
  }

  size_t PickGateway(const Arrival& a) {
    const size_t n = gateways_.size();
    if (o_.spread == "even") return static_cast<size_t>(issued_ % n);
    if (o_.spread == "random") return static_cast<size_t>(arrivals_rng_() % n);
    uint64_t h = a.index * 2 + static_cast<uint64_t>(a.kind);
    h = (h ^ (h >> 31)) * 0x9e3779b97f4a7c15ull;
    return static_cast<size_t>((h >> 32) % n);
  }

  SecondStats& SecondOf(int64_t t_us) {
    const size_t i = static_cast<size_t>(std::max<int64_t>(0, t_us - t0_) / 1'000'000);
    while (seconds_.size() <= i) seconds_.emplace_back();
    return seconds_[i];
  }

  void Issue(const Arrival& a, int64_t intended_us) {
    const size_t g = PickGateway(a);
    ++issued_;
    if (intended_us >= measure_us_) ++issued_measured_;
    ++SecondOf(intended_us).offered;
    const Kind kind = a.kind;
    const size_t index = a.index;
    const int64_t cost = a.cost;
    const bool checked = checked_(a);
    gateways_[g]->DecideAsync(
        a.request, [this, g, kind, index, cost, checked, intended_us](client::Decision d) {
          Done(g, kind, index, cost, checked, intended_us, d);
        });
  }

  void Done(size_t g, Kind kind, size_t index, int64_t cost, bool checked, int64_t intended_us,
            const client::Decision& d) {
    const int64_t now = sched_.NowUs();
    DecisionRecord r;
    r.intended_us = intended_us;
    r.done_us = now;
    r.index = static_cast<uint32_t>(index);
    r.gateway = static_cast<uint16_t>(g);
    r.kind = static_cast<uint8_t>(kind);
    r.source = static_cast<uint8_t>(d.source);
    r.cost = static_cast<int32_t>(cost);
    r.retry_after_ms =
        d.retry_after == client::kRetryNever
            ? INT32_MAX
            : static_cast<int32_t>(std::clamp<int64_t>(d.retry_after.count(), 0, INT32_MAX));
    r.allowed = d.allowed && d.error.empty();
    r.error = !d.error.empty();
    r.checked = checked;
    r.measured = intended_us >= measure_us_;
    records_.push_back(r);
    SecondStats& second = SecondOf(now);
    ++second.decided;
    if (d.source == client::Source::kFallback) ++second.fallbacks;
    const uint64_t latency = static_cast<uint64_t>(now - intended_us);
    second.latency->Record(latency);
    if (intended_us < measure_us_) return;
    latency_.Record(latency);
    ++decided_measured_;
    ++by_source_[static_cast<size_t>(d.source)];
    if (r.error) {
      if (errors_++ == 0) first_error_ = d.error;
    } else if (r.allowed) {
      ++allowed_;
    }
  }

  // Sweeps every 100 ms and hot-key ticks every second, as limiterd's sweeper does.
  void Periodic(int64_t n) {
    if (t0_ + n * 100'000 > end_us_ + 1'000'000) return;
    sched_.After(t0_ + n * 100'000 - sched_.NowUs(), [this, n] {
      net_.Periodic(n % 10 == 0 && n > 0);
      Periodic(n + 1);
    });
  }

  void Schedule(const Fault& f) {
    auto at = [&](int64_t us, std::function<void()> fn) {
      sched_.After(t0_ + us - sched_.NowUs(), std::move(fn));
    };
    const size_t node = static_cast<size_t>(f.node);
    switch (f.kind) {
      case Fault::Kind::kKill:
        at(f.at_us, [this, node] {
          // Its keys lose their state: one more burst each (the crash promise).
          if (!net_.up(node)) return;  // down already
          killed_rings_.push_back({members_, node});
          net_.Kill(node);
        });
        if (f.until_us >= 0) {
          at(f.until_us,
             [this, node] { net_.Restart(node, NewNode(Options(static_cast<int>(node)))); });
        }
        break;
      case Fault::Kind::kPartition:
        at(f.at_us, [this, &f, node] { net_.Cut(f.gateway_from, f.gateway_to, node, true); });
        if (f.until_us >= 0) {
          at(f.until_us, [this, &f, node] { net_.Cut(f.gateway_from, f.gateway_to, node, false); });
        }
        break;
      case Fault::Kind::kSlow:
        at(f.at_us, [this, &f, node] { net_.Slow(node, f.factor, true); });
        if (f.until_us >= 0) at(f.until_us, [this, &f, node] { net_.Slow(node, f.factor, false); });
        break;
      case Fault::Kind::kAddNode:
        at(f.at_us, [this] { AddNode(); });
        break;
      case Fault::Kind::kHotTenant:
        NextHot(f, 0);
        break;
    }
  }

  // A node joins: it waits for its keys' last owners, each member adopts the new list and
  // hands the keys that move (directly, as the hand-off's own connections would); gateways
  // learn the list from WrongOwner answers.
  void AddNode() {
    const std::vector<std::string> previous = members_;
    const size_t i = net_.nodes();
    members_.push_back(NodeAddress(i));
    ++generation_;
    NodeOptions o = Options(static_cast<int>(i));
    // As limiterd joins: it starts from its own (older) list with every key gated, then adopts
    // the new one, waiting for each key it gains from that key's last owner.
    o.generation = generation_ - 1;
    o.join_gate = true;
    Node& joiner = *net_.AddNode(members_.back(), NewNode(o)).node;
    if (Status e = joiner.ownership().Join(previous, members_, generation_); !e.ok()) {
      setup_errors_.push_back(e.error());
    }
    for (size_t n = 0; n < i; ++n) {
      if (!net_.up(n)) continue;
      if (Status e = net_.endpoint(n).node->ownership().SetMembers(members_, generation_);
          !e.ok()) {
        setup_errors_.push_back(e.error());
      }
    }
    sched_.After(1000, [this, i] {
      for (size_t n = 0; n < i; ++n) net_.RunHandoffs(n);
    });
  }

  void Progress(std::ostream& out, int64_t second) {
    const uint64_t ops = StoreOps();
    SecondStats& s = SecondOf(t0_ + (second - 1) * 1'000'000);
    s.store_ops = ops - last_ops_;
    last_ops_ = ops;
    if (o_.quiet) return;
    char line[200];
    std::snprintf(line, sizeof(line),
                  "[%3" PRId64 "s] offered %7" PRIu64 "/s  decided %7" PRIu64
                  "/s  store ops %6" PRIu64 "/s  p99 %6" PRIu64 " us  fallbacks %5" PRIu64 "%s\n",
                  second, s.offered, s.decided, s.store_ops, s.latency->Read().Quantile(0.99),
                  s.fallbacks, second * 1e6 <= o_.warmup_s * 1e6 ? "  (warm-up)" : "");
    out << line << std::flush;
  }

  // Per kind and key rank: how many times the key's owner lost its state.
  std::vector<std::vector<uint16_t>> Resets() const;

  const FleetSimOptions& o_;
  const Scenario s_;
  const PolicySet& policies_;
  const CheckedArrivals checked_;
  const Workload workload_;
  const std::vector<Fault> faults_;
  sim::SimScheduler sched_{kStartUs};
  sim::SimClock clock_;
  sim::SimNetwork net_;
  std::vector<std::unique_ptr<ClientCore>> gateways_;
  std::vector<std::string> members_;
  uint64_t generation_ = 1;
  mutable uint64_t lives_ = 0;
  std::mt19937_64 arrivals_rng_, hot_rng_;
  int64_t t0_ = 0, measure_us_ = 0, end_us_ = 0;
  uint64_t issued_ = 0, issued_measured_ = 0, decided_measured_ = 0, allowed_ = 0, errors_ = 0;
  uint64_t ops_at_measure_ = 0, ops_at_end_ = 0, last_ops_ = 0;
  std::array<uint64_t, 3> by_source_{};
  std::array<uint64_t, kOpKinds> sent_at_measure_{}, sent_at_end_{};
  std::string first_error_;
  Histogram latency_;
  std::deque<SecondStats> seconds_;
  std::vector<DecisionRecord> records_;
  std::vector<std::pair<std::vector<std::string>, size_t>> killed_rings_;
  std::vector<std::string> setup_errors_;
};

std::vector<std::vector<uint16_t>> FleetSim::Resets() const {
  std::vector<std::vector<uint16_t>> resets(kKinds);
  for (int k = 0; k < kKinds; ++k)
    resets[static_cast<size_t>(k)].resize(workload_.count(static_cast<Kind>(k)));
  const Policy* api = policies_.Find("api_key");
  for (const auto& [members, killed] : killed_rings_) {
    const Ring ring(members);
    for (int k = 0; k < kKinds; ++k) {
      const Kind kind = static_cast<Kind>(k);
      for (size_t i = 0; i < workload_.count(kind); ++i) {
        const std::string_view routing =
            kind == kApiKey
                ? protocol::RoutingKey(*api, workload_.name(kind, i), workload_.tenant_of_key(i))
                : std::string_view(workload_.name(kind, i));
        if (ring.OwnerIndex(routing) == killed) ++resets[static_cast<size_t>(k)][i];
      }
    }
  }
  return resets;
}

Json FleetSim::Report() const {
  const Result<std::vector<KindLimits>> limits_of =
      LimitsOf(policies_, s_.gateways, o_.deadline_us);
  // RunFleetSim checked that the policy file has every policy LimitsOf needs.
  LIMITER_CHECK(limits_of.ok(), limits_of.error());
  const std::vector<KindLimits>& limits = *limits_of;
  const std::vector<std::vector<uint16_t>> resets = Resets();
  const Accuracy a = CheckAccuracy(records_, limits, workload_, &resets);
  const StoreOpFloorResult floor_parts = StoreOpFloor(records_, limits);
  const uint64_t floor = floor_parts.total();
  const uint64_t store_ops = ops_at_end_ - ops_at_measure_;
  const double span_s = o_.duration_s;
  const double offered = static_cast<double>(issued_measured_) / span_s;
  const double achieved = static_cast<double>(decided_measured_) / span_s;
  const Histogram::Snapshot latency = latency_.Read();
  Json faults = Json::array();
  for (const Fault& f : faults_) faults.push_back(f.text);
  Json r = {{"mode", "sim"},
            {"scenario", o_.scenario},
            {"seed", o_.seed},
            {"gateways", s_.gateways},
            {"nodes", static_cast<int>(net_.nodes())},
            {"rate", s_.rate},
            {"duration_s", o_.duration_s},
            {"warmup_s", o_.warmup_s},
            {"spread", o_.spread},
            {"deadline_us", o_.deadline_us},
            {"faults", faults},
            {"model",
             {{"one_way_median_us", o_.model.one_way_median_us},
              {"one_way_sigma", o_.model.one_way_sigma},
              {"node_frame_us", o_.model.frame_us},
              {"node_op_us", o_.model.op_us},
              {"node_threads", o_.model.threads}}},
            {"offered_rps", offered},
            {"achieved_rps", achieved},
            {"achieved_ratio", offered > 0 ? achieved / offered : 0},
            {"allowed", allowed_},
            {"denied", decided_measured_ - allowed_ - errors_},
            {"errors", errors_},
            {"by_source",
             {{"store", by_source_[0]}, {"lease", by_source_[1]}, {"fallback", by_source_[2]}}},
            {"store_ops_per_s", static_cast<double>(store_ops) / span_s},
            {"store_ops_per_request", issued_measured_ ? static_cast<double>(store_ops) /
                                                             static_cast<double>(issued_measured_)
                                                       : 0},
            {"store_ops_floor", floor},
            {"store_ops_floor_per_s", static_cast<double>(floor) / span_s},
            {"store_ops_floor_by_kind",
             {{"leases", floor_parts.leases},
              {"checks", floor_parts.checks},
              {"denials", floor_parts.denials}}},
            {"store_ops_to_floor",
             floor ? static_cast<double>(store_ops) / static_cast<double>(floor) : 0},
            {"p50_us", latency.Quantile(0.5)},
            {"p99_us", latency.Quantile(0.99)},
            {"p999_us", latency.Quantile(0.999)},
            {"max_us", latency.max},
            {"node_load", Json::array()},
            {"per_second", Json::array()}};
  r.update(AccuracyJson(a));
  if (!first_error_.empty()) r["first_error"] = first_error_;
  if (!setup_errors_.empty()) r["setup_errors"] = setup_errors_;
  client::Counters total;
  for (const auto& g : gateways_) {
    const client::Counters c = g->counters();
    for (int i = 0; i < 4; ++i) total.fallback_by_class[i] += c.fallback_by_class[i];
    total.deadline_misses += c.deadline_misses;
    total.store_errors += c.store_errors;
    total.leases += c.leases;
    total.store_calls += c.store_calls;
  }
  auto sent = [&](OpKind k) {
    const size_t i = static_cast<size_t>(k);
    return sent_at_end_[i] - sent_at_measure_[i];
  };
  r["store_ops_by_kind"] = {{"check", sent(OpKind::kCheck)},
                            {"lease", sent(OpKind::kLease)},
                            {"return", sent(OpKind::kReturn)},
                            {"split", sent(OpKind::kSplit)}};
  r["fallbacks_by_class"] = {{"security", total.fallback_by_class[0]},
                             {"contract", total.fallback_by_class[1]},
                             {"billing", total.fallback_by_class[2]},
                             {"capacity", total.fallback_by_class[3]}};
  r["deadline_misses"] = total.deadline_misses;
  r["store_errors"] = total.store_errors;
  const double run_us = static_cast<double>(end_us_ - t0_);
  double busiest = 0;
  for (size_t n = 0; n < net_.nodes(); ++n) {
    const sim::SimNetwork::NodeLoad& l = net_.load(n);
    const Histogram::Snapshot wait = l.queue_wait_us.Read();
    double peak = 0;
    for (const auto& [second, busy] : l.busy_by_second) peak = std::max(peak, busy);
    const double capacity_us = 1e6 * o_.model.threads;
    busiest = std::max(busiest, peak / capacity_us);
    r["node_load"].push_back(
        {{"address", net_.address(n)},
         {"frames", l.frames},
         {"ops", l.ops},
         {"ops_per_frame",
          l.frames ? static_cast<double>(l.ops) / static_cast<double>(l.frames) : 0},
         {"utilization", l.busy_us / (run_us * o_.model.threads)},
         {"peak_second_utilization", peak / capacity_us},
         {"queue_wait_p99_us", wait.Quantile(0.99)},
         {"queue_wait_max_us", wait.max},
         {"most_queued", l.most_queued}});
  }
  r["busiest_node_peak_utilization"] = busiest;
  for (size_t i = 0; i < seconds_.size(); ++i) {
    const SecondStats& s = seconds_[i];
    r["per_second"].push_back({{"t", static_cast<double>(i + 1)},
                               {"offered", s.offered},
                               {"decided", s.decided},
                               {"store_ops", s.store_ops},
                               {"p99_us", s.latency->Read().Quantile(0.99)},
                               {"fallbacks", s.fallbacks},
                               {"warm_up", static_cast<double>(i) < o_.warmup_s}});
  }
  return r;
}

std::string Fmt(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

}  // namespace

int RunFleetSim(const FleetSimOptions& o, std::ostream& out, std::ostream& err) {
  auto fail = [&](const std::string& why, int code = 1) {
    err << "limiter-bench sim: " << why << '\n';
    return code;
  };
  Result<Scenario> resolved = ResolveScenario(o.scenario, o.rate, o.gateways, o.spread);
  if (!resolved) return fail(resolved.error(), 2);
  Scenario& scenario = *resolved;
  if (o.nodes > 0) scenario.nodes = o.nodes;
  Result<std::vector<Fault>> faults = sim::ParseFaults(o.faults);
  if (!faults) return fail(faults.error(), 2);
  if (Status s = sim::CheckFaults(*faults, scenario.nodes, scenario.gateways, scenario.tenants);
      !s.ok()) {
    return fail(s.error(), 2);
  }
  Result<PolicySet> policies = LoadPolicyFile(o.policies);
  if (!policies) return fail(policies.error());
  for (const char* name : {"api_key", "login"}) {
    if (!policies->Find(name)) return fail(o.policies + " has no policy '" + name + "'", 2);
  }
  if (!o.report_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.report_dir, ec);
    if (ec) return fail("cannot create " + o.report_dir + ": " + ec.message());
  }
  // Key ids under a fixed seed, so that the nodes' tables and sketches repeat. A process that
  // made ids already (a test binary) keeps its seed: then only the seeded draws repeat.
  if (!KeyIdSeedUsed()) SetKeyIdSeed(kSimKeySeed);
  out << "limiter-bench sim: scenario " << o.scenario << ", " << scenario.rate << " requests/s for "
      << o.duration_s << " simulated s after " << o.warmup_s << " s warm-up, " << scenario.gateways
      << " gateways, " << scenario.nodes << " nodes, seed " << o.seed << "\n"
      << std::flush;
  const auto wall_start = std::chrono::steady_clock::now();
  auto sim = std::make_unique<FleetSim>(o, scenario, *policies, std::move(faults).value());
  sim->Run(out);
  const Json report = sim->Report();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const std::string md = SimMarkdown(report);
  out << '\n' << md;
  const double simulated = o.warmup_s + o.duration_s + 1;
  out << Fmt("\nsimulated %.0f s in %.1f s of wall time: %.2f simulated s per wall s\n", simulated,
             wall, simulated / std::max(1e-9, wall));
  if (!o.json_file.empty()) {
    std::ofstream f(o.json_file);
    f << report.dump(2) << '\n';
    if (!f) return fail("cannot write " + o.json_file);
  }
  if (!o.report_dir.empty()) {
    std::ofstream f(o.report_dir + "/report.md");
    f << md;
    if (!f) return fail("cannot write " + o.report_dir + "/report.md");
    std::vector<ChartRow> rows;
    for (const Json& s : report["per_second"]) {
      rows.push_back({s["t"].get<double>(), s["decided"].get<uint64_t>(),
                      s["store_ops"].get<uint64_t>(), s["p99_us"].get<uint64_t>()});
    }
    if (Status s = WriteChart(o.report_dir, rows,
                              "limiter-bench sim " + o.scenario + ": throughput and p99");
        !s.ok()) {
      return fail(s.error());
    }
    std::ofstream wall_file(o.report_dir + "/wall.json");
    wall_file << Json{{"simulated_s", simulated},
                      {"wall_s", wall},
                      {"simulated_s_per_wall_s", simulated / std::max(1e-9, wall)}}
                     .dump(2)
              << '\n';
    out << "report: " << o.report_dir << "/report.md, chart.png (wall time in wall.json)\n";
  }
  return 0;
}

}  // namespace limiter::bench
