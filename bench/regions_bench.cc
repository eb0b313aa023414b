#include "bench/regions_bench.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/delay_proxy.h"
#include "bench/node_load.h"
#include "common/promise_check.h"
#include "limiter/client/client.h"
#include "protocol/node_connection.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"

namespace limiter::bench {
namespace {

using Json = nlohmann::ordered_json;

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct RegionRun {
  std::string name;
  std::unique_ptr<DelayProxy> proxy;  // how the other regions reach this one
  LocalNode node;
  std::unique_ptr<client::Client> client;
  std::vector<Admission> admitted;  // written by the region's gateway thread only
  std::vector<int64_t> offered, admitted_per_s, share_per_s;  // per second of the run
  int64_t fallbacks = 0;
};

// What region `i` offers in the phase at `t` seconds: the hot region moves one on per phase.
double RateOf(const RegionsBenchOptions& o, size_t i, double t) {
  const size_t n = static_cast<size_t>(o.regions);
  const size_t hot = static_cast<size_t>(t / o.phase_s) % n;
  if (i == hot) return o.hot;
  if (i == (hot + 1) % n) return o.warm;
  return o.cold;
}

// This region's share of the key, asked of its node; -1 when it did not answer.
int64_t AskShare(NodeConnection& c) {
  RequestBuilder b;
  b.Regions(1, "partner", "acme");
  if (!c.Send(b.Finish()).ok()) return -1;
  Result<const wire::Reply*> r = c.Receive();
  if (!r || !(*r)->ops() || (*r)->ops()->size() != 1) return -1;
  const wire::OpReply* op = (*r)->ops()->Get(0);
  if (op->status() != wire::Status::Ok || !op->regions() || op->regions()->size() == 0) return -1;
  return op->regions()->Get(0)->share();
}

}  // namespace

int RunRegionsBench(const RegionsBenchOptions& o, std::ostream& out, std::ostream& err) {
  if (o.regions < 2 || o.regions > 8) {
    err << "limiter-bench regions: --regions 2 to 8\n";
    return 2;
  }
  char dir_template[] = "/tmp/limiter-regions-XXXXXX";
  if (::mkdtemp(dir_template) == nullptr) {
    err << "limiter-bench regions: cannot make a temporary directory\n";
    return 1;
  }
  const std::filesystem::path dir = dir_template;
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{dir};
  const std::string policies = (dir / "policies.yaml").string();
  std::ofstream(policies) << "policies:\n  - {name: partner, algorithm: gcra, limit: " << o.limit
                          << ", window: 1s, burst: " << o.burst
                          << ", class: contract, mode: strict, scope: global}\n";
  std::vector<RegionRun> regions(static_cast<size_t>(o.regions));
  for (size_t i = 0; i < regions.size(); ++i) {
    regions[i].name = "r" + std::to_string(i + 1);
    regions[i].proxy = std::make_unique<DelayProxy>(0, std::chrono::milliseconds(o.delay_ms));
    if (regions[i].proxy->port() == 0) {
      err << "limiter-bench regions: cannot listen on 127.0.0.1\n";
      return 1;
    }
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    const std::string config = (dir / (regions[i].name + ".yaml")).string();
    std::ofstream c(config);
    // `self`: the address the other regions know this node by (its proxy).
    c << "region: " << regions[i].name << "\nrebalance_interval: " << o.interval_ms
      << "ms\nself: " << regions[i].proxy->address() << "\nregions:\n";
    for (const RegionRun& other : regions) {
      if (&other == &regions[i]) continue;
      c << "  - {name: " << other.name << ", members: [" << other.proxy->address() << "]}\n";
    }
    c.close();
    LocalNodeOptions node;
    node.program = o.limiterd.empty() ? DefaultLimiterdPath() : o.limiterd;
    node.policies = policies;
    node.threads = 1;
    node.extra_args = {"--config", config};
    Result<LocalNode> started = StartLocalNode(node);
    if (!started) {
      err << "limiter-bench regions: " << started.error() << '\n';
      return 1;
    }
    regions[i].node = std::move(started).value();
    regions[i].proxy->set_upstream(
        std::stoi(regions[i].node.address.substr(regions[i].node.address.rfind(':') + 1)));
    client::Options co;
    co.members = {regions[i].node.address};
    co.policy_file = policies;
    co.deadline = std::chrono::milliseconds(200);
    Result<std::unique_ptr<client::Client>> client = client::Client::Create(co);
    if (!client) {
      err << "limiter-bench regions: " << client.error() << '\n';
      return 1;
    }
    regions[i].client = std::move(client).value();
  }

  const double duration = o.phase_s * o.phases;
  const size_t seconds = static_cast<size_t>(std::ceil(duration));
  const int64_t start_us = NowUs();
  const int64_t end_us = start_us + static_cast<int64_t>(duration * 1e6);
  for (RegionRun& r : regions) {
    r.offered.assign(seconds, 0);
    r.admitted_per_s.assign(seconds, 0);
    r.share_per_s.assign(seconds, -1);
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < regions.size(); ++i) {
    threads.emplace_back([&, i] {
      RegionRun& r = regions[i];
      double owed = 0;
      int64_t last = NowUs();
      while (true) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        const int64_t now = NowUs();
        if (now >= end_us) break;
        const double t = static_cast<double>(now - start_us) / 1e6;
        owed += RateOf(o, i, t) * static_cast<double>(now - last) / 1e6;
        last = now;
        for (; owed >= 1; owed -= 1) {
          const int64_t s = NowUs();
          const client::Decision d = r.client->Decide({"partner", "acme"});
          const int64_t e = NowUs();
          const size_t second =
              std::min(seconds - 1, static_cast<size_t>((s - start_us) / 1'000'000));
          ++r.offered[second];
          if (d.source == client::Source::kFallback) ++r.fallbacks;
          if (!d.allowed) continue;
          ++r.admitted_per_s[second];
          r.admitted.push_back({s, e, 1});
        }
      }
    });
  }
  // The shares, once a second, just before each second ends.
  std::vector<std::unique_ptr<NodeConnection>> asking;
  for (RegionRun& r : regions) {
    Result<std::unique_ptr<NodeConnection>> c =
        NodeConnection::Connect(r.node.address, 2000, o.access);
    asking.push_back(c ? std::move(c).value() : nullptr);
  }
  for (size_t s = 0; s < seconds; ++s) {
    const int64_t at = start_us + static_cast<int64_t>(s + 1) * 1'000'000 - 20'000;
    std::this_thread::sleep_for(std::chrono::microseconds(std::max<int64_t>(0, at - NowUs())));
    for (size_t i = 0; i < regions.size(); ++i) {
      if (asking[i]) regions[i].share_per_s[s] = AskShare(*asking[i]);
    }
  }
  for (std::thread& t : threads) t.join();

