#pragma once

#include "tokengate/config/config.hpp"
#include "tokengate/core/clock.hpp"
#include "tokengate/core/saturate.hpp"

namespace tokengate::limiter {

/// What a bucket says about one request, before anything is charged.
struct Verdict {
    bool admitted = false;
    bool never = false;           // the amount exceeds what the bucket can ever hold
    double remaining = 0;         // units left after admission (or now, when refused)
    core::Nanos until_full = 0;   // from now until the bucket is full again (≤ core::k_forever)
    core::Nanos retry_after = 0;  // refused: from now until this amount could pass (≤ k_forever)
};

/// Token bucket and leaky-bucket police meter in one state: GCRA's theoretical arrival time.
///
/// With tau = C/R (time to fill from empty), tokens(now) = C - max(0, tat - now)·R, and a
/// leaky meter's water is W = C - tokens, so both admit iff tokens >= c (W + c <= C).
/// Integer nanoseconds keep the arithmetic exact for rates that divide a second. They are
/// 128-bit: tau for 1e15 units at 1e-9/s is 1e33 ns, far past an int64, and an amount is
/// compared with the capacity as a double before it is ever turned into time, so no client
/// number can overflow the state (amounts over C are refused as never). Settlement may take a
/// bucket into debt as deep as the amounts settled (SPEC §17: paid back, never forgiven), down
/// to −core::k_max_counter, and refunds no further than a full bucket.
class RateBucket {
public:
    RateBucket() = default;
    /// A new bucket: a token bucket at its `initial` fill, a leaky meter empty (full of room).
    RateBucket(const config::LimitSpec& spec, core::Nanos now);

    /// A bucket brought back from a state file: `tokens` (below zero, a debt) at `now`.
    static RateBucket restored(double capacity, double rate_per_s, double tokens, core::Nanos now);

    Verdict check(double amount, core::Nanos now) const;
    /// Charges an amount check() admitted (never more than the capacity at once).
    void consume(double amount, core::Nanos now);
    /// Settlement: positive charges more (into debt), negative refunds (up to C).
    void adjust(double delta, core::Nanos now);

    double tokens(core::Nanos now) const;
    core::Nanos until_full(core::Nanos now) const;
    bool is_full(core::Nanos now) const { return tat_ <= now; }
    /// Keeps the level in absolute units when capacity or rate change (reload).
    void reconfigure(const config::LimitSpec& spec, core::Nanos now);
    double capacity() const { return capacity_; }
    double rate_per_s() const { return rate_per_s_; }

private:
    using Ticks = __int128;
    /// The time `amount` units take to refill; `amount` must lie within [0, 2C].
    Ticks ticks_for(double amount) const;
    /// The debt floor, −k_max_counter: only a bucket past any real debt stops there.
    Ticks floor_at(core::Nanos now) const { return now + tau_ + ticks_for(core::k_max_counter); }

    Ticks tat_ = 0;
    Ticks tau_ = 0;
    double capacity_ = 0;
    double rate_per_s_ = 0;
};

/// At most `max` requests (or cost units) in flight.
class ConcurrencyGauge {
public:
    explicit ConcurrencyGauge(double max = 0) : max_(max) {}
    Verdict check(double amount) const;
    void acquire(double amount) { in_flight_ += amount; }
    void release(double amount);
    double in_flight() const { return in_flight_; }
    double max() const { return max_; }
    void set_max(double max) { max_ = max; }

private:
    double max_;
    double in_flight_ = 0;
};

}  // namespace tokengate::limiter
