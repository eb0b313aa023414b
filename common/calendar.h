// Calendar: the windows of a fixed_window policy with `align: calendar` (policy_file.h), which
// reset at local midnight (1d), on Monday 00:00 local (1w) or on the 1st of the month 00:00
// local (1mo) in one time zone: a fixed UTC offset or an IANA zone from the system tzdata.
//
// Calendar windows differ in length (23 h and 25 h days at DST changes, months of 28 to 31
// days), while FixedWindow (algorithms.h) counts windows of one length W from t = 0. So a
// Calendar is a clock: ToWindowTime maps wall time onto "window time", where every calendar
// window is exactly N = nominal_window_ms() long and starts at a multiple of N. FixedWindow fed
// now = ToWindowTime(wall) and W = N resets exactly at the calendar's boundaries, and its
// retry_after / reset_after, spans of window time, become wall time through ToWallDuration.
//
// Guarantee of the mapping: non-decreasing in wall time; a window's wall start maps to exactly
// idx * N and every wall time inside it to [idx * N, (idx + 1) * N). Window indices count local
// days / weeks / months from 1970-01-01 local; week 0 is the Monday-week holding 1970-01-01
// (it starts on Monday 1969-12-29).
//
// Immutable once made, so thread-safe (each thread remembers the window it used last, in a
// thread_local); policies share it (std::shared_ptr<const Calendar>).
// No clock is read here: every time is an argument, in ms since the Unix epoch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "limiter/status.h"

namespace limiter {

enum class CalendarUnit : uint8_t { kDay, kWeek, kMonth };

class Calendar {
 public:
  // `timezone` is "UTC", "Z", a fixed offset "+HH:MM", "-HH:MM" or "+HH" (at most 14:00 either
  // way), or an IANA name ("Europe/Berlin") found in the system tzdata; anything else is an
  // error naming it.
  static Result<std::shared_ptr<const Calendar>> Make(CalendarUnit unit, std::string_view timezone);
  ~Calendar();

  CalendarUnit unit() const { return unit_; }
  const std::string& timezone() const { return timezone_; }  // as given to Make
  // N: 1d 86,400,000; 1w 7 days; 1mo 31 days: the longest window of the unit without a DST
  // change. A policy's Rate takes it as its window.
  int64_t nominal_window_ms() const;

  // For wall_ms in the window [start, end) with index idx:
  //   idx * N + floor((wall_ms - start) * N / (end - start)).
  int64_t ToWindowTime(int64_t wall_ms) const;
  // The wall ms that pass while window time goes from `window_time` to window_time + d (d
  // >= 0; kNever stays kNever), rounded up: a caller at a wall time that maps to window_time
  // reaches window_time + d after at most this long. Exact when window_time's window is no
  // longer than N; else (a 25 h day, or a week or month holding one) at most 1 ms over.
  int64_t ToWallDuration(int64_t window_time, int64_t d) const;
  // The wall-clock [start, end) of the calendar window holding wall_ms.
  std::pair<int64_t, int64_t> WindowOf(int64_t wall_ms) const;

 private:
  struct Zone;  // absl::TimeZone, kept out of this header
  struct Window {
    int64_t index;
    int64_t start_ms;
    int64_t end_ms;
  };
  // The window this thread used last, and the id_ of its calendar (0: none). A key's requests
  // keep to one window for a day or more, so most calls skip the zone lookups (~200 ns).
  struct Memo {
    uint64_t calendar_id;
    Window window;
  };
  static Memo& ThreadMemo();

  Calendar(CalendarUnit unit, std::string timezone, std::unique_ptr<const Zone> zone);

  Window WindowAt(int64_t index) const;
  Window Locate(int64_t wall_ms) const;
  // The least wall time whose window time is at least `window_time`.
  int64_t FromWindowTime(int64_t window_time) const;

  CalendarUnit unit_;
  std::string timezone_;
  std::unique_ptr<const Zone> zone_;
  const uint64_t id_;  // unique among Calendars, never reused: tags ThreadMemo()
};

}  // namespace limiter
