#include "bench/hot_key_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>
#include <thread>
#include <vector>

#include "bench/node_load.h"
#include "protocol/node_connection.h"
#include "protocol/request_builder.h"
#include "protocol/ring.h"
#include "protocol/rules.h"
#include "protocol/wire.h"

namespace limiter::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A client renews its view of a split well before it lapses, reporting what it sent to the
// sub-buckets (the owner merges the key back when those reports fall).
constexpr auto kRenewEvery = std::chrono::milliseconds(500);
// The split run waits at most this long for the hot key to be split before measuring.
constexpr auto kSplitWait = std::chrono::seconds(10);

struct SplitView {
  uint16_t k = 0;  // 0: not split (as far as this thread knows)
  uint32_t epoch = 0;
  Clock::time_point valid_until;
  Clock::time_point renew_at;
  uint32_t next = 0;  // the sub-bucket of the next op
  int64_t unreported = 0;
  std::vector<size_t> owners;  // of each sub-bucket ("key#i"), found once per k
};

// What one load thread counted while measuring.
struct ThreadCounts {
  uint64_t checks = 0;      // answered with a decision
  uint64_t hot_checks = 0;  // of those, on the hot key (or its sub-buckets)
  uint64_t redirects = 0;   // answered "split": resent to the sub-buckets
  uint64_t errors = 0;
  std::string first_error;
  std::vector<uint64_t> by_node;
};

struct RunResult {
  bool split_seen = false;
  double seconds = 0;
  ThreadCounts counts;
  std::vector<double> node_cpu;  // CPUs each node used while measuring (-1: unknown)
};

std::string KeyOf(int key) { return "h" + std::to_string(key); }

// One load thread, closed loop: it draws checks, routes each to its node's next frame, and
// sends a frame once it holds `batch` checks. Each node has up to `depth` frames in flight;
// the thread waits only for the node whose frames are all in flight, so a slow node holds up
// only the checks routed to it, not the others' pipelines.
class LoadThread {
 public:
  LoadThread(const HotKeyBenchOptions& o, const Ring& ring, uint64_t seed)
      : o_(o),
        ring_(ring),
        rng_(seed),
        views_(static_cast<size_t>(o.keys)),
        nodes_(ring.members().size()) {
    for (int k = 0; k < o.keys; ++k) names_.push_back(KeyOf(k));
    counts_.by_node.assign(ring.members().size(), 0);
  }

  Status Connect() {
    for (size_t n = 0; n < nodes_.size(); ++n) {
      Result<std::unique_ptr<NodeConnection>> c =
          NodeConnection::Connect(ring_.members()[n], 5000, o_.access);
      if (!c) return Error{ring_.members()[n] + ": " + c.error()};
      nodes_[n].connection = std::move(c).value();
    }
    return Status::Ok();
  }

  // Draws `batch` checks and sends every frame that fills; replies are counted when
  // `counting`.
  Status Step(bool counting) {
    counting_ = counting;
    const Clock::time_point now = Clock::now();
    if (Status s = RenewSplits(now); !s.ok()) return s;
    std::uniform_real_distribution<double> draw(0, o_.hot_ratio + o_.keys - 1);
    for (int i = 0; i < o_.batch; ++i) {
      const double u = draw(rng_);
      const int key =
          u < o_.hot_ratio ? 0 : std::min(o_.keys - 1, 1 + static_cast<int>(u - o_.hot_ratio));
      SplitView& view = views_[static_cast<size_t>(key)];
      size_t n;
      if (view.k != 0 && now < view.valid_until) {
        const uint16_t index = static_cast<uint16_t>(view.next++ % view.k);
        n = view.owners[index];
        nodes_[n].builder.OnSubBucket(view.k, index, view.epoch);
        ++view.unreported;
      } else {
        view.k = 0;
        n = ring_.OwnerIndex(names_[static_cast<size_t>(key)]);
      }
      Node& node = nodes_[n];
      node.builder.Check(next_id_++, o_.policy, names_[static_cast<size_t>(key)]);
      node.pending.push_back(key);
      if (node.pending.size() >= static_cast<size_t>(o_.batch)) {
        if (Status s = Flush(n, kChecks); !s.ok()) return s;
      }
    }
    return Status::Ok();
  }

  bool hot_key_split() const { return views_[0].k != 0; }
  const ThreadCounts& counts() const { return counts_; }

 private:
  static constexpr int kChecks = -1;  // an in-flight frame of checks, not a renewal

