// What a `limiter-bench cluster` run measured, kept in a form that adds up: a run of some of
// the scenario's gateways (`--part i/n`) writes one of these, `limiter-bench merge` sums
// them, and one report is built from the sum the same way whether it came from one part or
// many. Counts add, histograms merge bucket by bucket, and the decisions themselves (for the
// store-op floor and the accuracy check over the union of every part's admissions) are kept
// in a binary file beside the JSON.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/fleet_accounting.h"
#include "bench/report_chart.h"
#include "common/histogram.h"
#include "limiter/status.h"

namespace limiter::bench {

struct NodeUsage {
  std::string address;
  std::optional<double> cpu_s;  // local nodes only
  double wall_s = 0;
  int64_t rss_bytes = -1;
  int64_t frames = 0, store_ops = 0;  // handled during the run (STATS), -1 when unread
};

struct SecondTotals {
  uint64_t offered = 0, decided = 0, store_ops = 0, fallbacks = 0;
  int64_t lag_us = 0;  // the longest an arrival loop was late in the second
  Histogram::Snapshot latency;
};

struct RunTotals {
  // The run: the same in every part.
  std::string scenario;
  uint64_t seed = 0;
  double rate = 0;
  int gateways = 0;
  int nodes = 0;
  double duration_s = 0, warmup_s = 0;
  std::string spread;
  int loops = 1;
  int64_t deadline_us = 2000;  // each gateway's store-call deadline
  // Which parts these are: part i of n covers gateways i, i + n, ...; a merge lists them all.
  int parts = 1;
  std::vector<int> parts_included;
  // Wall clock (unix us) at the scenario's start, per part: decision times are relative to it.
  int64_t t0_wall_us = 0;

  uint64_t issued = 0, decided = 0, allowed = 0, errors = 0;  // after the warm-up
  std::array<uint64_t, 3> by_source{};                        // client::Source order
  uint64_t store_ops = 0, store_errors = 0, deadline_misses = 0;
  std::array<uint64_t, 4> fallback_by_class{};
  double decided_span_s = 0;  // from the warm-up's end to the last decision (the longest part)
  std::string first_error;
  Histogram::Snapshot latency;
  std::vector<SecondTotals> seconds;
  std::vector<DecisionRecord> records;  // every decision, warm-up included; times from t0
  // Cost: the harness process's CPU over the run, and what generating the arrivals alone
  // costs per arrival (measured before the run). Summed over parts.
  double harness_cpu_s = 0;
  double arrival_cpu_s = 0;  // arrival_us_each x arrivals generated
  uint64_t arrivals_generated = 0;
  std::vector<NodeUsage> node_usage;
};

// Adds `part` into `total`: counts add, histograms and seconds merge, records join (moved to
// `total`'s clock: both parts' wall-clock starts are known). An error when the parts started
// more than an hour apart (they are not one run).
Status MergeInto(RunTotals& total, RunTotals part);

// The partial report: JSON at `json_path`, the decisions at `json_path + ".records"`. Reading
// checks everything (sizes, the parts it names, every decision) and says what is wrong.
Status WritePartial(const RunTotals& run, const std::string& json_path);
Result<RunTotals> ReadPartial(const std::string& json_path);

// The report of a whole run (one part, or merged parts), with the store-op floor and the
// accuracy accounting over every decision; `markdown` gets its table. An error when the
// policy file lacks a policy the accounting needs (LimitsOf).
Result<nlohmann::json> BuildReport(const RunTotals& run, const PolicySet& policies,
                                   const Workload& workload, std::string* markdown);

// What makes runs one run: the scenario, seed, rate, gateways, nodes, duration, warm-up,
// spread, loops, deadline and part count (not which parts).
nlohmann::json SettingsJson(const RunTotals& run);

// The accuracy's worst keys as JSON, and that JSON as a line of a report's table.
nlohmann::json WorstJson(const WorstKey& w);
// The accuracy's fields of a report (keys_over_promise, keys_over_allowance, ...).
nlohmann::json AccuracyJson(const Accuracy& a);
std::string WorstText(const nlohmann::json& w);

// The Markdown table of a `limiter-bench sim` report (bench/fleet_sim.h).
std::string SimMarkdown(const nlohmann::json& report);

// The per-second chart rows of a report.
std::vector<ChartRow> ChartRowsOf(const RunTotals& run);

}  // namespace limiter::bench
