#include "bench/cluster_run.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>
#include <ostream>
#include <random>
#include <thread>

#include "client/asio_scheduler.h"
#include "client/client_core.h"
#include "client/tcp_transport.h"
#include "common/policy.h"

namespace limiter::bench {
namespace {

double ProcessCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int64_t WallUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One gateway: a whole client, sharing its loop's I/O thread with the others.
struct Gateway {
  std::unique_ptr<TcpTransport> transport;
  std::unique_ptr<ClientCore> core;
};

// One event loop's share of the arrivals: rate/loops of them, each for one of the loop's
// gateway slots (g = loop, loop + loops, ...). Every part draws the whole stream, so the
// scenario's arrivals are the same however it is split; a slot whose gateway belongs to
// another part is skipped. `dry`: no gateways at all, only the draws (the arrival cost).
// Everything runs on the scheduler's thread; the progress counters may be read from any.
class LoopRun {
 public:
  LoopRun(const ClusterBenchOptions& o, const CheckedArrivals& checked, const Workload& w, int loop,
          int loops, double rate, AsioScheduler& scheduler, std::vector<Gateway*> slots)
      : o_(o),
        checked_(checked),
        w_(w),
        loop_(loop),
        loops_(loops),
        rate_(rate),
        scheduler_(scheduler),
        slots_(std::move(slots)),
        rng_(o.seed * 1000003 + static_cast<uint64_t>(loop)) {}

  // Runs the arrivals from `t0_us` (the scheduler's clock, which every loop shares) for
  // `seconds`; the future is ready once every decision is in.
  // Store ops are read on the loop's own thread at `measure_us` and when the last arrival is
  // issued, so they cover the same stretch as the arrivals measured.
  std::future<void> Start(int64_t t0_us, double seconds, bool dry, int64_t measure_us = 0) {
    dry_ = dry;
    scheduler_.Post([this, t0_us, seconds, measure_us] {
      t0_ = t0_us;
      measure_us_ = measure_us;
      end_us_ = t0_ + static_cast<int64_t>(seconds * 1e6);
      next_us_ = t0_;
      scheduler_.After(std::max<int64_t>(0, t0_ - scheduler_.NowUs()), [this] { Tick(); });
      scheduler_.After(std::max<int64_t>(0, t0_ + measure_us - scheduler_.NowUs()),
                       [this] { ops_at_measure_ = StoreOps(); });
    });
    return finished_.get_future();
  }

  uint64_t offered_so_far() const { return offered_.load(std::memory_order_relaxed); }
  uint64_t decided_so_far() const { return decided_.load(std::memory_order_relaxed); }
  void AddLatencyTo(Histogram::Snapshot& s) const { latency_.AddTo(s); }
  int64_t TakeLag() { return lag_us_.exchange(0, std::memory_order_relaxed); }
  uint64_t generated() const { return issued_; }
  uint64_t store_ops_measured() const { return ops_at_end_ - ops_at_measure_; }
  // Read after the future is ready.
  std::vector<DecisionRecord>& records() { return records_; }
  const std::string& first_error() const { return first_error_; }

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

  uint64_t StoreOps() const {
    uint64_t ops = 0;
    for (const Gateway* g : slots_) {
      if (g != nullptr && !dry_) ops += g->core->counters().store_calls;
    }
    return ops;
  }

  void Issue(int64_t intended_us) {
    const Arrival a = w_.Draw(rng_);
    const size_t slot = PickSlot(a);
    Gateway* g = slots_[slot];
    if (dry_ || g == nullptr) return;
    offered_.fetch_add(1, std::memory_order_relaxed);
    ++outstanding_;
    DecisionRecord r;
    r.intended_us = intended_us - t0_;
    r.index = static_cast<uint32_t>(a.index);
    r.gateway = static_cast<uint16_t>(loop_ + static_cast<int>(slot) * loops_);
    r.kind = static_cast<uint8_t>(a.kind);
    r.cost = static_cast<int32_t>(a.cost);
    r.checked = checked_(a);
    g->core->DecideAsync(a.request, [this, r](client::Decision d) mutable { Done(r, d); });
  }