  struct InFlight {
    int renewed_key = kChecks;  // a renewal of this key's split, or kChecks
    std::vector<int> keys;      // the key of each check, in frame order
  };
  struct Node {
    std::unique_ptr<NodeConnection> connection;
    RequestBuilder builder;
    std::vector<int> pending;  // keys of the checks in `builder`
    std::deque<InFlight> in_flight;
  };

  // Sends node n's frame: its pending checks, or a renewal of `renewed_key`'s split.
  Status Flush(size_t n, int renewed_key) {
    Node& node = nodes_[n];
    while (node.in_flight.size() >= static_cast<size_t>(o_.depth)) {
      if (Status s = ReceiveOne(n); !s.ok()) return s;
    }
    if (Status s = node.connection->Send(node.builder.Finish()); !s.ok()) {
      return Error{ring_.members()[n] + ": " + s.error()};
    }
    node.builder.Clear();
    InFlight sent;
    sent.renewed_key = renewed_key;
    sent.keys.swap(node.pending);
    node.in_flight.push_back(std::move(sent));
    return Status::Ok();
  }

  // Reads the reply to node n's oldest frame in flight.
  Status ReceiveOne(size_t n) {
    Node& node = nodes_[n];
    const std::string& member = ring_.members()[n];
    Result<const wire::Reply*> reply = node.connection->Receive();
    if (!reply) return Error{member + ": " + reply.error()};
    InFlight sent = std::move(node.in_flight.front());
    node.in_flight.pop_front();
    const wire::Reply& r = **reply;
    if (r.error()) return Error{member + " refused a frame: " + r.error()->str()};
    const size_t expected = sent.renewed_key == kChecks ? sent.keys.size() : 1;
    if (!r.ops() || r.ops()->size() != expected) {
      return Error{member + ": a reply with the wrong number of ops"};
    }
    if (sent.renewed_key != kChecks) {
      Learn(views_[static_cast<size_t>(sent.renewed_key)], sent.renewed_key, *r.ops()->Get(0),
            Clock::now());
      return Status::Ok();
    }
    for (size_t i = 0; i < sent.keys.size(); ++i) {
      const wire::OpReply& op = *r.ops()->Get(static_cast<flatbuffers::uoffset_t>(i));
      const int key = sent.keys[i];
      if (op.status() == wire::Status::Ok) {
        if (!counting_) continue;
        ++counts_.checks;
        ++counts_.by_node[n];
        if (key == 0) ++counts_.hot_checks;
      } else if (op.status() == wire::Status::Split) {
        Learn(views_[static_cast<size_t>(key)], key, op, Clock::now());
        if (counting_) ++counts_.redirects;
      } else if (counting_) {
        if (counts_.errors++ == 0) {
          counts_.first_error = wire::EnumNameStatus(op.status());
          if (op.error()) counts_.first_error += ": " + op.error()->str();
        }
      }
    }
    return Status::Ok();
  }

  void Learn(SplitView& view, int key, const wire::OpReply& op, Clock::time_point now) {
    if (op.status() != wire::Status::Split && op.status() != wire::Status::Ok) return;
    if (op.split_k() != view.owners.size()) {
      view.owners.clear();
      for (uint16_t i = 0; i < op.split_k(); ++i) {
        view.owners.push_back(
            ring_.OwnerIndex(protocol::SubBucketRoutingKey(names_[static_cast<size_t>(key)], i)));
      }
    }
    view.k = op.split_k();
    view.epoch = op.split_epoch();
    view.valid_until = now + std::chrono::milliseconds(op.split_valid_ms());
    view.renew_at = now + kRenewEvery;
  }

  // Renews (and reports on) the splits this thread uses, on their owners, as the client does.
  // The owner's pending checks go out first, in their own frame.
  Status RenewSplits(Clock::time_point now) {
    for (size_t key = 0; key < views_.size(); ++key) {
      SplitView& view = views_[key];
      if (view.k == 0 || now < view.renew_at) continue;
      const size_t owner = ring_.OwnerIndex(names_[key]);
      Node& node = nodes_[owner];
      if (!node.pending.empty()) {
        if (Status s = Flush(owner, kChecks); !s.ok()) return s;
      }
      node.builder.Split(0, o_.policy, names_[key], view.unreported);
      view.unreported = 0;
      view.renew_at = now + kRenewEvery;
      if (Status s = Flush(owner, static_cast<int>(key)); !s.ok()) return s;
    }
    return Status::Ok();
  }

