// Reading a running node's admin port (its /metrics, /readyz, ...) from integration tests.
#pragma once

#include <httplib.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

namespace limiter::testing {

// GET `path` on a node's admin port (HOST:PORT): the body when it answered 200, else nullopt;
// `status`, when given, gets the HTTP status (-1: no answer).
inline std::optional<std::string> AdminGet(const std::string& admin, const std::string& path,
                                           int* status = nullptr) {
  const size_t colon = admin.rfind(':');
  if (admin.empty() || colon == std::string::npos) return std::nullopt;
  httplib::Client http(admin.substr(0, colon), std::stoi(admin.substr(colon + 1)));
  http.set_connection_timeout(1, 0);
  http.set_read_timeout(2, 0);
  http.set_write_timeout(1, 0);
  httplib::Result r = http.Get(path);
  if (status) *status = r ? r->status : -1;
  if (!r || r->status != 200) return std::nullopt;
  return r->body;
}

// The sum of a metric's samples (every label set) in a /metrics page; -1 when absent.
inline int64_t MetricSum(const std::string& page, const std::string& name) {
  std::istringstream lines(page);
  std::string line;
  int64_t sum = -1;
  while (std::getline(lines, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != ' ' && next != '{') continue;
    const size_t space = line.rfind(' ');
    sum = std::max<int64_t>(sum, 0) + static_cast<int64_t>(std::stod(line.substr(space + 1)));
  }
  return sum;
}

// A metric of a node now (the sum of its samples); -1 when absent or the node did not answer.
inline int64_t AdminMetric(const std::string& admin, const std::string& name) {
  const std::optional<std::string> page = AdminGet(admin, "/metrics");
  return page ? MetricSum(*page, name) : -1;
}

}  // namespace limiter::testing
