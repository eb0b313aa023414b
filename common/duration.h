// Durations as written in policy files: an integer and a unit, "250ms", "1s", "5m", "1h", "1d",
// "1w"; and calendar months, "1mo", which have no fixed length.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace limiter {

// Milliseconds, or nullopt when `text` is not an integer followed by ms, s, m, h, d or w, or
// when it does not fit in 63 bits of milliseconds. Zero and negative durations parse; the
// caller decides whether they make sense.
std::optional<int64_t> ParseDurationMs(std::string_view text);

// The count of "1mo", "3mo", or nullopt when `text` is not an integer followed by mo. Months
// are not durations: only calendar-aligned windows (calendar.h) take them.
std::optional<int64_t> ParseMonths(std::string_view text);

// The shortest exact spelling: 1000 -> "1s", 90000 -> "90s", 1500 -> "1500ms", 7 days -> "1w".
std::string FormatDurationMs(int64_t ms);

}  // namespace limiter
