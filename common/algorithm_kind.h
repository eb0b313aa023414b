// The names of the six algorithms, as they appear in policy files and on command lines.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace limiter {

enum class Algorithm : uint8_t {
  kFixedWindow,
  kSlidingLog,
  kSlidingWindow,
  kTokenBucket,
  kGcra,
  kLeakyBucket,
};

inline constexpr std::array<Algorithm, 6> kAllAlgorithms = {
    Algorithm::kFixedWindow, Algorithm::kSlidingLog, Algorithm::kSlidingWindow,
    Algorithm::kTokenBucket, Algorithm::kGcra,       Algorithm::kLeakyBucket,
};

// "fixed_window", "sliding_log", "sliding_window", "token_bucket", "gcra", "leaky_bucket".
std::string_view AlgorithmName(Algorithm algorithm);
std::optional<Algorithm> ParseAlgorithm(std::string_view name);
// The names joined by ", ", for error messages.
std::string_view AlgorithmNameList();

}  // namespace limiter
