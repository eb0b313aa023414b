#include "server/node_metrics.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>

#include "server/durable_store.h"
#include "server/handoff.h"
#include "server/ownership.h"
#include "server/region_shares.h"
#include "server/store.h"

namespace limiter {
namespace {

constexpr std::array<const char*, kBadFrameKinds> kBad = {"too_large", "empty", "invalid",
                                                          "truncated"};
constexpr std::array<std::string_view, 3> kOutcomeNames = {"allowed", "denied", "error"};
constexpr auto kOpNames =
    std::to_array<std::string_view>({"check", "lease", "return", "inspect", "stats", "split",
                                     "hot_keys", "members", "handoff", "regions", "unknown"});
static_assert(kOpNames.size() == kOpTypes + 1, "a name for every op type");

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}
// Latency bucket bounds, in microseconds.
constexpr std::array<uint64_t, 16> kBoundsUs = {
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 50000, 100000, 1000000};

void Header(std::ostringstream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string_view OpTypeName(int type) {
  return kOpNames[static_cast<size_t>(std::clamp(type, 0, kOpTypes))];
}

NodeMetrics::NodeMetrics(Parts parts)
    : parts_(std::move(parts)), started_ms_(parts_.clock.NowMs()) {}

int64_t NodeMetrics::Snapshot::Get(std::string_view name) const {
  for (const auto& [n, v] : values) {
    if (n == name) return v;
  }
  return 0;
}

NodeMetrics::Snapshot NodeMetrics::Collect() const {
  const PolicyTable& policies = parts_.policies;
  Store& store = parts_.store;
  Snapshot snapshot;
  auto& ops = snapshot.ops;
  auto& bad = snapshot.bad_frames;
  snapshot.decisions.resize(policies.size());
  uint64_t refusals = 0, frames = 0, opened = 0, closed = 0, redirects = 0;
  uint64_t auth_failures = 0, frames_refused = 0, split_refusals = 0, split_changed = 0;
  uint64_t moving = 0;
  uint64_t peer_refusals = 0, sessions_revoked = 0;
  parts_.workers([&](const WorkerCounters& c) {
    for (size_t t = 0; t < ops.size(); ++t) {
      for (size_t o = 0; o < 3; ++o) ops[t][o] += c.ops[t][o].Get();
    }
    for (size_t p = 0; p < policies.size(); ++p) {
      snapshot.decisions[p][0] += c.decisions[p][0].Get();
      snapshot.decisions[p][1] += c.decisions[p][1].Get();
    }
    c.frame_latency_us.AddTo(snapshot.frame_latency);
    for (size_t b = 0; b < bad.size(); ++b) bad[b] += c.bad_frames[b].Get();
    refusals += c.refusals.Get();
    redirects += c.split_redirects.Get();
    frames += c.frames.Get();
    opened += c.connections_opened.Get();
    closed += c.connections_closed.Get();
    auth_failures += c.auth_failures.Get();
    peer_refusals += c.peer_refusals.Get();
    sessions_revoked += c.sessions_revoked.Get();
    frames_refused += c.frames_refused.Get();
    split_refusals += c.split_refusals.Get();
    split_changed += c.split_changed.Get();
    moving += c.moving.Get();
  });
  std::vector<std::pair<std::string, int64_t>>& out = snapshot.values;
  for (size_t t = 0; t < ops.size(); ++t) {
    for (size_t o = 0; o < 3; ++o) {
      if (ops[t][o] == 0) continue;
      const bool decides = t <= 1;  // check, lease
      const std::string_view outcome = !decides && o == kAllowed ? "ok" : kOutcomeNames[o];
      out.emplace_back(
          "ops_" + std::string(OpTypeName(static_cast<int>(t))) + "_" + std::string(outcome),
          static_cast<int64_t>(ops[t][o]));
    }
  }
  out.emplace_back("keys", store.keys());
  out.emplace_back("key_units", store.units());
  out.emplace_back("key_units_committed", store.committed());
  out.emplace_back("max_keys", store.max_keys());
  // Each policy's share (store.h): "keys.NAME" etc.
  for (size_t p = 0; p < policies.size(); ++p) {
    const std::string& name = policies.at(static_cast<int>(p)).name;
    const Store::PolicyUsage u = store.usage(static_cast<int>(p));
    out.emplace_back("keys." + name, u.keys);
    out.emplace_back("key_units." + name, u.units);
    out.emplace_back("key_reserve." + name, u.budget.reserve);
    out.emplace_back("key_cap." + name, u.budget.cap);
    out.emplace_back("key_refusals." + name, u.refusals);
  }
  out.emplace_back("evictions", store.evictions());
  out.emplace_back("reclaim_passes", store.reclaim_passes());
  out.emplace_back("refusals", static_cast<int64_t>(refusals));
  out.emplace_back("split_redirects", static_cast<int64_t>(redirects));
  out.emplace_back("splits", store.split_count());
  out.emplace_back("lease_books", store.books());
  uint64_t bad_total = 0;
  for (size_t b = 0; b < bad.size(); ++b) {
    bad_total += bad[b];
    out.emplace_back("bad_frames_" + std::string(kBad[b]), static_cast<int64_t>(bad[b]));
  }
  out.emplace_back("bad_frames", static_cast<int64_t>(bad_total));
  out.emplace_back("frames", static_cast<int64_t>(frames));
  out.emplace_back("frames_refused", static_cast<int64_t>(frames_refused));
  out.emplace_back("auth_failures", static_cast<int64_t>(auth_failures));
  out.emplace_back("peer_refusals", static_cast<int64_t>(peer_refusals));
  out.emplace_back("sessions_revoked", static_cast<int64_t>(sessions_revoked));
  out.emplace_back("split_refusals", static_cast<int64_t>(split_refusals));
  out.emplace_back("split_changed", static_cast<int64_t>(split_changed));
  const Handoff::Counters& h = parts_.handoff.counters();
  out.emplace_back("handoff_moving", static_cast<int64_t>(moving));
  out.emplace_back("handoff_jobs", parts_.ownership.counters().jobs.load());
  out.emplace_back("handoff_keys_sent", h.keys_sent.load());
  out.emplace_back("handoff_keys_lost", h.keys_lost.load());
  out.emplace_back("handoff_keys_received", h.keys_received.load());
  out.emplace_back("handoff_keys_refused", h.keys_refused.load());
  out.emplace_back("handoff_splits_received", h.splits_received.load());
  out.emplace_back("handoff_batches_refused", h.refused_batches.load());
  out.emplace_back("handoff_waits_expired", parts_.ownership.counters().waits_expired.load());
  out.emplace_back("handoff_waiting_slots", parts_.ownership.waiting_slots());
  const std::shared_ptr<const ClusterRing> membership = parts_.ownership.current();
  out.emplace_back("membership_generation", static_cast<int64_t>(membership->generation));
  out.emplace_back("membership_members", static_cast<int64_t>(membership->ring.members().size()));
  if (parts_.durable) {
    const DurableStore::Stats d = parts_.durable->stats();
    out.emplace_back("durable_writes", d.writes);
    out.emplace_back("durable_commits", d.commits);
    out.emplace_back("durable_reads", d.reads);
    out.emplace_back("durable_read_hits", d.read_hits);
    out.emplace_back("durable_errors", d.errors);
    out.emplace_back("durable_dropped", d.dropped);
    out.emplace_back("durable_expired", d.expired);
    out.emplace_back("durable_pending", d.pending);
    out.emplace_back("durable_records_estimate", d.live_keys);
    out.emplace_back("durable_disk_bytes", d.disk_bytes);
    out.emplace_back("durable_failing", d.failing ? 1 : 0);
    out.emplace_back("durable_failed_batches", d.failed_batches);
    out.emplace_back("durable_resumes", d.resumes);
  }
  if (parts_.regions) {
    RegionShares::Counters& c = parts_.regions->counters();
    out.emplace_back("regions_reports_sent", c.reports_sent.load());
    out.emplace_back("regions_reports_received", c.reports_received.load());
    out.emplace_back("regions_reports_late", c.reports_late.load());
    out.emplace_back("regions_reports_refused", c.reports_refused.load());
    out.emplace_back("regions_send_errors", c.send_errors.load());
    out.emplace_back("regions_keys", c.keys.load());
    out.emplace_back("regions_keys_untracked", c.keys_untracked.load());
    out.emplace_back("regions_rebalance_us", c.rebalance_us.load());
  }
  out.emplace_back("connections_open", static_cast<int64_t>(opened - closed));
  out.emplace_back("connections_total", static_cast<int64_t>(opened));
  out.emplace_back("resident_bytes", ResidentBytes());
  out.emplace_back("uptime_ms", parts_.clock.NowMs() - started_ms_);
  return snapshot;
}

std::string NodeMetrics::Render() const {
  const PolicyTable& policies = parts_.policies;
  const size_t n_policies = policies.size();
  const Snapshot snapshot = Collect();
  const auto& ops = snapshot.ops;
  const auto& decisions = snapshot.decisions;
  const Histogram::Snapshot& latency = snapshot.frame_latency;
  const auto stat = [&](const std::string& name) { return snapshot.Get(name); };
  std::ostringstream out;
  Header(out, "limiter_ops_total", "counter", "Operations by type and outcome.");
  for (size_t t = 0; t < ops.size(); ++t) {
    const bool decides = t <= 1;  // check, lease
    for (size_t o = 0; o < 3; ++o) {
      if (!decides && o == kDenied) continue;
      const char* outcome = o == kError     ? "error"
                            : !decides      ? "ok"
                            : o == kAllowed ? "allowed"
                                            : "denied";
      out << "limiter_ops_total{op=\"" << OpTypeName(static_cast<int>(t)) << "\",outcome=\""
          << outcome << "\"} " << ops[t][o] << '\n';
    }
  }
  Header(out, "limiter_decisions_total", "counter",
         "Limit decisions by policy and result (every limit a CHECK or LEASE touched).");
  for (size_t p = 0; p < n_policies; ++p) {
    const std::string name = Escape(policies.at(static_cast<int>(p)).name);
    out << "limiter_decisions_total{policy=\"" << name << "\",result=\"allowed\"} "
        << decisions[p][0] << '\n';
    out << "limiter_decisions_total{policy=\"" << name << "\",result=\"denied\"} "
        << decisions[p][1] << '\n';
  }
  Header(out, "limiter_frame_duration_seconds", "histogram",
         "Time from a whole request frame read to its reply encoded.");
  for (uint64_t bound : kBoundsUs) {
    uint64_t below = 0;
    for (int b = 0; b < Histogram::kBuckets && Histogram::BucketHigh(b) <= bound; ++b) {
      below += latency.counts[static_cast<size_t>(b)];
    }
    out << "limiter_frame_duration_seconds_bucket{le=\"" << static_cast<double>(bound) / 1e6
        << "\"} " << below << '\n';
  }
  out << "limiter_frame_duration_seconds_bucket{le=\"+Inf\"} " << latency.count << '\n';
  out << "limiter_frame_duration_seconds_sum " << static_cast<double>(latency.sum) / 1e6 << '\n';
  out << "limiter_frame_duration_seconds_count " << latency.count << '\n';

  Header(out, "limiter_keys", "gauge", "Keys with live state in the store.");
  out << "limiter_keys " << stat("keys") << '\n';
  Header(out, "limiter_max_keys", "gauge", "The key bound (max_keys).");
  out << "limiter_max_keys " << stat("max_keys") << '\n';
  Header(out, "limiter_evictions_total", "counter", "Expired keys reclaimed.");
  out << "limiter_evictions_total " << stat("evictions") << '\n';
  Header(out, "limiter_reclaim_passes_total", "counter",
         "Stripes scanned for expired keys by a new key that found no room (after a pass that "
         "let no key in, a stripe waits 100-150 ms, doubling to 1.6-2.4 s).");
  out << "limiter_reclaim_passes_total " << stat("reclaim_passes") << '\n';
  Header(out, "limiter_refusals_total", "counter", "New keys refused at max_keys.");
  out << "limiter_refusals_total " << stat("refusals") << '\n';
  Header(out, "limiter_auth_failures_total", "counter",
         "Connections closed for a hello without valid proof of the cluster secret.");
  out << "limiter_auth_failures_total " << stat("auth_failures") << '\n';
  Header(out, "limiter_peer_ops_refused_total", "counter",
         "Node-to-node ops (a member-list change, HANDOFF, a region report) refused: the "
         "session had not proved the peer credential, or spoke for another member.");
  out << "limiter_peer_ops_refused_total " << stat("peer_refusals") << '\n';
  Header(out, "limiter_sessions_revoked_total", "counter",
         "Connections closed because the secret they proved was removed (rotation).");
  out << "limiter_sessions_revoked_total " << stat("sessions_revoked") << '\n';
  Header(
      out, "limiter_frames_refused_total", "counter",
      "Frames over a bound (ops, reply bytes, STATS/HOTKEYS/INSPECT); their connections closed.");
  out << "limiter_frames_refused_total " << stat("frames_refused") << '\n';
  Header(out, "limiter_split_refusals_total", "counter",
         "Ops on a sub-bucket with a split token no member of the cluster made (forged).");
  out << "limiter_split_refusals_total " << stat("split_refusals") << '\n';
  Header(out, "limiter_split_changed_total", "counter",
         "Ops on a sub-bucket from a gateway's view of the split that is out of date (merged, "
         "split again, a lapsed token), answered SplitChanged; nothing charged.");
  out << "limiter_split_changed_total " << stat("split_changed") << '\n';
  struct Plain {
    const char* metric;
    const char* stat;
    const char* type;
    const char* help;
  };
  static constexpr Plain kHandoff[] = {
      {"limiter_handoff_moving_total", "handoff_moving", "counter",
       "Ops answered Moving: their key was being handed to this node."},
      {"limiter_handoff_jobs_total", "handoff_jobs", "counter",
       "Ring changes that moved keys away from this node."},
      {"limiter_handoff_keys_sent_total", "handoff_keys_sent", "counter",
       "Live keys handed to their new owner and taken by it."},
      {"limiter_handoff_keys_lost_total", "handoff_keys_lost", "counter",
       "Live keys given up but not delivered (peer unreachable or refusing, or the deadline): "
       "they fall back to the crash promise."},
      {"limiter_handoff_keys_received_total", "handoff_keys_received", "counter",
       "Keys taken from other nodes' hand-offs."},
      {"limiter_handoff_keys_refused_total", "handoff_keys_refused", "counter",
       "Handed keys refused: of a slot this node does not gain from the sender, or at max_keys."},
      {"limiter_handoff_batches_refused_total", "handoff_batches_refused", "counter",
       "Hand-off batches refused whole: from a node that is not a member of a list this node "
       "held lately, or with another policy file or key-id seed."},
      {"limiter_handoff_waits_expired_total", "handoff_waits_expired", "counter",
       "Ring slots whose keys were served fresh after waiting handoff_deadline for their last "
       "owner."},
      {"limiter_handoff_waiting_slots", "handoff_waiting_slots", "gauge",
       "Ring slots (of 262144) whose keys this node waits to be handed."},
      {"limiter_membership_generation", "membership_generation", "gauge",
       "Generation of the member list in use."},
      {"limiter_membership_members", "membership_members", "gauge",
       "Members in the list in use (a leaving node: the ones it hands its keys to)."},
  };
  static constexpr Plain kDurable[] = {
      {"limiter_durable_writes_total", "durable_writes", "counter",
       "Durable keys' states queued for the database (puts and deletes)."},
      {"limiter_durable_commits_total", "durable_commits", "counter",
       "Batches written to the database, each with one fsync (group commit)."},
      {"limiter_durable_reads_total", "durable_reads", "counter",
       "Durable keys read through from the database (first use after a start)."},
      {"limiter_durable_read_hits_total", "durable_read_hits", "counter",
       "Read-throughs that found a live state."},
      {"limiter_durable_errors_total", "durable_errors", "counter",
       "Records that could not be read (answered StoreError) and failed commit attempts."},
      {"limiter_durable_dropped_total", "durable_dropped", "counter",
       "Records dropped: their policy is gone or changed its algorithm, or they are damaged."},
      {"limiter_durable_expired_total", "durable_expired", "counter",
       "Records dropped at compaction because their key was fresh again."},
      {"limiter_durable_pending", "durable_pending", "gauge",
       "Changes queued and not yet written."},
      {"limiter_durable_records_estimate", "durable_records_estimate", "gauge",
       "Records in the database, RocksDB's estimate: it counts overwrites and deletes not yet "
       "compacted, so it runs above the live keys between compactions."},
      {"limiter_durable_disk_bytes", "durable_disk_bytes", "gauge",
       "Bytes of the database's SST and WAL files."},
      {"limiter_durable_failing", "durable_failing", "gauge",
       "1 while the database cannot write (a full disk, an I/O error): ops on durable keys are "
       "answered StoreError until it resumes by itself; 0 otherwise."},
      {"limiter_durable_failed_batches_total", "durable_failed_batches", "counter",
       "Batches given up after their write failed: the replies waiting for them ended their "
       "connection instead of being acknowledged; their records are written once it resumes."},
      {"limiter_durable_resumes_total", "durable_resumes", "counter",
       "Times the database became writable again after failing (RocksDB's Resume)."},
  };
  if (parts_.durable) {
    for (const Plain& m : kDurable) {
      Header(out, m.metric, m.type, m.help);
      out << m.metric << ' ' << stat(m.stat) << '\n';
    }
  }
  for (const Plain& m : kHandoff) {
    Header(out, m.metric, m.type, m.help);
    out << m.metric << ' ' << stat(m.stat) << '\n';
  }
  if (RegionShares* regions = parts_.regions) {
    static constexpr Plain kRegions[] = {
        {"limiter_region_reports_sent_total", "regions_reports_sent", "counter",
         "Demand reports sent to nodes of other regions (one per node per interval at least)."},
        {"limiter_region_reports_received_total", "regions_reports_received", "counter",
         "Demand reports taken from nodes of other regions."},
        {"limiter_region_reports_late_total", "regions_reports_late", "counter",
         "Reports that came more than 1.5 intervals after the same node's last one."},
        {"limiter_region_reports_refused_total", "regions_reports_refused", "counter",
         "Reports refused: an unknown region, another policy file or key-id seed."},
        {"limiter_region_send_errors_total", "regions_send_errors", "counter",
         "Reports that could not be delivered to a node of another region."},
        {"limiter_region_keys", "regions_keys", "gauge",
         "Global keys whose region share this node tracks."},
        {"limiter_region_keys_untracked_total", "regions_keys_untracked", "counter",
         "Uses of a global key beyond region_max_keys: it got the floor share."},
        {"limiter_region_rebalance_seconds", "regions_rebalance_us", "gauge",
         "How long the last rebalance took (microseconds / 1e6)."},
    };
    for (const Plain& m : kRegions) {
      Header(out, m.metric, m.type, m.help);
      const int64_t v = stat(m.stat);
      if (std::string_view(m.stat) == "regions_rebalance_us") {
        out << m.metric << ' ' << static_cast<double>(v) / 1e6 << '\n';
      } else {
        out << m.metric << ' ' << v << '\n';
      }
    }
    Header(out, "limiter_region_link_age_seconds", "gauge",
           "Since the last report from any node of each other region (-1: never).");
    for (const RegionShares::View& v : regions->ViewOf(0, nullptr, parts_.clock.NowMs())) {
      if (v.region == regions->options().region) continue;
      out << "limiter_region_link_age_seconds{region=\"" << Escape(v.region) << "\"} "
          << (v.link_age_ms < 0 ? -1.0 : static_cast<double>(v.link_age_ms) / 1000) << '\n';
    }
    Header(out, "limiter_region_top_share", "gauge",
           "This region's share (units per window) of the global keys with the most demand "
           "here, by rank; limiter_region_top_demand is their demand.");
    const std::vector<RegionShares::TopShare> top = regions->Top(10);
    for (size_t i = 0; i < top.size(); ++i) {
      out << "limiter_region_top_share{rank=\"" << i + 1 << "\",policy=\"" << Escape(top[i].policy)
          << "\"} " << top[i].share << '\n';
    }
    Header(
        out, "limiter_region_top_demand", "gauge",
        "Demand here (units per window, allowed or not) of the keys in limiter_region_top_share.");
    for (size_t i = 0; i < top.size(); ++i) {
      out << "limiter_region_top_demand{rank=\"" << i + 1 << "\",policy=\"" << Escape(top[i].policy)
          << "\"} " << top[i].demand << '\n';
    }
  }
  Header(out, "limiter_key_units", "gauge",
         "Key units held: a key is one, a sliding-log key more (its log's memory).");
  out << "limiter_key_units " << stat("key_units") << '\n';
  Header(out, "limiter_key_units_committed", "gauge",
         "Key units held or reserved: the sum over policies of max(held, reserve).");
  out << "limiter_key_units_committed " << stat("key_units_committed") << '\n';
  // Per policy, straight from the store (Stats has them under "keys.NAME" and so on).
  struct PolicyGauge {
    const char* name;
    const char* type;
    const char* help;
    int64_t Store::PolicyUsage::*field;  // or, for the budget's:
    int64_t KeyBudget::*budget;
  };
  static constexpr PolicyGauge kPolicyGauges[] = {
      {"limiter_policy_keys", "gauge", "Live keys of the policy.", &Store::PolicyUsage::keys,
       nullptr},
      {"limiter_policy_key_units", "gauge", "Key units the policy holds.",
       &Store::PolicyUsage::units, nullptr},
      {"limiter_policy_key_reserve", "gauge",
       "Key units reserved for the policy: its max_keys, or its share of what is left.", nullptr,
       &KeyBudget::reserve},
      {"limiter_policy_key_cap", "gauge",
       "The most key units the policy may hold: its max_keys, or the node's.", nullptr,
       &KeyBudget::cap},
      {"limiter_policy_key_refusals_total", "counter",
       "New keys (or sliding-log growth) of the policy refused: no room in its budget.",
       &Store::PolicyUsage::refusals, nullptr},
  };
  std::vector<Store::PolicyUsage> usage;
  for (size_t p = 0; p < n_policies; ++p) usage.push_back(parts_.store.usage(static_cast<int>(p)));
  for (const PolicyGauge& g : kPolicyGauges) {
    Header(out, g.name, g.type, g.help);
    for (size_t p = 0; p < n_policies; ++p) {
      const int64_t v = g.field ? usage[p].*g.field : usage[p].budget.*g.budget;
      out << g.name << "{policy=\"" << Escape(policies.at(static_cast<int>(p)).name) << "\"} " << v
          << '\n';
    }
  }
  Header(out, "limiter_bad_frames_total", "counter",
         "Frames rejected: too_large/empty/truncated close the connection, invalid gets an "
         "error reply.");
  for (size_t b = 0; b < kBad.size(); ++b) {
    out << "limiter_bad_frames_total{reason=\"" << kBad[b] << "\"} "
        << stat(std::string("bad_frames_") + kBad[b]) << '\n';
  }
  Header(out, "limiter_connections", "gauge", "Open client connections.");
  out << "limiter_connections " << stat("connections_open") << '\n';
  Header(out, "limiter_connections_total", "counter", "Client connections accepted.");
  out << "limiter_connections_total " << stat("connections_total") << '\n';
  Header(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  out << "process_resident_memory_bytes " << stat("resident_bytes") << '\n';
  return out.str();
}

}  // namespace limiter
