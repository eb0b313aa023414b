#include "common/algorithm_kind.h"

namespace limiter {

std::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kFixedWindow:
      return "fixed_window";
    case Algorithm::kSlidingLog:
      return "sliding_log";
    case Algorithm::kSlidingWindow:
      return "sliding_window";
    case Algorithm::kTokenBucket:
      return "token_bucket";
    case Algorithm::kGcra:
      return "gcra";
    case Algorithm::kLeakyBucket:
      return "leaky_bucket";
  }
  return "unknown";
}

std::optional<Algorithm> ParseAlgorithm(std::string_view name) {
  for (Algorithm a : kAllAlgorithms) {
    if (AlgorithmName(a) == name) return a;
  }
  return std::nullopt;
}

std::string_view AlgorithmNameList() {
  return "fixed_window, sliding_log, sliding_window, token_bucket, gcra, leaky_bucket";
}

}  // namespace limiter
