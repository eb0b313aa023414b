// Recorded request traces for `limiterctl replay`: CSV with the header t_ms,key,cost,label
// (cost and label columns optional, their values may be empty), t_ms non-decreasing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "limiter/status.h"

namespace limiter {

struct TraceRow {
  int64_t t_ms = 0;
  std::string key;
  std::optional<int64_t> cost;  // absent or empty in the file
  std::string label;            // empty when absent
  int line = 0;                 // 1-based line in the file
};

// Errors read "SOURCE:LINE: what is wrong"; the first bad row stops the parse.
Result<std::vector<TraceRow>> ParseTrace(std::string_view text, const std::string& source);
Result<std::vector<TraceRow>> LoadTraceFile(const std::string& path);

}  // namespace limiter
