// limiterctl's views of a whole cluster: hotkeys, ring, stats and inspect with --cluster.
// Tables fit 80 columns; the --json shapes are documented in README.md.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <thread>

#include "client/ctl/commands.h"
#include "client/ctl/ops.h"
#include "common/member_list.h"
#include "protocol/ring.h"
#include "protocol/rules.h"

namespace limiter::ctl {
namespace {

using Json = nlohmann::ordered_json;

// Cuts `s` to `width` columns, marking the cut with '~'.
std::string Fit(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 1) + "~";
}

std::string Percent(double fraction) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << fraction * 100 << '%';
  return out.str();
}

std::string Bytes(int64_t n) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  if (n >= (int64_t{1} << 30)) {
    out << static_cast<double>(n) / (1 << 30) << 'G';
  } else if (n >= (1 << 20)) {
    out << static_cast<double>(n) / (1 << 20) << 'M';
  } else {
    out << static_cast<double>(n) / 1024 << 'K';
  }
  return out.str();
}

// A duration in ms, short: "0", "850ms", "12.3s", "55m", "3h", "2d".
std::string Human(int64_t ms) {
  std::ostringstream out;
  if (ms <= 0) return "0";
  if (ms < 1000) {
    out << ms << "ms";
  } else if (ms < 60'000) {
    out << std::fixed << std::setprecision(1) << static_cast<double>(ms) / 1000 << 's';
  } else if (ms < 3'600'000) {
    out << (ms + 59'999) / 60'000 << 'm';
  } else if (ms < 86'400'000) {
    out << (ms + 3'599'999) / 3'600'000 << 'h';
  } else {
    out << (ms + 86'399'999) / 86'400'000 << 'd';
  }
  return out.str();
}

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

// The members, or an error message naming the command.
std::optional<std::vector<std::string>> Members(const std::string& command,
                                                const std::string& cluster, std::ostream& err) {
  Result<std::vector<std::string>> m = ParseMemberList(cluster);
  if (!m) {
    err << "limiterctl " << command << ": --cluster: " << m.error() << '\n';
    return std::nullopt;
  }
  return std::move(m).value();
}

// One op on one node; `use` reads the reply. Returns an error message, or empty.
template <class Build, class Use>
std::string Ask(const std::string& node, const NodeAccess& access, Build build, Use use) {
  Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(node, 2000, access);
  if (!c) return c.error();
  RequestBuilder b;
  build(b);
  Result<const wire::OpReply*> r = OneOp(**c, b);
  if (!r) return r.error();
  if ((*r)->status() != wire::Status::Ok) return Refusal(**r);
  use(**r);
  return "";
}

struct HotRow {
  std::string key, policy, node;
  int64_t rate;
  double denied;
  int split_k;
};

}  // namespace

