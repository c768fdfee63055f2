#include "tokengate/redis/breaker.hpp"

namespace tokengate::redis {

CircuitBreaker::CircuitBreaker(const core::Clock& clock, unsigned failures_to_open, core::Nanos cooldown,
                               std::function<void(bool)> on_change)
    : clock_(clock), failures_to_open_(failures_to_open), cooldown_(cooldown), on_change_(std::move(on_change)) {}

bool CircuitBreaker::allow() {
    auto until = open_until_.load(std::memory_order_acquire);
    if (until == 0) return true;
    if (clock_.now() < until) return false;
    bool expected = false;
    return probing_.compare_exchange_strong(expected, true);
}

void CircuitBreaker::probe_now() {
    auto until = open_until_.load(std::memory_order_acquire);
    // 1: still open, and its cool-down long over.
    if (until > 1) open_until_.compare_exchange_strong(until, 1);
}

void CircuitBreaker::record(bool success) {
    if (success) {
        failures_.store(0, std::memory_order_relaxed);
        if (open_until_.exchange(0) != 0) {
            probing_.store(false);
            if (on_change_) on_change_(false);
        }
        return;
    }
    auto failures = failures_.fetch_add(1) + 1;
    auto until = open_until_.load(std::memory_order_acquire);
    if (until != 0) {
        open_until_.store(clock_.now() + cooldown_);  // the probe failed: another cool-down
        probing_.store(false);
    } else if (failures >= failures_to_open_) {
        core::Nanos closed = 0;
        if (open_until_.compare_exchange_strong(closed, clock_.now() + cooldown_) && on_change_) on_change_(true);
    }
}

}  // namespace tokengate::redis
