// KeyLimiter: the state of one key under any of the six algorithms, chosen at run time.
// Used where the algorithm comes from configuration (replay, tests); a value type, not
// thread-safe.
#pragma once

#include <variant>

#include "common/algorithm.h"
#include "common/algorithms.h"
#include "common/sliding_log.h"

namespace limiter {

class KeyLimiter {
 public:
  explicit KeyLimiter(Algorithm algorithm);

  Algorithm algorithm() const { return static_cast<Algorithm>(state_.index()); }
  Decision Decide(const Rate& rate, int64_t now_ms, int64_t cost);

 private:
  // Alternatives in the order of Algorithm's enumerators.
  std::variant<FixedWindow::State, SlidingLog::State, SlidingWindow::State, TokenBucket::State,
               Gcra::State, LeakyBucket::State>
      state_;
};

}  // namespace limiter