int RunHotKeys(const HotKeysArgs& args, std::ostream& out, std::ostream& err) {
  const auto members = Members("hotkeys", args.cluster, err);
  if (!members) return 2;
  for (int64_t round = 0;; ++round) {
    std::vector<HotRow> rows;
    std::vector<std::pair<std::string, std::string>> errors;
    for (const std::string& node : *members) {
      const std::string e = Ask(
          node, args.access, [](RequestBuilder& b) { b.HotKeys(1); },
          [&](const wire::OpReply& r) {
            if (!r.hot_keys()) return;
            for (const wire::HotKey* k : *r.hot_keys()) {
              rows.push_back({k->key()->str(), k->policy()->str(), node, k->rate(),
                              k->denied_permille() / 1000.0, k->split_k()});
            }
          });
      if (!e.empty()) errors.emplace_back(node, e);
    }
    std::stable_sort(rows.begin(), rows.end(),
                     [](const HotRow& a, const HotRow& b) { return a.rate > b.rate; });
    if (rows.size() > args.top) rows.resize(args.top);
    if (args.json) {
      Json keys = Json::array(), errs = Json::array();
      for (const HotRow& r : rows) {
        keys.push_back({{"key", r.key},
                        {"policy", r.policy},
                        {"node", r.node},
                        {"rate", r.rate},
                        {"denied_pct", std::round(r.denied * 1000) / 10},
                        {"split_k", r.split_k}});
      }
      for (const auto& [node, e] : errors) errs.push_back({{"node", node}, {"error", e}});
      out << Json{{"hot_keys", keys}, {"errors", errs}}.dump() << '\n';
    } else {
      if (args.clear_screen) out << "\033[H\033[2J";
      out << std::left << std::setw(25) << "KEY" << std::setw(13) << "POLICY" << std::setw(22)
          << "NODE" << std::right << std::setw(7) << "RATE/S" << std::setw(7) << "DENIED"
          << std::setw(6) << "SPLIT" << '\n';
      for (const HotRow& r : rows) {
        out << std::left << std::setw(25) << Fit(r.key, 24) << std::setw(13) << Fit(r.policy, 12)
            << std::setw(22) << Fit(r.node, 21) << std::right << std::setw(7) << r.rate
            << std::setw(7) << Percent(r.denied) << std::setw(6)
            << (r.split_k ? std::to_string(r.split_k) : "-") << '\n';
      }
      if (rows.empty()) out << "(no hot keys)\n";
      for (const auto& [node, e] : errors) out << "node " << node << ": " << e << '\n';
    }
    out.flush();
    if (args.once || (args.count > 0 && round + 1 >= args.count)) {
      return errors.size() == members->size() ? 1 : 0;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(args.interval_s));
  }
}

int RunRing(const RingArgs& args, std::ostream& out, std::ostream& err) {
  const auto members = Members("ring", args.cluster, err);
  if (!members) return 2;
  const Ring ring(*members);
  const std::vector<double> shares = ring.Shares();
  struct NodeRing {
    uint64_t version = 0;
    std::string error;
  };
  std::map<std::string, NodeRing> seen;
  for (const std::string& node : ring.members()) {
    NodeRing& n = seen[node];
    Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(node, 2000, args.access);
    if (!c) {
      n.error = c.error();
      continue;
    }
    RequestBuilder b;
    b.Hello("limiterctl");
    if (Status s = (*c)->Send(b.Finish()); !s.ok()) {
      n.error = s.error();
      continue;
    }
    Result<const wire::Reply*> r = (*c)->Receive();
    if (!r || !(*r)->hello()) {
      n.error = r ? "no hello in the reply" : r.error();
      continue;
    }
    n.version = (*r)->hello()->ring_version();
  }
  auto state = [&](const NodeRing& n) {
    if (!n.error.empty()) return std::string("unreachable");
    if (n.version == 0) return std::string("standalone");
    return n.version == ring.version() ? std::string("ok") : std::string("other ring");
  };
  if (args.json) {
    Json nodes = Json::array();
    for (size_t i = 0; i < ring.members().size(); ++i) {
      const NodeRing& n = seen[ring.members()[i]];
      Json node = {{"node", ring.members()[i]},
                   {"slots", static_cast<int64_t>(std::llround(shares[i] * Ring::kSlots))},
                   {"share", shares[i]},
                   {"node_ring_version", Hex(n.version)},
                   {"state", state(n)}};
      if (!n.error.empty()) node["error"] = n.error;
      nodes.push_back(node);
    }
    out << Json{{"ring_version", Hex(ring.version())}, {"slots", Ring::kSlots}, {"nodes", nodes}}
               .dump()
        << '\n';
    return 0;
  }
  out << "ring " << Hex(ring.version()) << ": " << ring.members().size() << " nodes, "
      << Ring::kSlots << " slots\n";
  out << std::left << std::setw(24) << "NODE" << std::right << std::setw(8) << "SLOTS"
      << std::setw(9) << "SHARE"
      << "  " << std::left << std::setw(18) << "NODE'S RING"
      << "STATE\n";
  for (size_t i = 0; i < ring.members().size(); ++i) {
    const NodeRing& n = seen[ring.members()[i]];
    out << std::left << std::setw(24) << Fit(ring.members()[i], 23) << std::right << std::setw(8)
        << std::llround(shares[i] * Ring::kSlots) << std::setw(9) << Percent(shares[i]) << "  "
        << std::left << std::setw(18) << (n.error.empty() ? Hex(n.version) : "-") << state(n)
        << '\n';
  }
  return 0;
}