  // even: round robin; random: uniformly; sticky: each API key's (or account's) requests
  // come from one gateway of this loop's slots (an L4 balancer with keep-alive).
  size_t PickSlot(const Arrival& a) {
    if (o_.spread == "even") return static_cast<size_t>(issued_ % slots_.size());
    if (o_.spread == "random") return static_cast<size_t>(rng_() % slots_.size());
    uint64_t h = a.index * 2 + static_cast<uint64_t>(a.kind);
    h = (h ^ (h >> 31)) * 0x9e3779b97f4a7c15ull;
    return static_cast<size_t>((h >> 32) % slots_.size());
  }

  void Done(DecisionRecord r, const client::Decision& d) {
    r.measured = r.intended_us >= measure_us_;
    const int64_t now = scheduler_.NowUs();
    r.done_us = now - t0_;
    r.source = static_cast<uint8_t>(d.source);
    r.allowed = d.allowed && d.error.empty();
    r.error = !d.error.empty();
    r.retry_after_ms =
        d.retry_after == client::kRetryNever
            ? INT32_MAX
            : static_cast<int32_t>(std::clamp<int64_t>(d.retry_after.count(), 0, INT32_MAX));
    if (r.error && first_error_.empty()) first_error_ = d.error;
    records_.push_back(r);
    latency_.Record(static_cast<uint64_t>(std::max<int64_t>(0, r.done_us - r.intended_us)));
    decided_.fetch_add(1, std::memory_order_relaxed);
    --outstanding_;
    MaybeFinish();
  }

  void MaybeFinish() {
    if (issuing_done_ && outstanding_ == 0 && !finished_set_) {
      finished_set_ = true;
      finished_.set_value();
    }
  }

  const ClusterBenchOptions& o_;
  const CheckedArrivals& checked_;
  const Workload& w_;
  const int loop_, loops_;
  const double rate_;
  AsioScheduler& scheduler_;
  const std::vector<Gateway*> slots_;
  std::mt19937_64 rng_;
  bool dry_ = false;
  int64_t t0_ = 0, measure_us_ = 0, end_us_ = 0, next_us_ = 0, last_tick_us_ = 0;
  uint64_t issued_ = 0, outstanding_ = 0;
  uint64_t ops_at_measure_ = 0, ops_at_end_ = 0;
  std::vector<DecisionRecord> records_;
  std::string first_error_;
  Histogram latency_;
  std::atomic<uint64_t> offered_{0}, decided_{0};
  std::atomic<int64_t> lag_us_{0};
  bool issuing_done_ = false, finished_set_ = false;
  std::promise<void> finished_;
};

// The loops, their gateways, and the run.
class Harness {
 public:
  Harness(const ClusterRunSpec& spec, const ClusterBenchOptions& o, const PolicySet& policies,
          const Workload& workload, const std::vector<std::string>& members)
      : spec_(spec), o_(o), workload_(workload), checked_(policies) {
    const Scenario& s = spec.scenario;
    loops_ = std::max(1, std::min(o.loops, s.gateways));
    for (int l = 0; l < loops_; ++l) schedulers_.push_back(std::make_unique<AsioScheduler>());
    ClientCoreOptions core;
    core.gateways = s.gateways;
    core.deadline_us = o.deadline_us;
    gateways_.resize(static_cast<size_t>(s.gateways));
    for (int g = 0; g < s.gateways; ++g) {
      if (g % spec.parts != spec.part) continue;
      AsioScheduler& scheduler = *schedulers_[static_cast<size_t>(g % loops_)];
      Gateway& gw = gateways_[static_cast<size_t>(g)];
      core.seed = o.seed * 1'000'003 + static_cast<uint64_t>(g) + 1;
      gw.transport = std::make_unique<TcpTransport>(scheduler.io(), o.access);
      gw.core = std::make_unique<ClientCore>(policies, members, scheduler, *gw.transport, core);
      gw.core->WarmUp();
    }
  }

  ~Harness() {
    // Connections belong to their loop's thread: close them there as its last handler.
    for (size_t l = 0; l < schedulers_.size(); ++l) {
      schedulers_[l]->RunAndStop([&] {
        for (size_t g = l; g < gateways_.size(); g += schedulers_.size()) {
          if (gateways_[g].transport) gateways_[g].transport->CloseAll();
        }
      });
    }
  }

  int loops() const { return loops_; }