  // Across regions: the worst interval against B + L*t/W.
  std::vector<Admission> all;
  for (const RegionRun& r : regions) all.insert(all.end(), r.admitted.begin(), r.admitted.end());
  std::sort(all.begin(), all.end(),
            [](const Admission& a, const Admission& b) { return a.end_us < b.end_us; });
  const WorstWindow worst = FindWorstWindow(all, PromiseBound{o.limit, 1'000'000, o.burst, 1000});

  Json json;
  json["limit_per_s"] = o.limit;
  json["burst"] = o.burst;
  json["delay_ms"] = o.delay_ms;
  json["rebalance_interval_ms"] = o.interval_ms;
  Json names = Json::array();
  for (const RegionRun& r : regions) names.push_back(r.name);
  json["regions"] = names;
  out << "limiter-bench regions: " << o.regions << " regions, " << o.delay_ms
      << " ms apart, one global limit of " << o.limit << "/s (B = " << o.burst
      << "); the hot region (" << o.hot << "/s) moves every " << o.phase_s << " s\n\n| s |";
  for (const RegionRun& r : regions) out << ' ' << r.name << " share | offered | admitted |";
  out << " fleet admitted |\n|---|";
  for (size_t i = 0; i < regions.size(); ++i) out << "---|---|---|";
  out << "---|\n";
  Json per_second = Json::array();
  for (size_t s = 0; s < seconds; ++s) {
    int64_t fleet = 0;
    Json row;
    row["t"] = s + 1;
    Json per_region = Json::array();
    out << "| " << s + 1 << " |";
    for (const RegionRun& r : regions) {
      fleet += r.admitted_per_s[s];
      out << ' ' << r.share_per_s[s] << " | " << r.offered[s] << " | " << r.admitted_per_s[s]
          << " |";
      per_region.push_back(Json{{"share", r.share_per_s[s]},
                                {"offered", r.offered[s]},
                                {"admitted", r.admitted_per_s[s]}});
    }
    out << ' ' << fleet << " |\n";
    row["regions"] = per_region;
    row["fleet_admitted"] = fleet;
    per_second.push_back(row);
  }
  json["seconds"] = per_second;
  int64_t fallbacks = 0;
  for (const RegionRun& r : regions) fallbacks += r.fallbacks;
  json["fallbacks"] = fallbacks;
  json["worst_interval"] = Json{{"admitted", worst.admitted},
                                {"seconds", static_cast<double>(worst.interval_us) / 1e6},
                                {"allowed", worst.allowed},
                                {"over", worst.over}};
  out << "\nacross regions, the interval closest to B + L*t/W: " << worst.admitted
      << " admitted in " << std::fixed << std::setprecision(3)
      << static_cast<double>(worst.interval_us) / 1e6 << " s of " << std::setprecision(1)
      << worst.allowed << " allowed" << (worst.over ? " (OVER)" : "") << "; " << all.size()
      << " admitted in " << duration << " s (L x T = " << static_cast<double>(o.limit) * duration
      << "); " << fallbacks << " gateway fallbacks\n";
  if (!o.json_file.empty()) std::ofstream(o.json_file) << json.dump(2) << '\n';
  return worst.over ? 3 : 0;
}

}  // namespace limiter::bench
