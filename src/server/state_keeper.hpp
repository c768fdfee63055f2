#pragma once

// Internal to the server module: store.state_file's snapshots (SPEC §14).

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "tokengate/core/clock.hpp"
#include "tokengate/metrics/registry.hpp"
#include "tokengate/store/store.hpp"

namespace tokengate::server {

/// Keeps the memory store's bucket levels in a file: restored at construction (refilled by the
/// time the gateway was down), written every `interval` by a thread of its own (never an event
/// loop: a million buckets take tens of milliseconds) and once more at stop.
class StateKeeper {
public:
    /// Throws std::runtime_error naming the file when it cannot be used, unless `ignore_state`
    /// (then it is logged, set aside, and overwritten by the next snapshot).
    StateKeeper(std::string path, core::Nanos interval, store::Store& store, const core::Clock& clock,
                metrics::Registry& registry, bool ignore_state);
    ~StateKeeper() { stop(); }
    StateKeeper(const StateKeeper&) = delete;
    StateKeeper& operator=(const StateKeeper&) = delete;

    void start();
    /// Ends the thread, then writes the last snapshot. Idempotent.
    void stop();
    bool snapshot();

private:
    std::string path_;
    std::chrono::nanoseconds interval_;
    store::Store& store_;
    const core::Clock& clock_;
    metrics::Family& snapshots_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    bool stopped_ = false;
    std::thread thread_;
};

}  // namespace tokengate::server
