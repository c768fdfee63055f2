#include "tokengate/limiter/rate_bucket.hpp"

#include <algorithm>
#include <cmath>

namespace tokengate::limiter {

using core::k_nanos_per_second;
using core::Nanos;

RateBucket::RateBucket(const config::LimitSpec& spec, Nanos now)
    : capacity_(spec.capacity), rate_per_s_(spec.rate_per_s) {
    tau_ = nanos_for(capacity_);
    double fill = spec.algorithm == config::Algorithm::token_bucket ? spec.initial : 1.0;
    tat_ = now + nanos_for(capacity_ * (1.0 - fill));
}

Nanos RateBucket::nanos_for(double amount) const {
    return static_cast<Nanos>(
        std::llround(amount * static_cast<double>(k_nanos_per_second) / rate_per_s_));
}

double RateBucket::tokens(Nanos now) const {
    Nanos behind = std::max<Nanos>(0, tat_ - now);
    return capacity_ - static_cast<double>(behind) * rate_per_s_ / static_cast<double>(k_nanos_per_second);
}

Nanos RateBucket::until_full(Nanos now) const { return std::max<Nanos>(0, tat_ - now); }

Verdict RateBucket::check(double amount, Nanos now) const {
    Verdict v;
    Nanos base = std::max(tat_, now);
    Nanos new_tat = base + nanos_for(amount);
    v.admitted = new_tat - now <= tau_;
    v.never = amount > capacity_;
    if (v.admitted) {
        v.until_full = new_tat - now;
        v.remaining = capacity_ - static_cast<double>(v.until_full) * rate_per_s_ /
                                      static_cast<double>(k_nanos_per_second);
    } else {
        v.until_full = base - now;
        v.remaining = tokens(now);
        v.retry_after = v.never ? -1 : new_tat - tau_ - now;
    }
    return v;
}

void RateBucket::consume(double amount, Nanos now) { tat_ = std::max(tat_, now) + nanos_for(amount); }

void RateBucket::adjust(double delta, Nanos now) {
    if (delta >= 0) {
        tat_ = std::min(std::max(tat_, now) + nanos_for(delta), now + 2 * tau_);
    } else {
        tat_ = std::max(tat_, now) - nanos_for(-delta);
    }
}

void RateBucket::reconfigure(const config::LimitSpec& spec, Nanos now) {
    if (spec.capacity == capacity_ && spec.rate_per_s == rate_per_s_) return;
    double level = std::min(tokens(now), spec.capacity);
    capacity_ = spec.capacity;
    rate_per_s_ = spec.rate_per_s;
    tau_ = nanos_for(capacity_);
    tat_ = now + nanos_for(capacity_ - level);
}

Verdict ConcurrencyGauge::check(double amount) const {
    Verdict v;
    v.admitted = in_flight_ + amount <= max_;
    v.never = amount > max_;
    v.remaining = v.admitted ? max_ - in_flight_ - amount : max_ - in_flight_;
    v.retry_after = v.never ? -1 : (v.admitted ? 0 : k_nanos_per_second);
    return v;
}

void ConcurrencyGauge::release(double amount) { in_flight_ = std::max(0.0, in_flight_ - amount); }

}  // namespace tokengate::limiter
