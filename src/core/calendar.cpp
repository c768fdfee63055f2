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

std::optional<Nanos> parse_rfc3339(std::string_view text) {
    // YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM), read by hand: date::parse trips GCC 12's
    // maybe-uninitialized warning inside date.h.
    std::size_t at = 0;
    auto number = [&](std::size_t digits, int& out) {
        if (at + digits > text.size()) return false;
        out = 0;
        for (std::size_t i = 0; i < digits; ++i, ++at) {
            char c = text[at];
            if (c < '0' || c > '9') return false;
            out = out * 10 + (c - '0');
        }
        return true;
    };
    auto expect = [&](std::string_view any_of) {
        if (at >= text.size() || any_of.find(text[at]) == std::string_view::npos) return false;
        ++at;
        return true;
    };
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0;
    if (!number(4, y) || !expect("-") || !number(2, mo) || !expect("-") || !number(2, d) || !expect("Tt") ||
        !number(2, h) || !expect(":") || !number(2, mi) || !expect(":") || !number(2, sec))
        return std::nullopt;
    Nanos fraction = 0;
    if (at < text.size() && text[at] == '.') {
        ++at;
        Nanos scale = 100'000'000;
        std::size_t digits = 0;
        for (; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at, ++digits) {
            fraction += (text[at] - '0') * scale;
            scale /= 10;
        }
        if (digits == 0 || digits > 9) return std::nullopt;
    }
    int offset_minutes = 0;
    if (at < text.size() && (text[at] == 'Z' || text[at] == 'z')) {
        ++at;
    } else {
        if (at >= text.size() || (text[at] != '+' && text[at] != '-')) return std::nullopt;
        int sign = text[at++] == '-' ? -1 : 1, oh = 0, om = 0;
        if (!number(2, oh) || !expect(":") || !number(2, om) || oh > 23 || om > 59) return std::nullopt;
        offset_minutes = sign * (oh * 60 + om);
    }
    if (at != text.size() || h > 23 || mi > 59 || sec > 60) return std::nullopt;
    date::year_month_day ymd{date::year{y}, date::month{static_cast<unsigned>(mo)},
                             date::day{static_cast<unsigned>(d)}};
    if (!ymd.ok() || y < 1970 || y > 2255) return std::nullopt;
    auto seconds_since = date::sys_days{ymd}.time_since_epoch().count() * 86'400LL + h * 3600LL + mi * 60LL + sec -
                         offset_minutes * 60LL;
    if (seconds_since < 0) return std::nullopt;
    return seconds_since * 1'000'000'000LL + fraction;
}

std::string rfc3339(Nanos unix_ns) {
    date::sys_seconds at{std::chrono::floor<seconds>(nanoseconds(unix_ns))};
    return date::format("%Y-%m-%dT%H:%M:%SZ", at);
}

}  // namespace tokengate::core
