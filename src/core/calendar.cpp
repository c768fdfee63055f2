#include "tokengate/core/calendar.hpp"

#include <date/tz.h>

#include <stdexcept>
#include <string>

namespace tokengate::core {

namespace {

using std::chrono::nanoseconds;
using std::chrono::seconds;

/// The instant a local midnight names in `zone`.
Nanos instant_of(const date::time_zone& zone, date::local_seconds midnight) {
    auto info = zone.get_info(midnight);
    date::sys_seconds at;
    switch (info.result) {
        case date::local_info::unique:
        case date::local_info::ambiguous:  // the first of the two
            at = date::sys_seconds{midnight.time_since_epoch() - info.first.offset};
            break;
        case date::local_info::nonexistent:  // skipped by a DST change: the window starts at the change
            at = info.first.end;
            break;
    }
    return std::chrono::duration_cast<nanoseconds>(at.time_since_epoch()).count();
}

}  // namespace

const char* to_string(CalendarPeriod period) {
    switch (period) {
        case CalendarPeriod::day: return "day";
        case CalendarPeriod::week: return "week";
        case CalendarPeriod::month: return "month";
    }
    return "day";
}

const date::time_zone* find_time_zone(std::string_view name) {
    try {
        return date::locate_zone(name);
    } catch (const std::runtime_error&) {
        return nullptr;
    }
}

CalendarWindow calendar_window(const date::time_zone& zone, CalendarPeriod period, Nanos unix_ns) {
    date::sys_seconds now{std::chrono::floor<seconds>(nanoseconds(unix_ns))};
    auto local = zone.to_local(now);
    auto today = date::floor<date::days>(local);
    date::local_days first, next;
    switch (period) {
        case CalendarPeriod::day:
            first = today;
            next = today + date::days{1};
            break;
        case CalendarPeriod::week: {
            // ISO weeks: Monday is day 0.
            auto since_monday = (date::weekday{today} - date::Monday).count();
            first = today - date::days{since_monday};
            next = first + date::days{7};
            break;
        }
        case CalendarPeriod::month: {
            date::year_month_day ymd{today};
            auto month = ymd.year() / ymd.month();
            first = date::local_days{month / 1};
            next = date::local_days{(month + date::months{1}) / 1};
            break;
        }
    }
    return {instant_of(zone, date::local_seconds{first}), instant_of(zone, date::local_seconds{next})};
}

std::string rfc3339(Nanos unix_ns) {
    date::sys_seconds at{std::chrono::floor<seconds>(nanoseconds(unix_ns))};
    return date::format("%Y-%m-%dT%H:%M:%SZ", at);
}

}  // namespace tokengate::core