  const HotKeyBenchOptions& o_;
  const Ring& ring_;
  std::mt19937_64 rng_;
  std::vector<std::string> names_;
  std::vector<SplitView> views_;
  std::vector<Node> nodes_;
  uint64_t next_id_ = 0;
  bool counting_ = false;
  ThreadCounts counts_;
};

Result<RunResult> RunOnce(const HotKeyBenchOptions& o, bool split) {
  LocalNodeOptions node;
  node.program = o.limiterd.empty() ? DefaultLimiterdPath() : o.limiterd;
  node.policies = o.policies;
  node.threads = o.node_threads;
  node.pin = o.pin;
  node.cpu_budget = o.node_cpu;
  node.extra_args = {"--hot-split-above", split ? std::to_string(o.split_above) : "0"};
  if (split) {
    node.extra_args.push_back("--hot-split");
    node.extra_args.push_back(std::to_string(o.split_k));
  }
  Result<std::vector<LocalNode>> cluster = StartLocalCluster(o.nodes, node);
  if (!cluster) return Error{cluster.error()};
  std::vector<std::string> members;
  for (const LocalNode& n : *cluster) members.push_back(n.address);
  const Ring ring(members);

  std::vector<std::unique_ptr<LoadThread>> loads;
  for (int t = 0; t < o.connections; ++t) {
    loads.push_back(
        std::make_unique<LoadThread>(o, ring, o.seed * 7919 + static_cast<uint64_t>(t)));
    if (Status s = loads.back()->Connect(); !s.ok()) return s;
  }
  // Warm up: until the hot key is split (split run), or for one second.
  std::atomic<int> phase{0};  // 0 warm-up, 1 measuring, 2 done
  std::atomic<bool> split_seen{false};
  std::vector<std::string> failures(loads.size());
  std::vector<std::thread> threads;
  for (size_t t = 0; t < loads.size(); ++t) {
    threads.emplace_back([&, t] {
      while (true) {
        const int p = phase.load(std::memory_order_relaxed);
        if (p == 2) break;
        if (Status s = loads[t]->Step(p == 1); !s.ok()) {
          failures[t] = s.error();
          phase = 2;
          break;
        }
        if (loads[t]->hot_key_split()) split_seen = true;
      }
    });
  }
  const Clock::time_point warm_start = Clock::now();
  const Clock::time_point warm_min = warm_start + std::chrono::seconds(1);
  while (Clock::now() < warm_min ||
         (split && !split_seen && Clock::now() < warm_start + kSplitWait)) {
    if (phase == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int expected = 0;
  std::vector<std::optional<double>> cpu_before;
  for (const LocalNode& n : *cluster) cpu_before.push_back(CpuSeconds(n.process->pid()));
  phase.compare_exchange_strong(expected, 1);
  const Clock::time_point start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(o.duration_s));
  phase = 2;
  const Clock::time_point end = Clock::now();
  // In the ring's order of members, as the checks are counted.
  std::vector<double> node_cpu(ring.members().size(), -1);
  for (size_t i = 0; i < cluster->size(); ++i) {
    const std::optional<double> after = CpuSeconds((*cluster)[i].process->pid());
    const auto at = std::find(ring.members().begin(), ring.members().end(), (*cluster)[i].address);
    if (!after || !cpu_before[i] || at == ring.members().end()) continue;
    node_cpu[static_cast<size_t>(at - ring.members().begin())] =
        (*after - *cpu_before[i]) / std::chrono::duration<double>(end - start).count();
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& f : failures) {
    if (!f.empty()) return Error{f};
  }
  RunResult result;
  result.split_seen = split_seen;
  result.seconds = std::chrono::duration<double>(end - start).count();
  result.node_cpu = std::move(node_cpu);
  result.counts.by_node.assign(ring.members().size(), 0);
  for (const auto& load : loads) {
    const ThreadCounts& c = load->counts();
    result.counts.checks += c.checks;
    result.counts.hot_checks += c.hot_checks;
    result.counts.redirects += c.redirects;
    if (result.counts.errors == 0 && c.errors > 0) result.counts.first_error = c.first_error;
    result.counts.errors += c.errors;
    for (size_t n = 0; n < c.by_node.size(); ++n) result.counts.by_node[n] += c.by_node[n];
  }
  return result;
}

// The largest node's share of the checks: the node that saturates first.
double BusiestShare(const RunResult& r) {
  uint64_t most = 0;
  for (uint64_t n : r.counts.by_node) most = std::max(most, n);
  return r.counts.checks ? static_cast<double>(most) / static_cast<double>(r.counts.checks) : 0;
}

nlohmann::json ToJson(const RunResult& r) {
  std::vector<double> shares;
  for (uint64_t n : r.counts.by_node) {
    shares.push_back(r.counts.checks ? static_cast<double>(n) / static_cast<double>(r.counts.checks)
                                     : 0);
  }
  return {{"checks_per_s", static_cast<double>(r.counts.checks) / r.seconds},
          {"hot_checks_per_s", static_cast<double>(r.counts.hot_checks) / r.seconds},
          {"node_shares", shares},
          {"busiest_node_share", BusiestShare(r)},
          {"node_cpus", r.node_cpu},
          {"redirects", r.counts.redirects},
          {"errors", r.counts.errors},
          {"hot_key_split", r.split_seen},
          {"seconds", r.seconds}};
}

void PrintRow(std::ostream& out, const char* name, const RunResult& r) {
  char line[256];
  std::string shares;
  for (uint64_t n : r.counts.by_node) {
    std::snprintf(line, sizeof(line), "%s%.0f%%", shares.empty() ? "" : " ",
                  r.counts.checks
                      ? 100.0 * static_cast<double>(n) / static_cast<double>(r.counts.checks)
                      : 0.0);
    shares += line;
  }
  std::string cpus;
  for (double c : r.node_cpu) {
    if (!cpus.empty()) cpus += ' ';
    if (c < 0) {
      cpus += '?';
    } else {
      std::snprintf(line, sizeof(line), "%.2f", c);
      cpus += line;
    }
  }
  std::snprintf(line, sizeof(line), "%-14s %12.0f %12.0f   %-24s %s\n", name,
                static_cast<double>(r.counts.checks) / r.seconds,
                static_cast<double>(r.counts.hot_checks) / r.seconds, shares.c_str(), cpus.c_str());
  out << line;
  if (r.counts.errors > 0)
    out << "  errors: " << r.counts.errors << " (first: " << r.counts.first_error << ")\n";
}

}  // namespace