int RunClusterStats(const StatsArgs& args, std::ostream& out, std::ostream& err) {
  const auto members = Members("stats", args.cluster, err);
  if (!members) return 2;
  using Counters = std::map<std::string, int64_t>;
  auto read = [&](const std::string& node, Counters& into) {
    return Ask(
        node, args.access, [](RequestBuilder& b) { b.Stats(1); },
        [&](const wire::OpReply& r) {
          if (!r.stats()) return;
          for (const wire::Stat* s : *r.stats()) into[s->name()->str()] = s->value();
        });
  };
  auto ops = [](const Counters& c) {
    int64_t n = 0;
    for (const auto& [name, v] : c) n += name.rfind("ops_", 0) == 0 ? v : 0;
    return n;
  };
  std::map<std::string, Counters> before, after;
  std::map<std::string, std::string> errors;
  for (const std::string& node : *members) {
    if (std::string e = read(node, before[node]); !e.empty()) errors[node] = e;
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(args.interval_s));
  for (const std::string& node : *members) {
    if (errors.count(node)) continue;
    if (std::string e = read(node, after[node]); !e.empty()) errors[node] = e;
  }
  auto get = [&](const std::string& node, const char* name) {
    auto it = after[node].find(name);
    return it == after[node].end() ? int64_t{0} : it->second;
  };
  auto rate = [&](const std::string& node) {
    // Both reads count themselves: one STATS op each.
    return static_cast<int64_t>(std::llround(
        static_cast<double>(ops(after[node]) - ops(before[node]) - 1) / args.interval_s));
  };
  if (args.json) {
    Json nodes = Json::array();
    for (const std::string& node : *members) {
      if (errors.count(node)) {
        nodes.push_back({{"node", node}, {"error", errors[node]}});
        continue;
      }
      nodes.push_back({{"node", node},
                       {"ops_per_s", rate(node)},
                       {"keys", get(node, "keys")},
                       {"resident_bytes", get(node, "resident_bytes")},
                       {"evictions", get(node, "evictions")},
                       {"refusals", get(node, "refusals")},
                       {"bad_frames", get(node, "bad_frames")},
                       {"split_redirects", get(node, "split_redirects")}});
    }
    out << Json{{"nodes", nodes}}.dump() << '\n';
    return errors.size() == members->size() ? 1 : 0;
  }
  out << std::left << std::setw(22) << "NODE" << std::right << std::setw(9) << "OPS/S"
      << std::setw(10) << "KEYS" << std::setw(8) << "MEMORY" << std::setw(10) << "EVICTED"
      << std::setw(9) << "REFUSED" << std::setw(8) << "BAD" << '\n';
  for (const std::string& node : *members) {
    out << std::left << std::setw(22) << Fit(node, 21);
    if (errors.count(node)) {
      out << errors[node] << '\n';
      continue;
    }
    out << std::right << std::setw(9) << rate(node) << std::setw(10) << get(node, "keys")
        << std::setw(8) << Bytes(get(node, "resident_bytes")) << std::setw(10)
        << get(node, "evictions") << std::setw(9) << get(node, "refusals") << std::setw(8)
        << get(node, "bad_frames") << '\n';
  }
  return errors.size() == members->size() ? 1 : 0;
}

