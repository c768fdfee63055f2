#include "tokengate/limiter/quota.hpp"

#include <algorithm>
#include <cmath>

#include "tokengate/core/saturate.hpp"

namespace tokengate::limiter {

QuotaCounter QuotaCounter::restored(double used, double added, core::CalendarWindow window) {
    QuotaCounter q;
    q.used_ = used;
    q.added_ = added;
    q.window_ = window;
    return q;  // zone_ unset: the first place() recomputes the window from the config
}

void QuotaCounter::place(const config::LimitSpec& spec, core::Nanos unix_now) {
    if (window_.contains(unix_now) && spec.zone == zone_ && spec.period == period_) return;
    if (!window_.contains(unix_now)) reset();
    // A reload that changes the period or the zone keeps what was used: the tenant spent it.
    window_ = core::calendar_window(*spec.zone, spec.period, unix_now);
    zone_ = spec.zone;
    period_ = spec.period;
}

Verdict QuotaCounter::check(double amount, double limit, core::Nanos unix_now) const {
    Verdict v;
    double allowance = limit + added_;
    // Sums of dollar amounts are not exact in binary: a billionth of the allowance is forgiven.
    double slack = 1e-9 * std::max(1.0, allowance);
    v.never = !(amount <= allowance + slack);
    v.admitted = !v.never && used_ + amount <= allowance + slack;
    v.remaining = allowance - used_ - (v.admitted ? amount : 0);
    v.until_full = std::clamp<core::Nanos>(window_.end - unix_now, 0, core::k_forever);
    v.retry_after = v.never ? -1 : v.admitted ? 0 : v.until_full;
    return v;
}

void QuotaCounter::adjust(double delta, const core::CalendarWindow& window) {
    if (window != window_) return;  // that window is over: its settlement changes nothing now
    if (!std::isfinite(delta)) return;
    used_ = std::clamp(used_ + delta, 0.0, core::k_max_counter);
}

}  // namespace tokengate::limiter
