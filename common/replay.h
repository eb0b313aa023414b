// Replay: what a limit would have done to a recorded trace. Pure computation over rows that
// ParseTrace produced; every key gets its own limiter, starting fresh.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/algorithm_kind.h"
#include "common/rate.h"
#include "common/trace.h"

namespace limiter {

struct Policy;

struct ReplayResult {
  Algorithm algorithm = Algorithm::kGcra;
  int64_t offered = 0;   // requests
  int64_t accepted = 0;  // requests
  int64_t offered_cost = 0;
  int64_t accepted_cost = 0;
  // The most cost admitted for one key in any interval (t-W, t], aligned or not; the maximum
  // over keys. This is what the promise of a limit is about.
  int64_t worst_window = 0;
  std::string worst_key;
  // label -> (offered requests, accepted requests), labels in order of first appearance.
  struct Label {
    std::string label;
    int64_t offered = 0;
    int64_t accepted = 0;
  };
  std::vector<Label> by_label;
};

// A row's cost: its own if given, else the policy's cost for an operation named like the
// row's label (when `policy` is not null), else 1.
ReplayResult Replay(const std::vector<TraceRow>& trace, Algorithm algorithm, const Rate& rate,
                    const Policy* policy = nullptr);

}  // namespace limiter