int RunHotKeyBench(const HotKeyBenchOptions& o, std::ostream& out, std::ostream& err) {
  Result<RunResult> before = RunOnce(o, false);
  if (!before) {
    err << "limiter-bench hotkey: " << before.error() << '\n';
    return 1;
  }
  Result<RunResult> after = RunOnce(o, true);
  if (!after) {
    err << "limiter-bench hotkey: " << after.error() << '\n';
    return 1;
  }
  const double ratio = before->counts.checks > 0
                           ? static_cast<double>(after->counts.checks) / after->seconds /
                                 (static_cast<double>(before->counts.checks) / before->seconds)
                           : 0;
  // With every node saturated, checks/s scale as 1 / the busiest node's share.
  const double busiest_before = BusiestShare(*before);
  const double busiest_after = BusiestShare(*after);
  const double allowed = busiest_after > 0 ? busiest_before / busiest_after : 0.0;
  if (o.json) {
    out << nlohmann::json{{"nodes", o.nodes},
                          {"node_threads", o.node_threads},
                          {"keys", o.keys},
                          {"hot_ratio", o.hot_ratio},
                          {"split_k", o.split_k},
                          {"batch", o.batch},
                          {"depth", o.depth},
                          {"node_cpu", o.node_cpu},
                          {"unsplit", ToJson(*before)},
                          {"split", ToJson(*after)},
                          {"speedup", ratio},
                          {"speedup_the_shares_allow", allowed}}
               .dump(2)
        << '\n';
    return 0;
  }
  char line[256];
  std::snprintf(line, sizeof(line),
                "%d nodes (%d thread%s each%s), %d keys, one at %gx the others' rate, %d checks "
                "a frame, %d in flight per node, %d load threads, %g s each run\n\n",
                o.nodes, o.node_threads, o.node_threads == 1 ? "" : "s",
                o.node_cpu > 0
                    ? (", " + std::to_string(o.node_cpu).substr(0, 4) + " CPU budget").c_str()
                    : "",
                o.keys, o.hot_ratio, o.batch, o.depth, o.connections, o.duration_s);
  out << line;
  out << "run             checks/s  hot checks/s   share of checks by node  CPUs used by node\n";
  PrintRow(out, "unsplit", *before);
  PrintRow(out, after->split_seen ? "split" : "split (never)", *after);
  std::snprintf(line, sizeof(line),
                "\nsplit / unsplit: %.2fx checks/s; busiest node %.0f%% -> %.0f%% of the checks "
                "(with every node saturated that allows %.2fx)\n",
                ratio, 100 * busiest_before, 100 * busiest_after, allowed);
  out << line;
  return 0;
}

}  // namespace limiter::bench
