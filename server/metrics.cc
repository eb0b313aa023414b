// Node::RenderMetrics: the Prometheus text exposition format, version 0.0.4.
#include <array>
#include <sstream>

#include "server/node.h"

namespace limiter {
namespace {

constexpr std::array<const char*, kBadFrameKinds> kBad = {"too_large", "empty", "invalid",
                                                          "truncated"};
// Latency bucket bounds, in microseconds.
constexpr std::array<uint64_t, 16> kBoundsUs = {1,   2,   5,    10,   20,   50,    100,   200,
                                                500, 1000, 2000, 5000, 10000, 50000, 100000, 1000000};

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

std::string Node::RenderMetrics() {
  const size_t n_policies = policies_.policies().size();
  std::array<std::array<uint64_t, 3>, kOpTypes + 1> ops{};
  std::vector<std::array<uint64_t, 2>> decisions(n_policies);
  Histogram::Snapshot latency;
  {
    std::lock_guard<std::mutex> guard(workers_mu_);
    for (const auto& w : workers_) {
      const WorkerCounters& c = CountersOf(*w);
      for (size_t t = 0; t < ops.size(); ++t) {
        for (size_t o = 0; o < 3; ++o) ops[t][o] += c.ops[t][o].Get();
      }
      for (size_t p = 0; p < n_policies; ++p) {
        decisions[p][0] += c.decisions[p][0].Get();
        decisions[p][1] += c.decisions[p][1].Get();
      }
      c.frame_latency_us.AddTo(latency);
    }
  }
  std::ostringstream out;
  Header(out, "limiter_ops_total", "counter", "Operations by type and outcome.");
  for (size_t t = 0; t < ops.size(); ++t) {
    const bool decides = t <= 1;  // check, lease
    for (size_t o = 0; o < 3; ++o) {
      if (!decides && o == kDenied) continue;
      const char* outcome = o == kError ? "error" : !decides ? "ok" : o == kAllowed ? "allowed" : "denied";
      out << "limiter_ops_total{op=\"" << OpTypeName(static_cast<int>(t)) << "\",outcome=\""
          << outcome << "\"} "
          << ops[t][o] << '\n';
    }
  }
  Header(out, "limiter_decisions_total", "counter",
         "Limit decisions by policy and result (every limit a CHECK or LEASE touched).");
  for (size_t p = 0; p < n_policies; ++p) {
    const std::string name = Escape(policies_.policies()[p].name);
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

  std::vector<std::pair<std::string, int64_t>> stats = Stats();
  auto stat = [&](const std::string& name) -> int64_t {
    for (const auto& [n, v] : stats) {
      if (n == name) return v;
    }
    return 0;
  };
  Header(out, "limiter_keys", "gauge", "Keys with live state in the store.");
  out << "limiter_keys " << stat("keys") << '\n';
  Header(out, "limiter_max_keys", "gauge", "The key bound (max_keys).");
  out << "limiter_max_keys " << stat("max_keys") << '\n';
  Header(out, "limiter_evictions_total", "counter", "Expired keys reclaimed.");
  out << "limiter_evictions_total " << stat("evictions") << '\n';
  Header(out, "limiter_refusals_total", "counter", "New keys refused at max_keys.");
  out << "limiter_refusals_total " << stat("refusals") << '\n';
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
