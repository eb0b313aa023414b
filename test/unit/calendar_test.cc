// Calendar-aligned windows (common/calendar.h): where the windows of a zone begin and end, the
// window-time mapping across DST changes and months of every length, and FixedWindow driven
// through it. Wall times are injected as integer ms; no clock is read.
#include "common/calendar.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/algorithms.h"
#include "test/unit/test_seed.h"

namespace limiter {
namespace {

constexpr int64_t kMinute = 60'000;
constexpr int64_t kHour = 60 * kMinute;
constexpr int64_t kDay = 24 * kHour;

// Wall ms of a UTC date and time.
int64_t Utc(int year, unsigned month, unsigned day, int64_t hour = 0, int64_t minute = 0) {
  const std::chrono::sys_days date{std::chrono::year{year} / month / day};
  return date.time_since_epoch().count() * kDay + hour * kHour + minute * kMinute;
}

std::shared_ptr<const Calendar> MakeCalendar(CalendarUnit unit, std::string_view zone) {
  Result<std::shared_ptr<const Calendar>> calendar = Calendar::Make(unit, zone);
  if (!calendar.ok()) {
    ADD_FAILURE() << calendar.error();
    return nullptr;
  }
  return *calendar;
}

// `wall` lies in the window [start, end), which maps onto exactly one window of window time.
void ExpectWindow(const Calendar& calendar, int64_t wall, int64_t start, int64_t end) {
  SCOPED_TRACE("zone " + calendar.timezone() + ", wall " + std::to_string(wall));
  EXPECT_EQ(calendar.WindowOf(wall), std::make_pair(start, end));
  const int64_t n = calendar.nominal_window_ms();
  const int64_t first = calendar.ToWindowTime(start);
  EXPECT_EQ(first % n, 0);
  // The window's last ms: N / length window ms a wall ms, less than 2 for every window.
  EXPECT_LT(calendar.ToWindowTime(end - 1), first + n);
  EXPECT_GE(calendar.ToWindowTime(end - 1), first + n - 2);
  EXPECT_EQ(calendar.ToWindowTime(end), first + n);
  EXPECT_EQ(calendar.WindowOf(start), std::make_pair(start, end));
  EXPECT_EQ(calendar.WindowOf(end - 1), std::make_pair(start, end));
  EXPECT_EQ(calendar.WindowOf(end).first, end);
}

TEST(Calendar, UtcDaysAreWallTime) {
  const auto day = MakeCalendar(CalendarUnit::kDay, "UTC");
  ASSERT_TRUE(day);
  EXPECT_EQ(day->nominal_window_ms(), 86'400'000);
  ExpectWindow(*day, Utc(2026, 3, 10, 15), Utc(2026, 3, 10), Utc(2026, 3, 11));
  for (const int64_t wall : {int64_t{0}, Utc(2026, 3, 10, 15, 7) + 123, Utc(2028, 2, 29, 23, 59)}) {
    EXPECT_EQ(day->ToWindowTime(wall), wall);
  }
  const auto zulu = MakeCalendar(CalendarUnit::kDay, "Z");
  ASSERT_TRUE(zulu);
  EXPECT_EQ(zulu->ToWindowTime(Utc(2026, 3, 10, 15)), Utc(2026, 3, 10, 15));
}

TEST(Calendar, DaysStartAtLocalMidnightOfAFixedOffset) {
  const auto india = MakeCalendar(CalendarUnit::kDay, "+05:30");
  ASSERT_TRUE(india);
  EXPECT_EQ(india->timezone(), "+05:30");
  // 2026-03-10 00:00 +05:30 is 2026-03-09 18:30 UTC.
  ExpectWindow(*india, Utc(2026, 3, 9, 18, 30), Utc(2026, 3, 9, 18, 30), Utc(2026, 3, 10, 18, 30));
  ExpectWindow(*india, Utc(2026, 3, 9, 18, 29), Utc(2026, 3, 8, 18, 30), Utc(2026, 3, 9, 18, 30));
  const auto pacific = MakeCalendar(CalendarUnit::kDay, "-08:00");
  ASSERT_TRUE(pacific);
  ExpectWindow(*pacific, Utc(2026, 7, 1, 7), Utc(2026, 6, 30, 8), Utc(2026, 7, 1, 8));
  const auto hours_only = MakeCalendar(CalendarUnit::kDay, "+09");
  ASSERT_TRUE(hours_only);
  ExpectWindow(*hours_only, Utc(2026, 7, 1, 15), Utc(2026, 7, 1, 15), Utc(2026, 7, 2, 15));
}

TEST(Calendar, DaysStartAtLocalMidnightInNewYork) {
  const auto day = MakeCalendar(CalendarUnit::kDay, "America/New_York");
  ASSERT_TRUE(day);
  // Winter, EST (-05:00), and summer, EDT (-04:00).
  ExpectWindow(*day, Utc(2026, 1, 15, 12), Utc(2026, 1, 15, 5), Utc(2026, 1, 16, 5));
  ExpectWindow(*day, Utc(2026, 1, 16, 4, 59), Utc(2026, 1, 15, 5), Utc(2026, 1, 16, 5));
  ExpectWindow(*day, Utc(2026, 7, 4, 3), Utc(2026, 7, 3, 4), Utc(2026, 7, 4, 4));
  // 2026-03-08 springs forward at 02:00: a 23 h day from 00:00 EST to 00:00 EDT.
  ExpectWindow(*day, Utc(2026, 3, 8, 12), Utc(2026, 3, 8, 5), Utc(2026, 3, 9, 4));
}

TEST(Calendar, MonthsCoverExactlyTheMonth) {
  const auto month = MakeCalendar(CalendarUnit::kMonth, "UTC");
  ASSERT_TRUE(month);
  EXPECT_EQ(month->nominal_window_ms(), 31 * kDay);
  struct Case {
    int year;
    unsigned month;
    int64_t days;
  };
  for (const Case c : {Case{2026, 2, 28}, Case{2028, 2, 29}, Case{2026, 4, 30}, Case{2026, 1, 31},
                       Case{2026, 12, 31}}) {
    SCOPED_TRACE(std::to_string(c.year) + "-" + std::to_string(c.month));
    const int64_t start = Utc(c.year, c.month, 1);
    const int64_t end = start + c.days * kDay;
    ExpectWindow(*month, start + 10 * kDay + 7, start, end);
    const int64_t index = (c.year - 1970) * 12 + (c.month - 1);
    EXPECT_EQ(month->ToWindowTime(start), index * 31 * kDay);
  }
  const auto berlin = MakeCalendar(CalendarUnit::kMonth, "Europe/Berlin");
  ASSERT_TRUE(berlin);
  // February 2026 in CET: 2026-02-01 00:00 +01:00 to 2026-03-01 00:00 +01:00.
  ExpectWindow(*berlin, Utc(2026, 2, 14), Utc(2026, 1, 31, 23), Utc(2026, 2, 28, 23));
}

TEST(Calendar, WeeksStartOnMondayMidnight) {
  const auto utc = MakeCalendar(CalendarUnit::kWeek, "UTC");
  ASSERT_TRUE(utc);
  EXPECT_EQ(utc->nominal_window_ms(), 7 * kDay);
  // 1970-01-01 was a Thursday: week 0 began on Monday 1969-12-29.
  ExpectWindow(*utc, 0, Utc(1969, 12, 29), Utc(1970, 1, 5));
  EXPECT_EQ(utc->ToWindowTime(Utc(1969, 12, 29)), 0);
  // Wednesday 2026-03-11 is in the week of Monday 2026-03-09.
  ExpectWindow(*utc, Utc(2026, 3, 11, 12), Utc(2026, 3, 9), Utc(2026, 3, 16));
  ExpectWindow(*utc, Utc(2026, 3, 15, 23, 59), Utc(2026, 3, 9), Utc(2026, 3, 16));
  const auto new_york = MakeCalendar(CalendarUnit::kWeek, "America/New_York");
  ASSERT_TRUE(new_york);
  ExpectWindow(*new_york, Utc(2026, 3, 11, 12), Utc(2026, 3, 9, 4), Utc(2026, 3, 16, 4));
  // The week holding the change to EDT on Sunday 2026-03-08 has 167 h.
  ExpectWindow(*new_york, Utc(2026, 3, 8, 12), Utc(2026, 3, 2, 5), Utc(2026, 3, 9, 4));
}

TEST(Calendar, BerlinDstDaysAre23And25HoursLong) {
  const auto day = MakeCalendar(CalendarUnit::kDay, "Europe/Berlin");
  ASSERT_TRUE(day);
  // 2026-03-29: 00:00 CET (+01:00) to 00:00 CEST (+02:00).
  ExpectWindow(*day, Utc(2026, 3, 29, 12), Utc(2026, 3, 28, 23), Utc(2026, 3, 29, 22));
  // 2026-10-25: 00:00 CEST to 00:00 CET.
  ExpectWindow(*day, Utc(2026, 10, 25, 12), Utc(2026, 10, 24, 22), Utc(2026, 10, 25, 23));
  // Either side of the change, the hour that repeats or is skipped is in the same day.
  ExpectWindow(*day, Utc(2026, 10, 25, 0, 30), Utc(2026, 10, 24, 22), Utc(2026, 10, 25, 23));
  ExpectWindow(*day, Utc(2026, 10, 25, 1, 30), Utc(2026, 10, 24, 22), Utc(2026, 10, 25, 23));
  ExpectWindow(*day, Utc(2026, 3, 29, 1), Utc(2026, 3, 28, 23), Utc(2026, 3, 29, 22));
}

TEST(Calendar, WindowTimeIsMonotoneAcrossDstChanges) {
  const auto day = MakeCalendar(CalendarUnit::kDay, "Europe/Berlin");
  ASSERT_TRUE(day);
  for (const int64_t change : {Utc(2026, 3, 29, 1), Utc(2026, 10, 25, 1)}) {
    SCOPED_TRACE("change at " + std::to_string(change));
    int64_t last = day->ToWindowTime(change - 2 * kDay);
    for (int64_t wall = change - 2 * kDay; wall < change + 2 * kDay; wall += 997) {
      const int64_t now = day->ToWindowTime(wall);
      ASSERT_LE(last, now) << wall;
      last = now;
    }
    // Every ms around the change and around the day's two midnights.
    const auto [start, end] = day->WindowOf(change);
    for (const int64_t at : {start, change, end}) {
      int64_t previous = day->ToWindowTime(at - 3000);
      for (int64_t wall = at - 3000; wall < at + 3000; ++wall) {
        const int64_t now = day->ToWindowTime(wall);
        ASSERT_LE(previous, now) << wall;
        ASSERT_LE(now - previous, 2) << wall;  // no jump: 1 wall ms is at most 24/23 window ms
        previous = now;
      }
    }
  }
}

TEST(Calendar, ASkippedMidnightStartsTheDayWhenTheClockJumps) {
  // Chile moves its clocks at midnight: 2026-09-06 00:00 -04:00 becomes 01:00 -03:00, and
  // 2026-04-05 00:00 -03:00 goes back to Saturday 23:00 -04:00.
  const auto day = MakeCalendar(CalendarUnit::kDay, "America/Santiago");
  ASSERT_TRUE(day);
  ExpectWindow(*day, Utc(2026, 9, 6, 12), Utc(2026, 9, 6, 4), Utc(2026, 9, 7, 3));
  ExpectWindow(*day, Utc(2026, 9, 6, 3, 59), Utc(2026, 9, 5, 4), Utc(2026, 9, 6, 4));
  // The repeated Saturday 23:30 belongs to the 25 h Saturday.
  ExpectWindow(*day, Utc(2026, 4, 5, 3, 30), Utc(2026, 4, 4, 3), Utc(2026, 4, 5, 4));
}

TEST(Calendar, AClockGoingBackOverMidnightStartsTheDayAtTheFirstMidnight) {
  // Newfoundland until 2011: 2009-11-01 00:01 -02:30 went back to 2009-10-31 23:01 -03:30, so
  // for an hour after Sunday began (02:30 UTC) the clock showed Saturday again.
  const auto day = MakeCalendar(CalendarUnit::kDay, "America/St_Johns");
  ASSERT_TRUE(day);
  ExpectWindow(*day, Utc(2009, 11, 1, 3), Utc(2009, 11, 1, 2, 30), Utc(2009, 11, 2, 3, 30));
  ExpectWindow(*day, Utc(2009, 11, 1, 2, 29), Utc(2009, 10, 31, 2, 30), Utc(2009, 11, 1, 2, 30));
}

TEST(Calendar, TheThreadsLastWindowNeverChangesAnAnswer) {
  // One calendar alone mostly finds its window remembered; two taking turns never do.
  const auto once = MakeCalendar(CalendarUnit::kDay, "Europe/Berlin");
  const auto other = MakeCalendar(CalendarUnit::kDay, "Europe/Berlin");
  ASSERT_TRUE(once && other);
  std::vector<std::pair<int64_t, int64_t>> remembered;
  for (int64_t wall = Utc(2026, 10, 24); wall < Utc(2026, 10, 27); wall += 7 * kMinute + 11) {
    remembered.emplace_back(once->ToWindowTime(wall), once->ToWallDuration(wall, kDay));
  }
  size_t i = 0;
  for (int64_t wall = Utc(2026, 10, 24); wall < Utc(2026, 10, 27); wall += 7 * kMinute + 11) {
    ASSERT_EQ(other->ToWindowTime(wall), remembered[i].first) << wall;
    ASSERT_EQ(once->ToWindowTime(wall), remembered[i].first) << wall;
    ASSERT_EQ(other->ToWallDuration(wall, kDay), remembered[i].second) << wall;
    ASSERT_EQ(once->ToWallDuration(wall, kDay), remembered[i].second) << wall;
    ++i;
  }
}

// FixedWindow (common/algorithms.h) with now = ToWindowTime(wall) and W = N.
class CalendarFixedWindow {
 public:
  CalendarFixedWindow(std::shared_ptr<const Calendar> calendar, int64_t limit)
      : calendar_(std::move(calendar)), rate_(limit, calendar_->nominal_window_ms(), limit) {}

