#include "bench/fleet_report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/policy.h"

namespace limiter::bench {
namespace {

using Json = nlohmann::json;
constexpr int kPartialFormat = 1;

Json HistogramJson(const Histogram::Snapshot& h) {
  Json buckets = Json::array();
  for (size_t i = 0; i < h.counts.size(); ++i) {
    if (h.counts[i] != 0) buckets.push_back({i, h.counts[i]});
  }
  return {{"count", h.count}, {"sum", h.sum}, {"max", h.max}, {"buckets", buckets}};
}

Histogram::Snapshot HistogramFrom(const Json& j) {
  Histogram::Snapshot h;
  h.count = j.at("count").get<uint64_t>();
  h.sum = j.at("sum").get<uint64_t>();
  h.max = j.at("max").get<uint64_t>();
  for (const Json& b : j.at("buckets")) {
    const size_t i = b.at(0).get<size_t>();
    if (i >= h.counts.size()) throw std::out_of_range("histogram bucket " + std::to_string(i));
    h.counts[i] = b.at(1).get<uint64_t>();
  }
  return h;
}

std::string Fmt(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

}  // namespace

Json WorstJson(const WorstKey& w) {
  if (!w.found) return nullptr;
  return {{"policy", w.policy},           {"key", w.key},
          {"class", w.limit_class},       {"admitted", w.admitted},
          {"interval_ms", w.interval_ms}, {"allowed", w.allowed},
          {"excess", w.excess},           {"within_allowance", w.within_allowance}};
}

Json SettingsJson(const RunTotals& run) {
  return {{"scenario", run.scenario},       {"seed", run.seed},     {"rate", run.rate},
          {"gateways", run.gateways},       {"nodes", run.nodes},   {"duration_s", run.duration_s},
          {"warmup_s", run.warmup_s},       {"spread", run.spread}, {"loops", run.loops},
          {"deadline_us", run.deadline_us}, {"parts", run.parts}};
}

Json AccuracyJson(const Accuracy& a) {
  return {{"keys_checked", a.keys_checked},
          {"keys_over_promise", a.keys_over_promise},
          {"worst_window", WorstJson(a.worst)},
          {"keys_with_fallback", a.keys_with_fallback},
          {"keys_over_promise_with_fallback", a.keys_over_promise_with_fallback},
          {"keys_over_allowance", a.keys_over_allowance},
          {"worst_with_fallback", WorstJson(a.worst_with_fallback)},
          {"fallback_admitted_units_by_class",
           {{"security", a.fallback_units_by_class[0]},
            {"contract", a.fallback_units_by_class[1]},
            {"billing", a.fallback_units_by_class[2]},
            {"capacity", a.fallback_units_by_class[3]}}},
          {"keys_over_promise_real_time", a.keys_over_promise_real_time},
          {"keys_over_real_time_bound", a.keys_over_real_time_bound},
          {"worst_real_time", WorstJson(a.worst_real_time)}};
}

std::string WorstText(const Json& w) {
  if (w.is_null()) return "none";
  return Fmt("%s %s (%s): %" PRId64 " admitted in %.1f ms, %.1f allowed",
             w["policy"].get<std::string>().c_str(), w["key"].get<std::string>().c_str(),
             w["class"].get<std::string>().c_str(), w["admitted"].get<int64_t>(),
             w["interval_ms"].get<double>(), w["allowed"].get<double>());
}

Status MergeInto(RunTotals& total, RunTotals part) {
  if (total.parts_included.empty()) {
    total = std::move(part);
    return Status::Ok();
  }
  // Decision times move to the earliest start's clock. (Per-second rows stay on each part's
  // own clock: every part draws the same arrival stream from its own start.)
  constexpr int64_t kHourUs = 3'600'000'000;
  if (part.t0_wall_us < total.t0_wall_us - kHourUs ||
      part.t0_wall_us > total.t0_wall_us + kHourUs) {
    return Error{"its parts started more than an hour apart: not one run"};
  }
  const int64_t shift = part.t0_wall_us - total.t0_wall_us;
  if (shift < 0) {
    for (DecisionRecord& r : total.records) {
      r.intended_us -= shift;
      r.done_us -= shift;
    }
    total.t0_wall_us = part.t0_wall_us;
  }
  const int64_t by = std::max<int64_t>(0, shift);
  for (DecisionRecord& r : part.records) {
    r.intended_us += by;
    r.done_us += by;
  }
  total.records.insert(total.records.end(), part.records.begin(), part.records.end());
  total.parts_included.insert(total.parts_included.end(), part.parts_included.begin(),
                              part.parts_included.end());
  std::sort(total.parts_included.begin(), total.parts_included.end());
  total.issued += part.issued;
  total.decided += part.decided;
  total.allowed += part.allowed;
  total.errors += part.errors;
  for (size_t i = 0; i < total.by_source.size(); ++i) total.by_source[i] += part.by_source[i];
  total.store_ops += part.store_ops;
  total.store_errors += part.store_errors;
  total.deadline_misses += part.deadline_misses;
  for (size_t i = 0; i < total.fallback_by_class.size(); ++i) {
    total.fallback_by_class[i] += part.fallback_by_class[i];
  }
  total.decided_span_s = std::max(total.decided_span_s, part.decided_span_s);
  if (total.first_error.empty()) total.first_error = part.first_error;
  total.latency.Merge(part.latency);
  if (total.seconds.size() < part.seconds.size()) total.seconds.resize(part.seconds.size());
  for (size_t i = 0; i < part.seconds.size(); ++i) {
    SecondTotals& t = total.seconds[i];
    const SecondTotals& p = part.seconds[i];
    t.offered += p.offered;
    t.decided += p.decided;
    t.store_ops += p.store_ops;
    t.fallbacks += p.fallbacks;
    t.lag_us = std::max(t.lag_us, p.lag_us);
    t.latency.Merge(p.latency);
  }
  total.harness_cpu_s += part.harness_cpu_s;
  total.arrival_cpu_s += part.arrival_cpu_s;
  total.arrivals_generated += part.arrivals_generated;
  for (NodeUsage& u : part.node_usage) total.node_usage.push_back(std::move(u));
  return Status::Ok();
}

Status WritePartial(const RunTotals& run, const std::string& json_path) {
  const std::string records_path = json_path + ".records";
  {
    std::ofstream f(records_path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(run.records.data()),
            static_cast<std::streamsize>(run.records.size() * sizeof(DecisionRecord)));
    if (!f) return Error{"cannot write " + records_path};
  }
  Json seconds = Json::array();
  for (const SecondTotals& s : run.seconds) {
    seconds.push_back({{"offered", s.offered},
                       {"decided", s.decided},
                       {"store_ops", s.store_ops},
                       {"fallbacks", s.fallbacks},
                       {"lag_us", s.lag_us},
                       {"latency", HistogramJson(s.latency)}});
  }
  Json nodes = Json::array();
  for (const NodeUsage& u : run.node_usage) {
    nodes.push_back({{"address", u.address},
                     {"cpu_s", u.cpu_s ? Json(*u.cpu_s) : Json()},
                     {"wall_s", u.wall_s},
                     {"rss_bytes", u.rss_bytes},
                     {"frames", u.frames},
                     {"store_ops", u.store_ops}});
  }
  Json j = SettingsJson(run);
  j.update({{"partial_format", kPartialFormat},
            {"parts_included", run.parts_included},
            {"t0_wall_us", run.t0_wall_us},
            {"issued", run.issued},
            {"decided", run.decided},
            {"allowed", run.allowed},
            {"errors", run.errors},
            {"by_source", run.by_source},
            {"store_ops", run.store_ops},
            {"store_errors", run.store_errors},
            {"deadline_misses", run.deadline_misses},
            {"fallback_by_class", run.fallback_by_class},
            {"decided_span_s", run.decided_span_s},
            {"first_error", run.first_error},
            {"latency", HistogramJson(run.latency)},
            {"seconds", seconds},
            {"harness_cpu_s", run.harness_cpu_s},
            {"arrival_cpu_s", run.arrival_cpu_s},
            {"arrivals_generated", run.arrivals_generated},
            {"node_usage", nodes},
            {"records", run.records.size()},
            {"record_bytes", sizeof(DecisionRecord)}});
  std::ofstream f(json_path);
  f << j.dump(1) << '\n';
  if (!f) return Error{"cannot write " + json_path};
  return Status::Ok();
}

Result<RunTotals> ReadPartial(const std::string& json_path) {
  std::ifstream f(json_path);
  if (!f) return Error{"cannot read " + json_path};
  RunTotals run;
  try {
    const Json j = Json::parse(f);
    if (!j.contains("partial_format")) {
      return Error{json_path +
                   ": not a partial report (limiter-bench cluster --part I/N "
                   "--json FILE writes one)"};
    }
    if (j["partial_format"].get<int>() != kPartialFormat) {
      return Error{json_path + ": partial report format " + j["partial_format"].dump() +
                   ", this limiter-bench reads " + std::to_string(kPartialFormat)};
    }
    if (j.at("record_bytes").get<size_t>() != sizeof(DecisionRecord)) {
      return Error{json_path + ": its decisions were written by another build (" +
                   j["record_bytes"].dump() + "-byte records, " +
                   std::to_string(sizeof(DecisionRecord)) + " here)"};
    }
    run.scenario = j.at("scenario").get<std::string>();
    run.seed = j.at("seed").get<uint64_t>();
    run.rate = j.at("rate").get<double>();
    run.gateways = j.at("gateways").get<int>();
    run.nodes = j.at("nodes").get<int>();
    run.duration_s = j.at("duration_s").get<double>();
    run.warmup_s = j.at("warmup_s").get<double>();
    run.spread = j.at("spread").get<std::string>();
    run.loops = j.at("loops").get<int>();
    run.deadline_us = j.at("deadline_us").get<int64_t>();
    run.parts = j.at("parts").get<int>();
    run.parts_included = j.at("parts_included").get<std::vector<int>>();
    run.t0_wall_us = j.at("t0_wall_us").get<int64_t>();
    run.issued = j.at("issued").get<uint64_t>();
    run.decided = j.at("decided").get<uint64_t>();
    run.allowed = j.at("allowed").get<uint64_t>();
    run.errors = j.at("errors").get<uint64_t>();
    run.by_source = j.at("by_source").get<std::array<uint64_t, 3>>();
    run.store_ops = j.at("store_ops").get<uint64_t>();
    run.store_errors = j.at("store_errors").get<uint64_t>();
    run.deadline_misses = j.at("deadline_misses").get<uint64_t>();
    run.fallback_by_class = j.at("fallback_by_class").get<std::array<uint64_t, 4>>();
    run.decided_span_s = j.at("decided_span_s").get<double>();
    run.first_error = j.at("first_error").get<std::string>();
    run.latency = HistogramFrom(j.at("latency"));
    for (const Json& s : j.at("seconds")) {
      SecondTotals t;
      t.offered = s.at("offered").get<uint64_t>();
      t.decided = s.at("decided").get<uint64_t>();
      t.store_ops = s.at("store_ops").get<uint64_t>();
      t.fallbacks = s.at("fallbacks").get<uint64_t>();
      t.lag_us = s.at("lag_us").get<int64_t>();
      t.latency = HistogramFrom(s.at("latency"));
      run.seconds.push_back(std::move(t));
    }
    run.harness_cpu_s = j.at("harness_cpu_s").get<double>();
    run.arrival_cpu_s = j.at("arrival_cpu_s").get<double>();
    run.arrivals_generated = j.at("arrivals_generated").get<uint64_t>();
    for (const Json& n : j.at("node_usage")) {
      NodeUsage u;
      u.address = n.at("address").get<std::string>();
      if (!n.at("cpu_s").is_null()) u.cpu_s = n["cpu_s"].get<double>();
      u.wall_s = n.at("wall_s").get<double>();
      u.rss_bytes = n.at("rss_bytes").get<int64_t>();
      u.frames = n.at("frames").get<int64_t>();
      u.store_ops = n.at("store_ops").get<int64_t>();
      run.node_usage.push_back(u);
    }
    if (run.parts < 1 || run.parts > 65535 || run.parts_included.empty()) {
      return Error{json_path + ": names no part (parts " + std::to_string(run.parts) + ")"};
    }
    std::vector<int> seen = run.parts_included;
    std::sort(seen.begin(), seen.end());
    if (seen.front() < 0 || seen.back() >= run.parts ||
        std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
      return Error{json_path + ": parts_included must be distinct parts from 0 to " +
                   std::to_string(run.parts - 1)};
    }
    const std::optional<Scenario> scenario = FindScenario(run.scenario);
    if (!scenario) return Error{json_path + ": unknown scenario '" + run.scenario + "'"};
    const uint64_t records = j.at("records").get<uint64_t>();
    const std::string records_path = json_path + ".records";
    std::error_code ec;
    const uintmax_t bytes = std::filesystem::file_size(records_path, ec);
    if (ec) return Error{"cannot read " + records_path + ": " + ec.message()};
    if (records > bytes / sizeof(DecisionRecord) || bytes != records * sizeof(DecisionRecord)) {
      return Error{records_path + ": expected " + std::to_string(records) + " decisions of " +
                   std::to_string(sizeof(DecisionRecord)) + " bytes, found " +
                   std::to_string(bytes) + " bytes"};
    }
    std::ifstream r(records_path, std::ios::binary);
    run.records.resize(static_cast<size_t>(records));
    r.read(reinterpret_cast<char*>(run.records.data()),
           static_cast<std::streamsize>(records * sizeof(DecisionRecord)));
    if (!r) return Error{"cannot read " + records_path};
    const std::array<size_t, kKinds> keys = {static_cast<size_t>(scenario->keys),
                                             static_cast<size_t>(scenario->accounts)};
    for (size_t i = 0; i < run.records.size(); ++i) {
      if (Status s = CheckRecord(run.records[i], keys); !s.ok()) {
        return Error{records_path + ": decision " + std::to_string(i) + ": " + s.error()};
      }
    }
  } catch (const std::exception& e) {  // the JSON's shape, a bucket index, an allocation
    return Error{json_path + ": " + e.what()};
  }
  return run;
}

std::vector<ChartRow> ChartRowsOf(const RunTotals& run) {
  std::vector<ChartRow> rows;
  for (size_t i = 0; i < run.seconds.size(); ++i) {
    const SecondTotals& s = run.seconds[i];
    rows.push_back({static_cast<double>(i + 1), s.decided, s.store_ops, s.latency.Quantile(0.99)});
  }
  return rows;
}

Result<Json> BuildReport(const RunTotals& run, const PolicySet& policies, const Workload& workload,
                         std::string* markdown) {
  const Result<std::vector<KindLimits>> limits_of =
      LimitsOf(policies, run.gateways, run.deadline_us);
  if (!limits_of) return limits_of.status();
  const std::vector<KindLimits>& limits = *limits_of;
  const Accuracy a = CheckAccuracy(run.records, limits, workload);
  const StoreOpFloorResult floor = StoreOpFloor(run.records, limits);
  const double span_s = std::max(run.duration_s, run.decided_span_s);
  const double offered = static_cast<double>(run.issued) / run.duration_s;
  const double achieved = static_cast<double>(run.decided) / span_s;
  const double per_request =
      run.issued ? static_cast<double>(run.store_ops) / static_cast<double>(run.issued) : 0;
  Json r = SettingsJson(run);
  r.update(
      {{"parts_included", run.parts_included},
       {"offered_rps", offered},
       {"achieved_rps", achieved},
       {"achieved_ratio", offered > 0 ? achieved / offered : 0},
       {"decisions_per_s", achieved},
       {"issued", run.issued},
       {"decided", run.decided},
       {"allowed", run.allowed},
       {"denied", run.decided - run.allowed - run.errors},
       {"errors", run.errors},
       {"by_source",
        {{"store", run.by_source[0]}, {"lease", run.by_source[1]}, {"fallback", run.by_source[2]}}},
       {"store_ops", run.store_ops},
       {"store_ops_per_s", static_cast<double>(run.store_ops) / span_s},
       {"store_ops_per_request", per_request},
       {"store_ops_floor", floor.total()},
       {"store_ops_floor_per_s", static_cast<double>(floor.total()) / span_s},
       {"store_ops_floor_by_kind",
        {{"leases", floor.leases}, {"checks", floor.checks}, {"denials", floor.denials}}},
       {"store_ops_to_floor",
        floor.total() ? static_cast<double>(run.store_ops) / static_cast<double>(floor.total())
                      : 0},
       {"store_errors", run.store_errors},
       {"deadline_misses", run.deadline_misses},
       {"p50_us", run.latency.Quantile(0.5)},
       {"p99_us", run.latency.Quantile(0.99)},
       {"p999_us", run.latency.Quantile(0.999)},
       {"max_us", run.latency.max},
       {"fallbacks_by_class",
        {{"security", run.fallback_by_class[0]},
         {"contract", run.fallback_by_class[1]},
         {"billing", run.fallback_by_class[2]},
         {"capacity", run.fallback_by_class[3]}}},
       {"node_usage", Json::array()},
       {"per_second", Json::array()}});
  r.update(AccuracyJson(a));
  if (!run.first_error.empty()) r["first_error"] = run.first_error;
  double node_cpu = 0;
  int64_t node_frames = 0, node_ops = 0;
  for (const NodeUsage& u : run.node_usage) {
    r["node_usage"].push_back(
        {{"address", u.address},
         {"cpu_percent", u.cpu_s && u.wall_s > 0 ? Json(100 * *u.cpu_s / u.wall_s) : Json()},
         {"rss_bytes", u.rss_bytes},
         {"frames", u.frames},
         {"store_ops", u.store_ops}});
    if (u.cpu_s && u.frames > 0) {
      node_cpu += *u.cpu_s;
      node_frames += u.frames;
      node_ops += u.store_ops;
    }
  }
  // The cost model: what one decision costs the gateway library (the harness's CPU less what
  // generating the arrivals costs alone), and what one store op and one frame cost a node.
  const double decisions_all = static_cast<double>(run.records.size());
  Json cost = {{"harness_cpu_s", run.harness_cpu_s},
               {"arrival_generation_cpu_s", run.arrival_cpu_s}};
  if (decisions_all > 0 && run.harness_cpu_s > 0) {
    const double gateway_us =
        std::max(0.0, run.harness_cpu_s - run.arrival_cpu_s) * 1e6 / decisions_all;
    cost["gateway_us_per_decision"] = gateway_us;
    cost["arrival_us_each"] =
        run.arrivals_generated
            ? run.arrival_cpu_s * 1e6 / static_cast<double>(run.arrivals_generated)
            : 0;
    cost["gateway_cores_at_50k"] = 50'000 * gateway_us / 1e6;
    cost["gateway_cores_at_500k"] = 500'000 * gateway_us / 1e6;
  }
  if (node_frames > 0 && node_ops > 0) {
    const double per_op = node_cpu * 1e6 / static_cast<double>(node_ops);
    cost["node_us_per_store_op"] = per_op;
    cost["node_us_per_frame"] = node_cpu * 1e6 / static_cast<double>(node_frames);
    cost["node_ops_per_frame"] = static_cast<double>(node_ops) / static_cast<double>(node_frames);
    // At the store-op ratio this run measured.
    cost["node_cores_at_50k"] = 50'000 * per_request * per_op / 1e6;
    cost["node_cores_at_500k"] = 500'000 * per_request * per_op / 1e6;
  }
  r["cost"] = cost;
  int64_t worst_lag = 0;
  for (size_t i = 0; i < run.seconds.size(); ++i) {
    const SecondTotals& s = run.seconds[i];
    const bool warm_up = static_cast<double>(i) < run.warmup_s;
    if (!warm_up) worst_lag = std::max(worst_lag, s.lag_us);
    r["per_second"].push_back({{"t", static_cast<double>(i + 1)},
                               {"offered", s.offered},
                               {"decided", s.decided},
                               {"store_ops", s.store_ops},
                               {"p99_us", s.latency.Quantile(0.99)},
                               {"warm_up", warm_up},
                               {"loop_lag_us", s.lag_us},
                               {"fallbacks", s.fallbacks}});
  }
  r["loop_lag_max_us"] = worst_lag;

  std::string& md = *markdown;
  md = "# limiter-bench cluster: scenario " + run.scenario + "\n\n";
  md +=
      Fmt("%d gateways, %d nodes, %.0f s measured after a %.0f s warm-up, spread %s, seed %" PRIu64,
          run.gateways, run.nodes, run.duration_s, run.warmup_s, run.spread.c_str(), run.seed);
  if (run.parts > 1) md += Fmt(", %zu of %d parts merged", run.parts_included.size(), run.parts);
  md += "\n\n| measure | value |\n|---|---|\n";
  auto row = [&](const std::string& name, const std::string& value) {
    md += "| " + name + " | " + value + " |\n";
  };
  row("offered requests/s", Fmt("%.0f", offered));
  row("achieved decisions/s",
      Fmt("%.0f (%.3f%% of offered)", achieved, 100 * r["achieved_ratio"].get<double>()));
  row("allowed / denied / errors", Fmt("%" PRIu64 " / %" PRIu64 " / %" PRIu64, run.allowed,
                                       run.decided - run.allowed - run.errors, run.errors));
  row("store operations/s", Fmt("%.0f (1 per %.1f requests)", r["store_ops_per_s"].get<double>(),
                                1 / std::max(1e-9, per_request)));
  row("store-op floor/s",
      Fmt("%.0f (store ops %.3fx the floor)", r["store_ops_floor_per_s"].get<double>(),
          r["store_ops_to_floor"].get<double>()));
  row("added latency p50 / p99 / p999 / max",
      Fmt("%" PRIu64 " / %" PRIu64 " / %" PRIu64 " / %" PRIu64 " us", run.latency.Quantile(0.5),
          run.latency.Quantile(0.99), run.latency.Quantile(0.999), run.latency.max));
  row("arrival loop lag, worst second", Fmt("%" PRId64 " us", worst_lag));
  row("keys over the promise, no fallback",
      Fmt("%" PRIu64 " of %" PRIu64 " checked", a.keys_over_promise, a.keys_checked));
  row("worst window", WorstText(r["worst_window"]));
  row("keys with a fallback",
      Fmt("%" PRIu64 ": %" PRIu64 " over the promise, %" PRIu64 " over their class's allowance",
          a.keys_with_fallback, a.keys_over_promise_with_fallback, a.keys_over_allowance));
  row("worst window with fallback", WorstText(r["worst_with_fallback"]));
  row("units admitted by fallback, by class",
      Fmt("security %" PRIu64 ", contract %" PRIu64 ", billing %" PRIu64 ", capacity %" PRIu64,
          a.fallback_units_by_class[0], a.fallback_units_by_class[1], a.fallback_units_by_class[2],
          a.fallback_units_by_class[3]));
  row("real admission time: keys over B + L·t/W / over B + g·S + L·t/W",
      Fmt("%" PRIu64 " / %" PRIu64, a.keys_over_promise_real_time, a.keys_over_real_time_bound));
  row("fallbacks by class",
      Fmt("security %" PRIu64 ", contract %" PRIu64 ", billing %" PRIu64 ", capacity %" PRIu64,
          run.fallback_by_class[0], run.fallback_by_class[1], run.fallback_by_class[2],
          run.fallback_by_class[3]));
  for (const Json& n : r["node_usage"]) {
    const std::string cpu =
        n["cpu_percent"].is_null() ? "?" : Fmt("%.0f%%", n["cpu_percent"].get<double>());
    row("node " + n["address"].get<std::string>(),
        "CPU " + cpu + ", RSS " +
            Fmt("%.1f MiB", static_cast<double>(n["rss_bytes"].get<int64_t>()) / (1 << 20)));
  }
  if (cost.contains("gateway_us_per_decision")) {
    row("gateway library CPU per decision",
        Fmt("%.2f us (arrival generation, %.2f us each, subtracted): %.2f cores at 50k, %.1f at "
            "500k",
            cost["gateway_us_per_decision"].get<double>(), cost["arrival_us_each"].get<double>(),
            cost["gateway_cores_at_50k"].get<double>(),
            cost["gateway_cores_at_500k"].get<double>()));
  }
  if (cost.contains("node_us_per_store_op")) {
    row("node CPU per store op / per frame",
        Fmt("%.2f us / %.2f us (%.1f ops a frame): %.2f cores at 50k, %.1f at 500k",
            cost["node_us_per_store_op"].get<double>(), cost["node_us_per_frame"].get<double>(),
            cost["node_ops_per_frame"].get<double>(), cost["node_cores_at_50k"].get<double>(),
            cost["node_cores_at_500k"].get<double>()));
  }
  return r;
}

std::string SimMarkdown(const Json& r) {
  std::string md = "# limiter-bench sim: scenario " + r["scenario"].get<std::string>() + "\n\n";
  md += Fmt(
      "%d gateways, %d nodes (%d workers each), %.0f simulated s measured after a %.0f s warm-up, "
      "spread %s, seed %" PRIu64 "\n\n",
      r["gateways"].get<int>(), r["nodes"].get<int>(), r["model"]["node_threads"].get<int>(),
      r["duration_s"].get<double>(), r["warmup_s"].get<double>(),
      r["spread"].get<std::string>().c_str(), r["seed"].get<uint64_t>());
  const Json& m = r["model"];
  md += Fmt(
      "Model: one-way delay log-normal, median %.0f us, sigma %.2f; a node frame costs %.2f us + "
      "%.2f us per op.\n\n",
      m["one_way_median_us"].get<double>(), m["one_way_sigma"].get<double>(),
      m["node_frame_us"].get<double>(), m["node_op_us"].get<double>());
  if (!r["faults"].empty()) {
    md += "Faults:";
    for (const Json& f : r["faults"]) md += " `" + f.get<std::string>() + "`";
    md += "\n\n";
  }
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
  row("by source (store / lease / fallback)",
      Fmt("%" PRIu64 " / %" PRIu64 " / %" PRIu64, r["by_source"]["store"].get<uint64_t>(),
          r["by_source"]["lease"].get<uint64_t>(), r["by_source"]["fallback"].get<uint64_t>()));
  row("store operations/s", Fmt("%.0f (1 per %.1f requests)", r["store_ops_per_s"].get<double>(),
                                1 / std::max(1e-9, r["store_ops_per_request"].get<double>())));
  row("store-op floor/s",
      Fmt("%.0f (store ops %.3fx the floor)", r["store_ops_floor_per_s"].get<double>(),
          r["store_ops_to_floor"].get<double>()));
  row("simulated added latency p50 / p99 / p999 / max",
      Fmt("%" PRIu64 " / %" PRIu64 " / %" PRIu64 " / %" PRIu64 " us", r["p50_us"].get<uint64_t>(),
          r["p99_us"].get<uint64_t>(), r["p999_us"].get<uint64_t>(), r["max_us"].get<uint64_t>()));
  row("keys over the promise, no fallback (charge time)",
      Fmt("%" PRIu64 " of %" PRIu64 " checked", r["keys_over_promise"].get<uint64_t>(),
          r["keys_checked"].get<uint64_t>()));
  row("worst window, no fallback", WorstText(r["worst_window"]));
  row("keys with a fallback or a reset owner",
      Fmt("%" PRIu64 ": %" PRIu64 " over the promise, %" PRIu64 " over their class's allowance",
          r["keys_with_fallback"].get<uint64_t>(),
          r["keys_over_promise_with_fallback"].get<uint64_t>(),
          r["keys_over_allowance"].get<uint64_t>()));
  row("worst window with fallback", WorstText(r["worst_with_fallback"]));
  const Json& fu = r["fallback_admitted_units_by_class"];
  row("units admitted by fallback, by class",
      Fmt("security %" PRIu64 ", contract %" PRIu64 ", billing %" PRIu64 ", capacity %" PRIu64,
          fu["security"].get<uint64_t>(), fu["contract"].get<uint64_t>(),
          fu["billing"].get<uint64_t>(), fu["capacity"].get<uint64_t>()));
  row("real admission time: keys over B + L·t/W / over B + g·S + L·t/W",
      Fmt("%" PRIu64 " / %" PRIu64, r["keys_over_promise_real_time"].get<uint64_t>(),
          r["keys_over_real_time_bound"].get<uint64_t>()));
  row("worst window in real time", WorstText(r["worst_real_time"]));
  const Json& f = r["fallbacks_by_class"];
  row("fallbacks by class",
      Fmt("security %" PRIu64 ", contract %" PRIu64 ", billing %" PRIu64 ", capacity %" PRIu64,
          f["security"].get<uint64_t>(), f["contract"].get<uint64_t>(),
          f["billing"].get<uint64_t>(), f["capacity"].get<uint64_t>()));
  for (const Json& n : r["node_load"]) {
    row("node " + n["address"].get<std::string>(),
        Fmt("%.1f%% busy (peak second %.1f%%), %.1f ops/frame, queue wait p99 %" PRIu64
            " us, max %" PRIu64 " us",
            100 * n["utilization"].get<double>(), 100 * n["peak_second_utilization"].get<double>(),
            n["ops_per_frame"].get<double>(), n["queue_wait_p99_us"].get<uint64_t>(),
            n["queue_wait_max_us"].get<uint64_t>()));
  }
  return md;
}

}  // namespace limiter::bench
