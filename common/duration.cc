#include "common/duration.h"

#include <array>
#include <charconv>
#include <utility>

namespace limiter {
namespace {

constexpr std::array<std::pair<std::string_view, int64_t>, 6> kUnits = {{
    {"w", 604'800'000},
    {"d", 86'400'000},
    {"h", 3'600'000},
    {"m", 60'000},
    {"s", 1'000},
    {"ms", 1},
}};

}  // namespace

std::optional<int64_t> ParseDurationMs(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [rest, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || rest == text.data()) return std::nullopt;
  const std::string_view unit(rest, static_cast<size_t>(end - rest));
  for (const auto& [name, ms] : kUnits) {
    if (unit != name) continue;
    if (value > INT64_MAX / ms || value < INT64_MIN / ms) return std::nullopt;
    return value * ms;
  }
  return std::nullopt;
}

std::optional<int64_t> ParseMonths(std::string_view text) {
  if (!text.ends_with("mo")) return std::nullopt;
  text.remove_suffix(2);
  int64_t value = 0;
  auto [rest, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || rest == text.data() || rest != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

std::string FormatDurationMs(int64_t ms) {
  for (const auto& [name, unit_ms] : kUnits) {
    if (ms != 0 && ms % unit_ms == 0) return std::to_string(ms / unit_ms) + std::string(name);
  }
  return std::to_string(ms) + "ms";
}

}  // namespace limiter
