#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tokengate::core {

/// Monotonic time in integer nanoseconds, so limiter arithmetic is exact.
using Nanos = std::int64_t;
inline constexpr Nanos k_nanos_per_second = 1'000'000'000;

/// Time source injected into everything that reads time (Envoy's TimeSource).
class Clock {
public:
    virtual ~Clock() = default;
    /// Monotonic nanoseconds; only differences are meaningful.
    virtual Nanos now() const = 0;
    /// Wall-clock nanoseconds since the Unix epoch, for headers such as X-RateLimit-Reset.
    virtual Nanos unix_now() const = 0;
};

class SteadyClock final : public Clock {
public:
    Nanos now() const override {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }
    Nanos unix_now() const override {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    }
};

/// A clock that only moves when a test says so.
class ManualClock final : public Clock {
public:
    explicit ManualClock(Nanos start = k_nanos_per_second, Nanos unix_start = 1'700'000'000 * k_nanos_per_second)
        : now_(start), unix_offset_(unix_start - start) {}
    Nanos now() const override { return now_.load(std::memory_order_relaxed); }
    Nanos unix_now() const override { return now() + unix_offset_; }
    void advance(std::chrono::nanoseconds by) { now_.fetch_add(by.count(), std::memory_order_relaxed); }
    void set(Nanos to) { now_.store(to, std::memory_order_relaxed); }

private:
    std::atomic<Nanos> now_;
    Nanos unix_offset_;
};

}  // namespace tokengate::core
