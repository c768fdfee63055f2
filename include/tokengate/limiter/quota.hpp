#pragma once

#include <algorithm>

#include "tokengate/config/config.hpp"
#include "tokengate/core/calendar.hpp"
#include "tokengate/limiter/rate_bucket.hpp"

namespace tokengate::limiter {

/// A quota as the admin API shows it: used and granted in its current window.
struct QuotaState {
    double used = 0;
    double added = 0;  // top-ups for this window
    core::CalendarWindow window;
};

/// A calendar quota (SPEC §14): what was used in the current window, plus top-ups granted for
/// it. A new window starts at zero. Times are wall-clock (Unix) nanoseconds: a day ends at
/// midnight, not 86400 s after the gateway started.
class QuotaCounter {
public:
    QuotaCounter() = default;
    /// A counter brought back from a state file (or a store that keeps its own windows).
    static QuotaCounter restored(double used, double added, core::CalendarWindow window);

    /// Puts the counter in the window holding `unix_now` under `spec`'s period and zone; a
    /// window that has ended is replaced by a new one at zero.
    void place(const config::LimitSpec& spec, core::Nanos unix_now);
    /// Admits iff used + amount <= limit + top-ups. Call place() first.
    Verdict check(double amount, double limit, core::Nanos unix_now) const;
    void consume(double amount) { used_ = std::min(used_ + amount, core::k_max_counter); }
    /// Settlement of a charge taken in `window`: none once that window has ended. The count
    /// never goes below zero.
    void adjust(double delta, const core::CalendarWindow& window);
    /// Admin: more allowance for the current window only.
    void top_up(double amount) { added_ = std::min(added_ + amount, core::k_max_counter); }
    /// Admin: the current window starts over.
    void reset() { used_ = added_ = 0; }

    double used() const { return used_; }
    double added() const { return added_; }
    const core::CalendarWindow& window() const { return window_; }
    /// Nothing used or granted, or its window over: as good as no counter.
    bool idle(core::Nanos unix_now) const { return (used_ == 0 && added_ == 0) || unix_now >= window_.end; }

private:
    double used_ = 0;
    double added_ = 0;
    core::CalendarWindow window_;
    const date::time_zone* zone_ = nullptr;  // what window_ was computed for
    core::CalendarPeriod period_ = core::CalendarPeriod::day;
};

}  // namespace tokengate::limiter
