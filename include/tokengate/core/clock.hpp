#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace tokengate::core {

/// Monotonic time in integer nanoseconds, so limiter arithmetic is exact.
using Nanos = std::int64_t;
inline constexpr Nanos k_nanos_per_second = 1'000'000'000;

/// A wake-up set on a clock: cancelled when destroyed.
class Alarm {
public:
    virtual ~Alarm() = default;
};

/// Time source injected into everything that reads time or waits for it (Envoy's TimeSource
/// and its timer factory).
class Clock {
public:
    virtual ~Clock() = default;
    /// Monotonic nanoseconds; only differences are meaningful.
    virtual Nanos now() const = 0;
    /// Wall-clock nanoseconds since the Unix epoch, for headers such as X-RateLimit-Reset.
    virtual Nanos unix_now() const = 0;
    /// Calls `wake` once, when now() reaches `at` (at once if it has): from the clock's own
    /// thread, or from the call that moves a manual clock, so it must only schedule work (post
    /// to an executor). Once the returned alarm is destroyed, `wake` is not called.
    [[nodiscard]] virtual std::unique_ptr<Alarm> alarm(Nanos at, std::function<void()> wake) const = 0;
};

/// The alarms a clock has set, in deadline order. Internal to the clocks below.
class AlarmList {
public:
    struct Entry {
        std::function<void()> wake;
        std::uint64_t id = 0;
    };
    /// Adds an alarm; true if it is now the earliest.
    bool add(Nanos at, std::uint64_t id, std::function<void()> wake);
    void cancel(Nanos at, std::uint64_t id);
    /// Removes every alarm due by `now` and returns their wakes, to be called without the lock.
    std::vector<std::function<void()>> take_due(Nanos now);
    /// The earliest deadline, if any.
    std::optional<Nanos> next() const;

private:
    std::multimap<Nanos, Entry> by_deadline_;
};

/// The real time: std::chrono's steady and system clocks. Alarms wait on a thread of their
/// own, started with the first one.
class SteadyClock final : public Clock {
public:
    SteadyClock() = default;
    SteadyClock(const SteadyClock&) = delete;
    SteadyClock& operator=(const SteadyClock&) = delete;
    ~SteadyClock() override;
    Nanos now() const override {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }
    Nanos unix_now() const override {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    }
    std::unique_ptr<Alarm> alarm(Nanos at, std::function<void()> wake) const override;

private:
    void run() const;

    mutable std::mutex mutex_;
    mutable std::condition_variable changed_;
    mutable AlarmList alarms_;
    mutable std::uint64_t next_id_ = 0;
    mutable bool stopping_ = false;
    mutable std::thread thread_;
};

/// A clock that only moves when a test (or `simulate`) says so; moving it rings the alarms
/// that came due, in deadline order, on the caller's thread.
class ManualClock final : public Clock {
public:
    explicit ManualClock(Nanos start = k_nanos_per_second, Nanos unix_start = 1'700'000'000 * k_nanos_per_second)
        : now_(start), unix_offset_(unix_start - start) {}
    Nanos now() const override { return now_.load(std::memory_order_relaxed); }
    Nanos unix_now() const override { return now() + unix_offset_; }
    std::unique_ptr<Alarm> alarm(Nanos at, std::function<void()> wake) const override;
    void advance(std::chrono::nanoseconds by) { set(now() + by.count()); }
    void set(Nanos to);
    /// The earliest alarm set and not yet rung: where a simulation moves the clock next.
    std::optional<Nanos> next_alarm() const;

private:
    std::atomic<Nanos> now_;
    Nanos unix_offset_;
    mutable std::mutex mutex_;
    mutable AlarmList alarms_;
    mutable std::uint64_t next_id_ = 0;
};

}  // namespace tokengate::core
