#include <algorithm>
#include <charconv>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

#include "client/ctl/commands.h"
#include "common/duration.h"
#include "common/key_limiter.h"
#include "common/policy_file.h"
#include "common/replay.h"

namespace limiter::ctl {
namespace {

std::optional<int64_t> ParseWindowMs(const std::string& text) {
  int64_t ms = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (ec == std::errc() && end == text.data() + text.size()) return ms;
  return ParseDurationMs(text);
}

struct Setup {
  std::vector<Algorithm> algorithms;
  Rate rate;
  const Policy* policy = nullptr;
};

// What the arguments ask for, or why they do not make sense.
Result<Setup> Resolve(const ReplayArgs& args, const PolicySet* policies) {
  Setup setup;
  std::string algorithm = args.algorithm;
  if (policies) {
    setup.policy = policies->Find(args.policy);
    if (!setup.policy) {
      return Error{args.policy_file + ": no policy named '" + args.policy + "'"};
    }
    setup.rate = setup.policy->rate;
    if (algorithm.empty()) algorithm = std::string(AlgorithmName(setup.policy->algorithm));
  } else {
    if (!args.limit || !args.window) {
      return Error{"replay needs --limit and --window (or --policy-file and --policy)"};
    }
    const std::optional<int64_t> window = ParseWindowMs(*args.window);
    if (!window) {
      return Error{"--window: expected milliseconds or a duration like 1s, got '" + *args.window +
                   "'"};
    }
    const int64_t burst = args.burst.value_or(*args.limit);
    if (Status s = Rate::Validate(*args.limit, *window, burst); !s.ok()) return s;
    setup.rate = Rate(*args.limit, *window, burst);
    if (algorithm.empty()) return Error{"replay needs --algorithm (a name or all)"};
  }
  if (algorithm == "all") {
    setup.algorithms.assign(kAllAlgorithms.begin(), kAllAlgorithms.end());
  } else if (const std::optional<Algorithm> a = ParseAlgorithm(algorithm)) {
    setup.algorithms.push_back(*a);
  } else {
    return Error{"--algorithm: unknown algorithm '" + algorithm +
                 "' (known: " + std::string(AlgorithmNameList()) + ", all)"};
  }
  for (Algorithm a : setup.algorithms) {
    if (Status s = SupportsRate(a, setup.rate); !s.ok()) return s;
  }
  return setup;
}

std::string DisplayLabel(const std::string& label) { return label.empty() ? "-" : label; }

void PrintTable(const std::vector<ReplayResult>& results, const Rate& rate,
                const std::string& trace_path, std::ostream& out) {
  const ReplayResult& first = results.front();
  const bool weighted = first.offered_cost != first.offered;
  out << "trace:   " << trace_path << '\n';
  out << "offered: " << first.offered << " requests";
  if (weighted) out << " (cost " << first.offered_cost << ")";
  for (const auto& label : first.by_label) {
    out << "  " << DisplayLabel(label.label) << '=' << label.offered;
  }
  out << "\nlimit:   " << rate.limit() << " per " << rate.window_ms() << " ms, burst "
      << rate.burst() << "\n\n";

  std::vector<size_t> widths;
  for (const auto& label : first.by_label) {
    widths.push_back(std::max<size_t>(DisplayLabel(label.label).size(), 4) + 2);
  }
  const std::string worst = "worst " + FormatDurationMs(rate.window_ms());
  out << std::left << std::setw(16) << "algorithm" << std::right;
  for (size_t i = 0; i < widths.size(); ++i) {
    out << std::setw(static_cast<int>(widths[i])) << DisplayLabel(first.by_label[i].label);
  }
  out << std::setw(7) << "total";
  if (weighted) out << std::setw(8) << "cost";
  out << std::setw(static_cast<int>(worst.size() + 2)) << worst << '\n';
  for (const ReplayResult& r : results) {
    out << std::left << std::setw(16) << AlgorithmName(r.algorithm) << std::right;
    for (size_t i = 0; i < widths.size(); ++i) {
      out << std::setw(static_cast<int>(widths[i])) << r.by_label[i].accepted;
    }
    out << std::setw(7) << r.accepted;
    if (weighted) out << std::setw(8) << r.accepted_cost;
    out << std::setw(static_cast<int>(worst.size() + 2)) << r.worst_window << '\n';
  }
}

void PrintJson(const std::vector<ReplayResult>& results, const Rate& rate, std::ostream& out) {
  for (const ReplayResult& r : results) {
    nlohmann::ordered_json by_label = nlohmann::ordered_json::object();
    for (const auto& label : r.by_label) by_label[label.label] = label.accepted;
    nlohmann::ordered_json line = {
        {"algorithm", AlgorithmName(r.algorithm)},
        {"offered", r.offered},
        {"accepted", r.accepted},
        {"worst_window", r.worst_window},
        {"by_label", std::move(by_label)},
        {"offered_cost", r.offered_cost},
        {"accepted_cost", r.accepted_cost},
        {"worst_key", r.worst_key},
        {"limit", rate.limit()},
        {"window_ms", rate.window_ms()},
        {"burst", rate.burst()},
    };
    out << line.dump() << '\n';
  }
}

}  // namespace

int RunReplay(const ReplayArgs& args, std::ostream& out, std::ostream& err) {
  const bool explicit_rate = args.limit || args.window || args.burst;
  const bool by_policy = !args.policy_file.empty() || !args.policy.empty();
  if (explicit_rate && by_policy) {
    err << "limiterctl replay: use either --limit/--window/--burst or --policy-file/--policy, "
           "not both\n";
    return 2;
  }
  if (by_policy && (args.policy_file.empty() || args.policy.empty())) {
    err << "limiterctl replay: --policy-file and --policy go together\n";
    return 2;
  }
  std::optional<PolicySet> policies;
  if (by_policy) {
    Result<PolicySet> loaded = LoadPolicyFile(args.policy_file);
    if (!loaded) {
      err << "limiterctl replay: " << loaded.error() << '\n';
      return 1;
    }
    policies = std::move(loaded).value();
  }
  Result<Setup> resolved = Resolve(args, policies ? &*policies : nullptr);
  if (!resolved) {
    err << "limiterctl replay: " << resolved.error() << '\n';
    return 2;
  }
  const Setup& setup = *resolved;
  Result<std::vector<TraceRow>> trace = LoadTraceFile(args.trace);
  if (!trace) {
    err << "limiterctl replay: " << trace.error() << '\n';
    return 1;
  }
  if (trace->empty()) {
    err << "limiterctl replay: " << args.trace << ": the trace has a header but no rows\n";
    return 1;
  }
  std::vector<ReplayResult> results;
  for (Algorithm a : setup.algorithms)
    results.push_back(Replay(*trace, a, setup.rate, setup.policy));
  if (args.json) {
    PrintJson(results, setup.rate, out);
  } else {
    PrintTable(results, setup.rate, args.trace, out);
  }
  return 0;
}

}  // namespace limiter::ctl
