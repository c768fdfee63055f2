#include "tokengate/core/calendar.hpp"

#include <gtest/gtest.h>

#include <ctime>

namespace tokengate::core {
namespace {

constexpr Nanos k_hour = 3600 * k_nanos_per_second;

/// "2026-03-08T05:00:00Z" as Unix nanoseconds.
Nanos utc(const char* text) {
    std::tm tm{};
    EXPECT_NE(strptime(text, "%Y-%m-%dT%H:%M:%SZ", &tm), nullptr) << text;
    return static_cast<Nanos>(timegm(&tm)) * k_nanos_per_second;
}

CalendarWindow window(const char* zone, CalendarPeriod period, const char* at) {
    const auto* tz = find_time_zone(zone);
    EXPECT_NE(tz, nullptr) << zone;
    return calendar_window(*tz, period, utc(at));
}

TEST(Calendar, UnknownZoneIsNull) {
    EXPECT_EQ(find_time_zone("Mars/Olympus_Mons"), nullptr);
    EXPECT_EQ(find_time_zone(""), nullptr);
    EXPECT_NE(find_time_zone("UTC"), nullptr);
}

TEST(Calendar, UtcDayWeekMonth) {
    EXPECT_EQ(window("UTC", CalendarPeriod::day, "2026-12-01T21:33:13Z"),
              (CalendarWindow{utc("2026-12-01T00:00:00Z"), utc("2026-12-02T00:00:00Z")}));
    // 2026-12-01 is a Tuesday: the week began on Monday the 30th.
    EXPECT_EQ(window("UTC", CalendarPeriod::week, "2026-12-01T21:33:13Z"),
              (CalendarWindow{utc("2026-11-30T00:00:00Z"), utc("2026-12-07T00:00:00Z")}));
    EXPECT_EQ(window("UTC", CalendarPeriod::month, "2026-12-31T23:59:59Z"),
              (CalendarWindow{utc("2026-12-01T00:00:00Z"), utc("2027-01-01T00:00:00Z")}));
    // The last instant of a window belongs to it; its end belongs to the next.
    auto w = window("UTC", CalendarPeriod::day, "2026-12-01T23:59:59Z");
    EXPECT_TRUE(w.contains(utc("2026-12-01T23:59:59Z")));
    EXPECT_FALSE(w.contains(w.end));
    EXPECT_EQ(window("UTC", CalendarPeriod::day, "2026-12-02T00:00:00Z").start, w.end);
}

TEST(Calendar, NewYorkDaysAcrossBothDstChangesAre23And25Hours) {
    auto spring = window("America/New_York", CalendarPeriod::day, "2026-03-08T12:00:00Z");
    EXPECT_EQ(spring.start, utc("2026-03-08T05:00:00Z"));  // midnight EST
    EXPECT_EQ(spring.end, utc("2026-03-09T04:00:00Z"));    // midnight EDT
    EXPECT_EQ(spring.end - spring.start, 23 * k_hour);
    auto fall = window("America/New_York", CalendarPeriod::day, "2026-11-01T05:30:00Z");  // 01:30 EDT
    EXPECT_EQ(fall.start, utc("2026-11-01T04:00:00Z"));
    EXPECT_EQ(fall.end, utc("2026-11-02T05:00:00Z"));
    EXPECT_EQ(fall.end - fall.start, 25 * k_hour);
    // 01:30 happens twice that night; the second one is the same day.
    EXPECT_EQ(window("America/New_York", CalendarPeriod::day, "2026-11-01T06:30:00Z"), fall);
    // The Eastern day before the change is an ordinary one, ending at midnight EDT.
    auto before = window("America/New_York", CalendarPeriod::day, "2026-11-01T03:59:59Z");
    EXPECT_EQ(before.end, fall.start);
    EXPECT_EQ(before.end - before.start, 24 * k_hour);
}

TEST(Calendar, NewYorkWeekHoldingTheFallChangeIsAnHourLonger) {
    // Sunday 2026-11-01 belongs to the week that began on Monday 26 October, at midnight EDT.
    auto w = window("America/New_York", CalendarPeriod::week, "2026-11-01T12:00:00Z");
    EXPECT_EQ(w.start, utc("2026-10-26T04:00:00Z"));
    EXPECT_EQ(w.end, utc("2026-11-02T05:00:00Z"));
    EXPECT_EQ(w.end - w.start, (7 * 24 + 1) * k_hour);
}

TEST(Calendar, SantiagoMidnightSkippedByDstStartsTheDayAtTheChange) {
    // Chile moves its clocks at midnight: on 2026-09-06 local time goes from 23:59:59 straight
    // to 01:00, so that day begins at the change (04:00Z) and lasts 23 hours.
    auto day = window("America/Santiago", CalendarPeriod::day, "2026-09-06T12:00:00Z");
    EXPECT_EQ(day.start, utc("2026-09-06T04:00:00Z"));
    EXPECT_EQ(day.end, utc("2026-09-07T03:00:00Z"));
    auto eve = window("America/Santiago", CalendarPeriod::day, "2026-09-06T03:59:59Z");
    EXPECT_EQ(eve.end, day.start);
    EXPECT_EQ(eve.end - eve.start, 24 * k_hour);
    // On 2026-04-04 the hour 23:00-24:00 happens twice: a 25-hour Saturday.
    auto fall = window("America/Santiago", CalendarPeriod::day, "2026-04-04T12:00:00Z");
    EXPECT_EQ(fall.start, utc("2026-04-04T03:00:00Z"));
    EXPECT_EQ(fall.end, utc("2026-04-05T04:00:00Z"));
    // September's month holds the skipped midnight at its sixth day, not at its start.
    auto month = window("America/Santiago", CalendarPeriod::month, "2026-09-06T12:00:00Z");
    EXPECT_EQ(month.start, utc("2026-09-01T04:00:00Z"));
    EXPECT_EQ(month.end, utc("2026-10-01T03:00:00Z"));
}

TEST(Calendar, LordHoweHalfHourChange) {
    // Lord Howe Island moves by thirty minutes: 2026-10-04 is 23.5 hours long.
    auto day = window("Australia/Lord_Howe", CalendarPeriod::day, "2026-10-04T00:00:00Z");
    EXPECT_EQ(day.start, utc("2026-10-03T13:30:00Z"));
    EXPECT_EQ(day.end, utc("2026-10-04T13:00:00Z"));
    EXPECT_EQ(day.end - day.start, 23 * k_hour + k_hour / 2);
}

TEST(Calendar, ShanghaiMonthEndsLeapFebruaryAndNewYear) {
    // UTC+8 all year: 2026-12-31T16:00Z is already January in Shanghai.
    EXPECT_EQ(window("Asia/Shanghai", CalendarPeriod::month, "2026-12-31T15:59:59Z"),
              (CalendarWindow{utc("2026-11-30T16:00:00Z"), utc("2026-12-31T16:00:00Z")}));
    EXPECT_EQ(window("Asia/Shanghai", CalendarPeriod::month, "2026-12-31T16:00:00Z"),
              (CalendarWindow{utc("2026-12-31T16:00:00Z"), utc("2027-01-31T16:00:00Z")}));
    auto leap = window("Asia/Shanghai", CalendarPeriod::month, "2028-02-15T00:00:00Z");
    EXPECT_EQ(leap.end - leap.start, 29 * 24 * k_hour);
    auto common = window("Asia/Shanghai", CalendarPeriod::month, "2027-02-15T00:00:00Z");
    EXPECT_EQ(common.end - common.start, 28 * 24 * k_hour);
    // The local day, not the UTC one: 2026-12-01T17:00Z is the 2nd in Shanghai.
    EXPECT_EQ(window("Asia/Shanghai", CalendarPeriod::day, "2026-12-01T17:00:00Z").start, utc("2026-12-01T16:00:00Z"));
}

TEST(Calendar, Rfc3339IsUtcToTheSecond) {
    EXPECT_EQ(rfc3339(utc("2026-12-02T00:00:00Z") + 999'999'999), "2026-12-02T00:00:00Z");
    EXPECT_EQ(rfc3339(0), "1970-01-01T00:00:00Z");
}

TEST(Rfc3339, ParsesWhatTheAdminApiIsSent) {
    EXPECT_EQ(parse_rfc3339("1970-01-01T00:00:00Z"), 0);
    EXPECT_EQ(parse_rfc3339("2026-12-02T00:00:00Z"), utc("2026-12-02T00:00:00Z"));
    EXPECT_EQ(parse_rfc3339("2026-12-02T01:30:00+01:30"), utc("2026-12-02T00:00:00Z"));
    EXPECT_EQ(parse_rfc3339("2026-12-01T23:00:00-01:00"), utc("2026-12-02T00:00:00Z"));
    EXPECT_EQ(parse_rfc3339("2026-12-02t00:00:00.25z"), utc("2026-12-02T00:00:00Z") + 250'000'000);
    EXPECT_EQ(parse_rfc3339(rfc3339(utc("2031-07-04T12:34:56Z"))), utc("2031-07-04T12:34:56Z"));
    for (const char* bad :
         {"", "tomorrow", "2026-12-02", "2026-12-02T00:00:00", "2026-02-30T00:00:00Z", "2026-12-02T24:00:00Z",
          "2026-12-02T00:00:00.Z", "2026-12-02T00:00:00.1234567890Z", "2026-12-02T00:00:00+25:00",
          "2026-12-02T00:00:00Z trailing", "1969-12-31T23:59:59Z", "9999-12-31T23:59:59Z", "+2026-12-02T00:00:00Z"})
        EXPECT_EQ(parse_rfc3339(bad), std::nullopt) << bad;
}

}  // namespace
}  // namespace tokengate::core
