#pragma once

#include <atomic>
#include <functional>

#include "tokengate/core/clock.hpp"

namespace tokengate::redis {

/// Stops calling a failing Redis: after `failures_to_open` failures in a row it opens for
/// `cooldown`, then lets exactly one call through as a probe; the probe's success closes it,
/// its failure opens it for another cool-down. Lock-free: every worker thread consults it.
class CircuitBreaker {
public:
    CircuitBreaker(const core::Clock& clock, unsigned failures_to_open, core::Nanos cooldown,
                   std::function<void(bool open)> on_change = {});

    /// May a call go to Redis now? While open, true once per cool-down (the probe).
    bool allow();
    void record(bool success);
    /// Redis is reachable again (a connection came up): the next call probes at once rather
    /// than after the rest of the cool-down.
    void probe_now();
    bool open() const { return open_until_.load(std::memory_order_acquire) != 0; }

private:
    const core::Clock& clock_;
    unsigned failures_to_open_;
    core::Nanos cooldown_;
    std::function<void(bool)> on_change_;
    std::atomic<unsigned> failures_{0};
    std::atomic<core::Nanos> open_until_{0};  // 0: closed
    std::atomic<bool> probing_{false};
};

}  // namespace tokengate::redis