  // The CPU one arrival's generation costs alone: `seconds` of the same arrivals, no
  // gateways. Returns (arrivals, CPU seconds).
  std::pair<uint64_t, double> MeasureArrivals(double seconds) {
    std::vector<std::unique_ptr<LoopRun>> dry = MakeRuns(/*with_gateways=*/false);
    const double cpu = ProcessCpuSeconds();
    std::vector<std::future<void>> done;
    const int64_t t0 = schedulers_[0]->NowUs() + 20'000;
    for (auto& r : dry) done.push_back(r->Start(t0, seconds, /*dry=*/true));
    for (auto& f : done) f.wait();
    uint64_t n = 0;
    for (auto& r : dry) n += r->generated();
    return {n, ProcessCpuSeconds() - cpu};
  }

  // Runs the arrivals, writing a progress line a second; an error when the decisions were not
  // all in 10 s after the last arrival was due.
  Status Run(std::ostream& out, RunTotals& totals) {
    runs_ = MakeRuns(/*with_gateways=*/true);
    const double warmup = o_.warmup_s, total_s = o_.warmup_s + o_.duration_s;
    std::vector<std::future<void>> finished;
    const int64_t t0 = schedulers_[0]->NowUs() + 50'000;
    const auto t0_steady = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    totals.t0_wall_us = WallUs() + 50'000;
    const double cpu_before = ProcessCpuSeconds();
    const int64_t measure_us = static_cast<int64_t>(warmup * 1e6);
    for (auto& r : runs_) finished.push_back(r->Start(t0, total_s, /*dry=*/false, measure_us));
    const auto until =
        t0_steady + std::chrono::milliseconds(static_cast<int64_t>((total_s + 10) * 1000));
    uint64_t last_offered = 0, last_decided = 0, last_ops = 0;
    Histogram::Snapshot last_latency;
    bool complete = false;
    for (int second = 1;; ++second) {
      const auto tick = t0_steady + std::chrono::seconds(second);
      bool all_done = true;
      for (auto& f : finished) {
        if (f.wait_until(std::min(tick, until)) != std::future_status::ready) all_done = false;
      }
      const uint64_t ops = StoreOps();
      if (all_done) {
        complete = true;
        break;
      }
      if (std::chrono::steady_clock::now() >= until) break;
      uint64_t offered = 0, decided = 0;
      int64_t lag = 0;
      Histogram::Snapshot latency;
      for (auto& r : runs_) {
        offered += r->offered_so_far();
        decided += r->decided_so_far();
        r->AddLatencyTo(latency);
        lag = std::max(lag, r->TakeLag());
      }
      store_ops_by_second_.push_back(ops - last_ops);
      lag_by_second_.push_back(lag);
      Histogram::Snapshot d;
      for (size_t i = 0; i < d.counts.size(); ++i)
        d.counts[i] = latency.counts[i] - last_latency.counts[i];
      d.count = latency.count - last_latency.count;
      d.max = latency.max;
      char line[240];
      std::snprintf(line, sizeof(line),
                    "[%3ds] offered %7" PRIu64 "/s  decided %7" PRIu64 "/s  store ops %6" PRIu64
                    "/s  p99 %6" PRIu64 " us  loop lag %5" PRId64 " us%s\n",
                    second, offered - last_offered, decided - last_decided, ops - last_ops,
                    d.Quantile(0.99), lag, second <= warmup ? "  (warm-up)" : "");
      out << line << std::flush;
      last_offered = offered;
      last_decided = decided;
      last_ops = ops;
      last_latency = latency;
    }
    totals.harness_cpu_s = ProcessCpuSeconds() - cpu_before;
    if (!complete) return Error{"the run had not finished 10 s after its last arrival was due"};
    return Status::Ok();
  }