  LimitDecision Decide(int64_t wall) {
    return FixedWindow::Decide(rate_, state_, calendar_->ToWindowTime(wall), 1);
  }
  const FixedWindow::State& state() const { return state_; }

 private:
  std::shared_ptr<const Calendar> calendar_;
  Rate rate_;
  FixedWindow::State state_;
};

TEST(Calendar, FixedWindowResetsExactlyAtTheLocalBoundary) {
  struct Case {
    CalendarUnit unit;
    const char* zone;
    int64_t inside;  // a wall time in the window under test
  };
  for (const Case c : {Case{CalendarUnit::kDay, "Europe/Berlin", Utc(2026, 3, 29, 12)},
                       Case{CalendarUnit::kDay, "Europe/Berlin", Utc(2026, 10, 25, 12)},
                       Case{CalendarUnit::kDay, "+05:30", Utc(2026, 3, 9, 12)},
                       Case{CalendarUnit::kWeek, "America/New_York", Utc(2026, 3, 8, 12)},
                       Case{CalendarUnit::kMonth, "+05:30", Utc(2026, 2, 14)},
                       Case{CalendarUnit::kMonth, "UTC", Utc(2028, 2, 14)}}) {
    const auto calendar = MakeCalendar(c.unit, c.zone);
    ASSERT_TRUE(calendar);
    SCOPED_TRACE(std::string(c.zone) + ", wall " + std::to_string(c.inside));
    const auto [start, end] = calendar->WindowOf(c.inside);
    CalendarFixedWindow limiter(calendar, 2);
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(limiter.Decide(start - 1).allowed);
    EXPECT_FALSE(limiter.Decide(start - 1).allowed);  // the previous window is full
    EXPECT_TRUE(limiter.Decide(start).allowed);
    EXPECT_TRUE(limiter.Decide(c.inside).allowed);
    const LimitDecision denied = limiter.Decide(end - 1);
    EXPECT_FALSE(denied.allowed);
    EXPECT_EQ(calendar->ToWallDuration(calendar->ToWindowTime(end - 1), denied.retry_after_ms), 1);
    EXPECT_TRUE(limiter.Decide(end).allowed);
    EXPECT_TRUE(limiter.Decide(end + 1).allowed);
    EXPECT_FALSE(limiter.Decide(end + 2).allowed);
  }
}

TEST(Calendar, FixedWindowNeitherChargesTwiceNorRefillsEarlyWhenTheClockStepsBack) {
  const auto day = MakeCalendar(CalendarUnit::kDay, "Europe/Berlin");
  ASSERT_TRUE(day);
  const auto [start, end] = day->WindowOf(Utc(2026, 10, 25, 12));  // the 25 h day
  CalendarFixedWindow limiter(day, 3);
  // Back within the window: an admission counts once, in the same window.
  EXPECT_TRUE(limiter.Decide(start + 10 * kHour).allowed);
  EXPECT_TRUE(limiter.Decide(start + 9 * kHour).allowed);
  EXPECT_EQ(limiter.state().count, 2);
  EXPECT_TRUE(limiter.Decide(start + 1 * kHour).allowed);
  EXPECT_FALSE(limiter.Decide(start).allowed);
  EXPECT_FALSE(limiter.Decide(start + 11 * kHour).allowed);
  EXPECT_EQ(limiter.state().count, 3);
  EXPECT_EQ(limiter.state().window_start_ms, day->ToWindowTime(start));

  // Fill the next window, then the clock steps back an hour into this one: neither the full
  // old window's count nor a fresh one, and forward again the new window is still full.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Decide(end + kHour).allowed);
  EXPECT_FALSE(limiter.Decide(end - kHour).allowed);
  EXPECT_FALSE(limiter.Decide(end - 1).allowed);
  EXPECT_FALSE(limiter.Decide(end + 2 * kHour).allowed);
  EXPECT_EQ(limiter.state().count, 3);
  EXPECT_EQ(limiter.state().window_start_ms, day->ToWindowTime(end));
}

TEST(Calendar, ToWallDurationGivesTheRealWaitToTheBoundary) {
  const auto day = MakeCalendar(CalendarUnit::kDay, "Europe/Berlin");
  const auto month = MakeCalendar(CalendarUnit::kMonth, "Europe/Berlin");
  ASSERT_TRUE(day && month);
  // A reset_after from FixedWindow, in window time, becomes the wall ms to the boundary:
  // exactly, in the 23 h day and in February 2026 (28 days), windows shorter than N.
  for (const auto& [calendar, wall] :
       {std::pair{day, Utc(2026, 3, 29, 5, 17) + 17}, std::pair{month, Utc(2026, 2, 9, 3) + 5}}) {
    SCOPED_TRACE(wall);
    CalendarFixedWindow limiter(calendar, 5);
    const LimitDecision d = limiter.Decide(wall);
    ASSERT_TRUE(d.allowed);
    const int64_t boundary = calendar->WindowOf(wall).second;
    EXPECT_EQ(calendar->ToWallDuration(calendar->ToWindowTime(wall), d.reset_after_ms),
              boundary - wall);
  }
  // In the 25 h day two wall ms can share a window ms: the wait is never short, and at most
  // 1 ms long (exact where they do not, every 25 ms here).
  const auto [start, end] = day->WindowOf(Utc(2026, 10, 25, 12));
  for (int64_t wall = start; wall < end; wall += 7 * kMinute + 3) {
    const int64_t window_time = day->ToWindowTime(wall);
    const int64_t to_boundary = day->nominal_window_ms() - window_time % day->nominal_window_ms();
    const int64_t wait = day->ToWallDuration(window_time, to_boundary);
    ASSERT_GE(wait, end - wall) << wall;
    ASSERT_LE(wait, end - wall + 1) << wall;
    if ((wall - start) % 25 == 0) {
      ASSERT_EQ(wait, end - wall) << wall;
    }
  }
  // Spans over several windows: two days from Saturday 2026-03-28 00:00 CET are 47 h.
  EXPECT_EQ(day->ToWallDuration(day->ToWindowTime(Utc(2026, 3, 27, 23)), 2 * kDay), 47 * kHour);
  EXPECT_EQ(day->ToWallDuration(day->ToWindowTime(Utc(2026, 3, 27, 23)), 0), 0);
  EXPECT_EQ(day->ToWallDuration(day->ToWindowTime(Utc(2026, 3, 27, 23)), kNever), kNever);
}

TEST(Calendar, AWallWaitOfToWallDurationAlwaysSufficesAndIsAtMost1MsLong) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 random(seed);
  for (const char* zone : {"Europe/Berlin", "America/Santiago", "+05:30", "Australia/Lord_Howe"}) {
    for (const auto unit : {CalendarUnit::kDay, CalendarUnit::kWeek, CalendarUnit::kMonth}) {
      const auto calendar = MakeCalendar(unit, zone);
      ASSERT_TRUE(calendar);
      const int64_t n = calendar->nominal_window_ms();
      std::uniform_int_distribution<int64_t> wall_in(Utc(2000, 1, 1), Utc(2040, 1, 1));
      std::uniform_int_distribution<int64_t> span_in(0, 3 * n);
      for (int i = 0; i < 2000; ++i) {
        const int64_t wall = wall_in(random);
        const int64_t window_time = calendar->ToWindowTime(wall);
        const int64_t d = i % 2 == 0 ? span_in(random) : n - window_time % n;  // to the boundary
        const int64_t wait = calendar->ToWallDuration(window_time, d);
        ASSERT_GE(calendar->ToWindowTime(wall + wait), window_time + d) << zone << " " << wall;
        if (wait >= 2) {  // 1 ms less than the wait may not do, 2 ms less never does
          ASSERT_LT(calendar->ToWindowTime(wall + wait - 2), window_time + d)
              << zone << " " << wall;
        }
      }
    }
  }
}

TEST(Calendar, RejectsUnknownZonesAndMalformedOffsets) {
  auto error_of = [](std::string_view zone) {
    Result<std::shared_ptr<const Calendar>> calendar = Calendar::Make(CalendarUnit::kDay, zone);
    EXPECT_FALSE(calendar.ok()) << zone;
    return calendar.ok() ? std::string() : calendar.error();
  };
  EXPECT_EQ(error_of("Mars/Olympus"),
            "unknown timezone 'Mars/Olympus' (not in the system tzdata, /usr/share/zoneinfo)");
  EXPECT_EQ(error_of("+25:00"),
            "timezone '+25:00' is not a valid UTC offset: expected +HH:MM, -HH:MM or +HH, within "
            "14:00 of UTC");
  EXPECT_EQ(error_of("5:30"),
            "timezone '5:30' is not a time zone: expected UTC, Z, an offset such as +05:30 or "
            "-08:00 (the sign is required), or an IANA name such as Europe/Berlin");
  for (const char* offset : {"+05:60", "+5:30", "+0530", "-14:01", "+05:", "+"}) {
    EXPECT_NE(error_of(offset).find("is not a valid UTC offset"), std::string::npos) << offset;
  }
  for (const char* path : {"", "/etc/localtime", "../zoneinfo/UTC", "Europe//Berlin", "Europe/"}) {
    EXPECT_NE(error_of(path).find("is not a time zone"), std::string::npos) << path;
  }
  EXPECT_NE(error_of("localtime").find("the machine's own zone"), std::string::npos);
  EXPECT_TRUE(Calendar::Make(CalendarUnit::kDay, "+14:00").ok());
  EXPECT_TRUE(Calendar::Make(CalendarUnit::kDay, "-12:00").ok());
  EXPECT_TRUE(Calendar::Make(CalendarUnit::kDay, "Etc/GMT+5").ok());
}

}  // namespace
}  // namespace limiter