int RunClusterInspect(const InspectArgs& args, std::ostream& out, std::ostream& err) {
  const auto members = Members("inspect", args.cluster, err);
  if (!members) return 2;
  const Ring ring(*members);
  const std::string owner = ring.Owner(args.tenant.empty() ? args.key : args.tenant);
  struct Bucket {
    std::string node, name, algorithm;
    bool tracked = false;
    int64_t remaining = 0, retry = 0, reset = 0;
    Json state = Json::object();
  };
  std::vector<Bucket> buckets;
  uint16_t split_k = 0;
  uint32_t epoch = 0;
  std::vector<uint8_t> token;  // the owner's split token, for the sub-buckets
  auto inspect = [&](const std::string& node, const std::string& name, uint16_t k, uint16_t index) {
    Bucket bucket;
    bucket.node = node;
    bucket.name = name;
    const std::string e = Ask(
        node, args.access,
        [&](RequestBuilder& b) {
          if (k) b.OnSubBucket(k, index, epoch, token);
          b.Inspect(1, args.policy, args.key, args.tenant);
        },
        [&](const wire::OpReply& r) {
          if (k == 0) {
            split_k = r.split_k();
            epoch = r.split_epoch();
            if (r.split_token()) token.assign(r.split_token()->begin(), r.split_token()->end());
          }
          if (r.state()) {
            bucket.algorithm = r.state()->algorithm() ? r.state()->algorithm()->str() : "";
            bucket.tracked = r.state()->tracked();
            if (r.state()->fields()) {
              for (const wire::Stat* f : *r.state()->fields()) {
                bucket.state[f->name()->str()] = f->value();
              }
            }
          }
          if (r.results() && r.results()->size()) {
            bucket.remaining = r.results()->Get(0)->remaining();
            bucket.retry = r.results()->Get(0)->retry_after_ms();
            bucket.reset = r.results()->Get(0)->reset_ms();
          }
        });
    if (!e.empty()) {
      err << "limiterctl inspect: " << node << ": " << e << '\n';
      return false;
    }
    buckets.push_back(std::move(bucket));
    return true;
  };
  if (!inspect(owner, args.key, 0, 0)) return 1;
  for (uint16_t i = 0; i < split_k; ++i) {
    const std::string sub = protocol::SubBucketRoutingKey(args.key, i);
    if (!inspect(ring.Owner(sub), sub, split_k, i)) return 1;
  }
  if (args.json) {
    Json list = Json::array();
    for (const Bucket& b : buckets) {
      list.push_back({{"node", b.node},
                      {"bucket", b.name},
                      {"algorithm", b.algorithm},
                      {"tracked", b.tracked},
                      {"remaining", b.remaining},
                      {"retry_after_ms", b.retry},
                      {"reset_ms", b.reset},
                      {"state", b.state}});
    }
    out << Json{{"policy", args.policy},
                {"key", args.key},
                {"owner", owner},
                {"split_k", split_k},
                {"buckets", list}}
               .dump()
        << '\n';
    return 0;
  }
  out << args.policy << " / " << args.key << ": owner " << owner;
  if (split_k) out << ", split " << split_k << " ways (epoch " << epoch << ")";
  out << '\n'
      << std::left << std::setw(22) << "NODE" << std::setw(18) << "BUCKET" << std::setw(15)
      << "ALGORITHM" << std::right << std::setw(10) << "REMAINING" << std::setw(7) << "RETRY"
      << std::setw(7) << "FULL IN" << '\n';
  for (const Bucket& b : buckets) {
    out << std::left << std::setw(22) << Fit(b.node, 21) << std::setw(18) << Fit(b.name, 17)
        << std::setw(15) << (b.tracked ? b.algorithm : b.algorithm + "*") << std::right
        << std::setw(10) << b.remaining << std::setw(7) << Human(b.retry) << std::setw(7)
        << Human(b.reset) << '\n';
  }
  out << "(* no state: a fresh key)\n";
  return 0;
}

}  // namespace limiter::ctl
