#include "tokengate/limiter/rate_bucket.hpp"

#include <algorithm>
#include <cmath>

#include "tokengate/core/saturate.hpp"

namespace tokengate::limiter {

using core::k_nanos_per_second;
using core::Nanos;

namespace {
// Far below __int128's 1.7e38 and far above any bucket's 2·tau (2e33 ns for the widest
// configurable limit): only a bucket built outside the config loader's bounds can reach it.
constexpr double k_max_ticks = 1e36;
}  // namespace

RateBucket::RateBucket(const config::LimitSpec& spec, Nanos now)
    : capacity_(spec.capacity), rate_per_s_(spec.rate_per_s) {
    tau_ = ticks_for(capacity_);
    double fill = spec.algorithm == config::Algorithm::token_bucket ? spec.initial : 1.0;
    tat_ = now + ticks_for(capacity_ * (1.0 - std::clamp(fill, 0.0, 1.0)));
}

RateBucket RateBucket::restored(double capacity, double rate_per_s, double tokens, Nanos now) {
    RateBucket b;
    b.capacity_ = capacity;
    b.rate_per_s_ = rate_per_s;
    b.tau_ = b.ticks_for(capacity);
    b.tat_ = now + b.ticks_for(capacity - std::clamp(tokens, -core::k_max_counter, capacity));
    return b;
}

RateBucket::Ticks RateBucket::ticks_for(double amount) const {
    double ticks = amount * static_cast<double>(k_nanos_per_second) / rate_per_s_;
    if (!(ticks > 0)) return 0;  // also NaN
    return static_cast<Ticks>(std::round(std::min(ticks, k_max_ticks)));
}

double RateBucket::tokens(Nanos now) const {
    Ticks behind = std::max<Ticks>(0, tat_ - now);
    return capacity_ - static_cast<double>(behind) * rate_per_s_ / static_cast<double>(k_nanos_per_second);
}

Nanos RateBucket::until_full(Nanos now) const { return core::narrow_saturated(std::max<Ticks>(0, tat_ - now)); }

Verdict RateBucket::check(double amount, Nanos now) const {
    Verdict v;
    Ticks base = std::max<Ticks>(tat_, now);
    // Compared as a double, before any conversion to time: 2^64 or NaN is simply too large.
    v.never = !(amount <= capacity_);
    if (v.never) {
        v.until_full = core::narrow_saturated(base - now);
        v.remaining = tokens(now);
        v.retry_after = -1;
        return v;
    }
    Ticks new_tat = base + ticks_for(amount);
    v.admitted = new_tat - now <= tau_;
    if (v.admitted) {
        Ticks until_full = new_tat - now;
        v.until_full = core::narrow_saturated(until_full);
        v.remaining =
            capacity_ - static_cast<double>(until_full) * rate_per_s_ / static_cast<double>(k_nanos_per_second);
    } else {
        v.until_full = core::narrow_saturated(base - now);
        v.remaining = tokens(now);
        v.retry_after = core::narrow_saturated(new_tat - tau_ - now);
    }
    return v;
}

void RateBucket::consume(double amount, Nanos now) {
    tat_ = std::min(std::max<Ticks>(tat_, now) + ticks_for(std::min(amount, capacity_)), floor_at(now));
}

void RateBucket::adjust(double delta, Nanos now) {
    // A hostile usage report of 2^64 tokens sinks the bucket to its floor and no further.
    double bounded = std::min(std::fabs(delta), capacity_ + core::k_max_counter);
    Ticks base = std::max<Ticks>(tat_, now);
    if (delta >= 0) tat_ = std::min(base + ticks_for(bounded), floor_at(now));
    else if (delta < 0) tat_ = std::max<Ticks>(base - ticks_for(bounded), now);  // a full bucket is tat ≤ now
}

void RateBucket::reconfigure(const config::LimitSpec& spec, Nanos now) {
    if (spec.capacity == capacity_ && spec.rate_per_s == rate_per_s_) return;
    double level = std::clamp(tokens(now), -core::k_max_counter, spec.capacity);
    capacity_ = spec.capacity;
    rate_per_s_ = spec.rate_per_s;
    tau_ = ticks_for(capacity_);
    tat_ = now + ticks_for(capacity_ - level);
}

Verdict ConcurrencyGauge::check(double amount) const {
    Verdict v;
    v.never = !(amount <= max_);
    v.admitted = !v.never && in_flight_ + amount <= max_;
    v.remaining = v.admitted ? max_ - in_flight_ - amount : max_ - in_flight_;
    v.retry_after = v.never ? -1 : (v.admitted ? 0 : k_nanos_per_second);
    return v;
}

void ConcurrencyGauge::release(double amount) { in_flight_ = std::max(0.0, in_flight_ - amount); }

}  // namespace tokengate::limiter