  // Everything the run measured, after Run.
  void Collect(RunTotals& t) {
    const int64_t measure_us = static_cast<int64_t>(o_.warmup_s * 1e6);
    int64_t last_done = 0;
    for (auto& r : runs_) {
      if (t.first_error.empty()) t.first_error = r->first_error();
      for (const DecisionRecord& d : r->records()) {
        t.records.push_back(d);
        const size_t second = static_cast<size_t>(std::max<int64_t>(0, d.done_us) / 1'000'000);
        if (t.seconds.size() <= second) t.seconds.resize(second + 1);
        SecondTotals& s = t.seconds[second];
        ++s.decided;
        if (d.source == static_cast<uint8_t>(client::Source::kFallback)) ++s.fallbacks;
        const uint64_t latency =
            static_cast<uint64_t>(std::max<int64_t>(0, d.done_us - d.intended_us));
        s.latency.Record(latency);
        const size_t arrived = static_cast<size_t>(std::max<int64_t>(0, d.intended_us) / 1'000'000);
        if (t.seconds.size() <= arrived) t.seconds.resize(arrived + 1);
        ++t.seconds[arrived].offered;
        if (d.intended_us < measure_us) continue;
        last_done = std::max(last_done, d.done_us);
        ++t.issued;
        ++t.decided;
        ++t.by_source[d.source];
        if (d.error) {
          ++t.errors;
        } else if (d.allowed) {
          ++t.allowed;
        }
        t.latency.Record(latency);
      }
      r->records().clear();
    }
    for (size_t i = 0; i < t.seconds.size() && i < store_ops_by_second_.size(); ++i) {
      t.seconds[i].store_ops = store_ops_by_second_[i];
      t.seconds[i].lag_us = lag_by_second_[i];
    }
    t.decided_span_s = std::max(o_.duration_s, static_cast<double>(last_done - measure_us) / 1e6);
    for (auto& r : runs_) t.store_ops += r->store_ops_measured();
    for (const Gateway& g : gateways_) {
      if (!g.core) continue;
      const client::Counters c = g.core->counters();
      t.store_errors += c.store_errors;
      t.deadline_misses += c.deadline_misses;
      for (int i = 0; i < 4; ++i)
        t.fallback_by_class[static_cast<size_t>(i)] += c.fallback_by_class[i];
    }
    for (auto& r : runs_) t.arrivals_generated += r->generated();
  }

 private:
  std::vector<std::unique_ptr<LoopRun>> MakeRuns(bool with_gateways) {
    std::vector<std::unique_ptr<LoopRun>> runs;
    const Scenario& s = spec_.scenario;
    for (int l = 0; l < loops_; ++l) {
      std::vector<Gateway*> slots;
      for (int g = l; g < s.gateways; g += loops_) {
        Gateway& gw = gateways_[static_cast<size_t>(g)];
        slots.push_back(with_gateways && gw.core ? &gw : nullptr);
      }
      runs.push_back(std::make_unique<LoopRun>(o_, checked_, workload_, l, loops_, s.rate / loops_,
                                               *schedulers_[static_cast<size_t>(l)],
                                               std::move(slots)));
    }
    return runs;
  }

  uint64_t StoreOps() const {
    uint64_t ops = 0;
    for (const Gateway& g : gateways_) {
      if (g.core) ops += g.core->counters().store_calls;
    }
    return ops;
  }

  const ClusterRunSpec spec_;
  const ClusterBenchOptions& o_;
  const Workload& workload_;
  const CheckedArrivals checked_;
  int loops_ = 1;
  std::vector<std::unique_ptr<AsioScheduler>> schedulers_;
  std::vector<Gateway> gateways_;
  std::vector<std::unique_ptr<LoopRun>> runs_;
  std::vector<uint64_t> store_ops_by_second_;
  std::vector<int64_t> lag_by_second_;
};

}  // namespace

Result<RunTotals> RunClusterOnce(const ClusterRunSpec& spec, const ClusterBenchOptions& o,
                                 const PolicySet& policies, const Workload& workload,
                                 const std::vector<std::string>& members, std::ostream& out) {
  RunTotals t;
  const Scenario& s = spec.scenario;
  t.scenario = o.scenario;
  t.seed = o.seed;
  t.rate = s.rate;
  t.gateways = s.gateways;
  t.nodes = static_cast<int>(members.size());
  t.duration_s = o.duration_s;
  t.warmup_s = o.warmup_s;
  t.spread = o.spread;
  t.deadline_us = o.deadline_us;
  t.parts = spec.parts;
  t.parts_included = {spec.part};
  Harness harness(spec, o, policies, workload, members);
  t.loops = harness.loops();
  // What the arrivals cost alone, per arrival: a second of them (at most the run's length).
  const auto [arrivals, cpu] = harness.MeasureArrivals(std::min(1.0, o.duration_s));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the connections open
  if (Status ran = harness.Run(out, t); !ran.ok()) {
    char why[200];
    std::snprintf(why, sizeof(why),
                  "%s: this machine cannot issue and decide %.0f requests/s (lower --rate)",
                  ran.error().c_str(), s.rate);
    return Error{why};
  }
  harness.Collect(t);
  t.arrival_cpu_s =
      arrivals ? cpu / static_cast<double>(arrivals) * static_cast<double>(t.arrivals_generated)
               : 0;
  return t;
}

}  // namespace limiter::bench
