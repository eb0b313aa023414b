// KeyLimiter: the state of one key under any of the six algorithms, chosen at run time, with
// the algorithm's operations. Used where the algorithm comes from configuration (the node's
// store, replay, tests). A value type, not thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/algorithm_kind.h"
#include "common/algorithms.h"
#include "common/sliding_log.h"

namespace limiter {

// Charge units per cost unit (algorithms.h): W for the bucket algorithms, whose contents are
// scaled by W; 1 for the window ones.
int64_t ChargeScale(Algorithm algorithm, const Rate& rate);
// What a fresh key admits at once, the most one request can ever be admitted: a bucket
// algorithm's burst, a window algorithm's limit.
int64_t FullAllowance(Algorithm algorithm, const Rate& rate);

// Ok when `algorithm` can run at `rate`, else why it cannot although the Rate itself is valid.
Status SupportsRate(Algorithm algorithm, const Rate& rate);

class KeyLimiter {
 public:
  // Alternatives in the order of Algorithm's enumerators.
  using State = std::variant<FixedWindow::State, SlidingLog::State, SlidingWindow::State,
                             TokenBucket::State, Gcra::State, LeakyBucket::State>;

  explicit KeyLimiter(Algorithm algorithm);  // a fresh key
  explicit KeyLimiter(State state) : state_(std::move(state)) {}

  Algorithm algorithm() const { return static_cast<Algorithm>(state_.index()); }
  State& state() { return state_; }
  const State& state() const { return state_; }

  LimitDecision Decide(const Rate& rate, int64_t now_ms, int64_t cost);
  // What Decide would answer, changing nothing.
  LimitDecision Peek(const Rate& rate, int64_t now_ms, int64_t cost) const;
  // The most cost that would be admitted now (0 if none).
  int64_t Available(const Rate& rate, int64_t now_ms) const;
  bool IsFresh(const Rate& rate, int64_t now_ms) const;
  int64_t ChargeScale(const Rate& rate) const { return limiter::ChargeScale(algorithm(), rate); }
  // See algorithms.h: the charge still in effect, and a refund of up to `amount` charge units
  // charged at charged_at_ms (returns what it gave back).
  int64_t InEffect(const Rate& rate, int64_t now_ms) const;
  int64_t Refund(const Rate& rate, int64_t now_ms, int64_t amount, int64_t charged_at_ms);
  // The state in the algorithm's own terms, for inspection.
  std::vector<std::pair<std::string_view, int64_t>> Fields() const;

 private:
  State state_;
};

}  // namespace limiter
