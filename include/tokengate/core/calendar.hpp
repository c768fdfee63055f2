#pragma once

// Calendar windows for quotas (SPEC §14): a day, a week or a month in an IANA time zone, with
// that zone's DST and month lengths (Howard Hinnant's date/tz on the system tz database).

#include <optional>
#include <string>
#include <string_view>

#include "tokengate/core/clock.hpp"

namespace date {
class time_zone;
}

namespace tokengate::core {

enum class CalendarPeriod { day, week, month };

const char* to_string(CalendarPeriod period);

/// [start, end) in wall-clock nanoseconds since the Unix epoch.
struct CalendarWindow {
    Nanos start = 0;
    Nanos end = 0;
    bool contains(Nanos unix_ns) const { return unix_ns >= start && unix_ns < end; }
    bool operator==(const CalendarWindow&) const = default;
};

/// The zone called `name` ("UTC", "Asia/Shanghai"), or null if the tz database has none.
const date::time_zone* find_time_zone(std::string_view name);

/// The window holding `unix_ns`: from local midnight (of the day; of Monday; of the 1st) to the
/// next one. A midnight that a DST change skips begins at the change; one that happens twice,
/// at the first.
CalendarWindow calendar_window(const date::time_zone& zone, CalendarPeriod period, Nanos unix_ns);

/// RFC 3339 in UTC, to the second: "2026-12-02T00:00:00Z".
std::string rfc3339(Nanos unix_ns);

/// An RFC 3339 instant ("2026-12-31T23:59:59Z", "…+01:00", fractions of a second allowed) as
/// Unix nanoseconds; nullopt if it is not one or lies outside 1970–2255.
std::optional<Nanos> parse_rfc3339(std::string_view text);

}  // namespace tokengate::core
