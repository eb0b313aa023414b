#include "common/calendar.h"

#include <absl/time/civil_time.h>
#include <absl/time/time.h>

#include <atomic>
#include <optional>

#include "common/limit_decision.h"

namespace limiter {

struct Calendar::Zone {
  absl::TimeZone tz;
};

namespace {

constexpr int64_t kDayMs = 86'400'000;

const absl::CivilDay kEpochDay(1970, 1, 1);
const absl::CivilDay kEpochMonday(1969, 12, 29);  // starts week 0, which holds 1970-01-01
const absl::CivilMonth kEpochMonth(1970, 1);

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

// Seconds east of UTC for "+HH", "+HH:MM", "-HH" and "-HH:MM" within 14:00 of UTC (the widest
// offset in use); nullopt for anything else.
std::optional<int> ParseOffset(std::string_view text) {
  if (text.size() != 3 && text.size() != 6) return std::nullopt;
  const int sign = text[0] == '+' ? 1 : text[0] == '-' ? -1 : 0;
  auto digit = [](char c) { return c >= '0' && c <= '9' ? c - '0' : -1; };
  auto two_digits = [&](size_t at) {
    const int tens = digit(text[at]);
    const int ones = digit(text[at + 1]);
    return tens < 0 || ones < 0 ? -1 : tens * 10 + ones;
  };
  const int hours = two_digits(1);
  const int minutes = text.size() == 3 ? 0 : text[3] == ':' ? two_digits(4) : -1;
  if (sign == 0 || hours < 0 || minutes < 0 || minutes >= 60 || hours * 60 + minutes > 14 * 60) {
    return std::nullopt;
  }
  return sign * (hours * 3600 + minutes * 60);
}

// An IANA name: '/'-separated parts of letters, digits, '_', '-' and '+', each starting with a
// letter ("America/Port-au-Prince", "Etc/GMT+5"). Keeps file paths ("/etc/x", "../x") out of
// the tzdata lookup.
bool IsZoneName(std::string_view name) {
  bool part_start = true;
  for (const char c : name) {
    const bool letter = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
    if (part_start && !letter) return false;
    part_start = c == '/';
    if (!letter && !part_start && !(c >= '0' && c <= '9') && c != '_' && c != '-' && c != '+') {
      return false;
    }
  }
  return !name.empty() && !part_start;
}

Result<absl::TimeZone> FindZone(std::string_view name) {
  if (name == "UTC" || name == "Z") return absl::UTCTimeZone();
  if (name.starts_with('+') || name.starts_with('-')) {
    if (const std::optional<int> offset = ParseOffset(name)) return absl::FixedTimeZone(*offset);
    return Error{"timezone '" + std::string(name) +
                 "' is not a valid UTC offset: expected +HH:MM, -HH:MM or +HH, within 14:00 of "
                 "UTC"};
  }
  if (!IsZoneName(name)) {
    return Error{"timezone '" + std::string(name) +
                 "' is not a time zone: expected UTC, Z, an offset such as +05:30 or -08:00 (the "
                 "sign is required), or an IANA name such as Europe/Berlin"};
  }
  if (name == "localtime") {
    return Error{
        "timezone 'localtime' is the machine's own zone, which nodes need not share: "
        "name the zone, such as Europe/Berlin"};
  }
  absl::TimeZone tz;
  if (!absl::LoadTimeZone(std::string(name), &tz)) {
    return Error{"unknown timezone '" + std::string(name) +
                 "' (not in the system tzdata, /usr/share/zoneinfo)"};
  }
  return tz;
}

// When the local day of `midnight` begins: at midnight, or where the clock jumps over it (a
// DST change at 00:00); the first of two midnights when the clock goes back over one.
int64_t StartMs(const absl::TimeZone& tz, absl::CivilSecond midnight) {
  const absl::TimeZone::TimeInfo at = tz.At(midnight);
  return absl::ToUnixMillis(at.kind == absl::TimeZone::TimeInfo::SKIPPED ? at.trans : at.pre);
}

uint64_t NextId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

Result<std::shared_ptr<const Calendar>> Calendar::Make(CalendarUnit unit,
                                                       std::string_view timezone) {
  Result<absl::TimeZone> tz = FindZone(timezone);
  if (!tz) return Error{tz.error()};
  return std::shared_ptr<const Calendar>(
      new Calendar(unit, std::string(timezone), std::make_unique<const Zone>(Zone{*tz})));
}

Calendar::Calendar(CalendarUnit unit, std::string timezone, std::unique_ptr<const Zone> zone)
    : unit_(unit), timezone_(std::move(timezone)), zone_(std::move(zone)), id_(NextId()) {}

Calendar::~Calendar() = default;

int64_t Calendar::nominal_window_ms() const {
  switch (unit_) {
    case CalendarUnit::kDay:
      return kDayMs;
    case CalendarUnit::kWeek:
      return 7 * kDayMs;
    case CalendarUnit::kMonth:
      return 31 * kDayMs;
  }
  return kDayMs;
}

Calendar::Memo& Calendar::ThreadMemo() {
  static thread_local Memo memo{0, Window{0, 0, 0}};
  return memo;
}

Calendar::Window Calendar::WindowAt(int64_t index) const {
  Memo& memo = ThreadMemo();
  if (memo.calendar_id == id_ && memo.window.index == index) return memo.window;
  absl::CivilSecond first;
  absl::CivilSecond next;
  switch (unit_) {
    case CalendarUnit::kDay:
      first = kEpochDay + index;
      next = kEpochDay + (index + 1);
      break;
    case CalendarUnit::kWeek:
      first = kEpochMonday + index * 7;
      next = kEpochMonday + (index + 1) * 7;
      break;
    case CalendarUnit::kMonth:
      first = kEpochMonth + index;
      next = kEpochMonth + (index + 1);
      break;
  }
  memo = Memo{id_, Window{index, StartMs(zone_->tz, first), StartMs(zone_->tz, next)}};
  return memo.window;
}

Calendar::Window Calendar::Locate(int64_t wall_ms) const {
  if (const Memo& memo = ThreadMemo();
      memo.calendar_id == id_ && memo.window.start_ms <= wall_ms && wall_ms < memo.window.end_ms) {
    return memo.window;
  }
  const absl::CivilDay day = absl::ToCivilDay(absl::FromUnixMillis(wall_ms), zone_->tz);
  int64_t index = 0;
  switch (unit_) {
    case CalendarUnit::kDay:
      index = day - kEpochDay;
      break;
    case CalendarUnit::kWeek:
      index = FloorDiv(day - kEpochMonday, 7);
      break;
    case CalendarUnit::kMonth:
      index = absl::CivilMonth(day) - kEpochMonth;
      break;
  }
  // Windows are [start, next start): a clock going back over midnight shows the old day's
  // date for a while after the new day began.
  Window w = WindowAt(index);
  if (wall_ms < w.start_ms) w = WindowAt(index - 1);
  if (wall_ms >= w.end_ms) w = WindowAt(index + 1);
  return w;
}

int64_t Calendar::ToWindowTime(int64_t wall_ms) const {
  const Window w = Locate(wall_ms);
  const int64_t n = nominal_window_ms();
  const __int128 into = static_cast<__int128>(wall_ms - w.start_ms) * n / (w.end_ms - w.start_ms);
  return w.index * n + static_cast<int64_t>(into);
}

int64_t Calendar::FromWindowTime(int64_t window_time) const {
  const int64_t n = nominal_window_ms();
  const int64_t index = FloorDiv(window_time, n);
  const int64_t into = window_time - index * n;
  // A window starts where the one before ends; a reset_after or retry_after reaches the end
  // of the caller's window, which the memo holds.
  if (into == 0) return WindowAt(index - 1).end_ms;
  const Window w = WindowAt(index);
  // The least offset o with floor(o * N / length) >= into: ceil(into * length / N).
  const __int128 scaled = static_cast<__int128>(into) * (w.end_ms - w.start_ms);
  return w.start_ms + static_cast<int64_t>((scaled + n - 1) / n);
}

int64_t Calendar::ToWallDuration(int64_t window_time, int64_t d) const {
  if (d <= 0) return 0;
  if (d == kNever || window_time > kNever - d) return kNever;
  return FromWindowTime(window_time + d) - FromWindowTime(window_time);
}

std::pair<int64_t, int64_t> Calendar::WindowOf(int64_t wall_ms) const {
  const Window w = Locate(wall_ms);
  return {w.start_ms, w.end_ms};
}

}  // namespace limiter
