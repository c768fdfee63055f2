#pragma once

// Internal to the server module.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tokengate::server {

/// Whether a warning about `key` (a client's address, an upstream) may be logged now: once
/// per interval per key, with the number held back since. A flood of bad handshakes costs a
/// line per peer per interval, never one per connection or per byte. Shared by the workers
/// (it is asked only on failures); bounded: at `max_keys` keys its memory starts afresh.
class LogThrottle {
public:
    using clock = std::chrono::steady_clock;
    explicit LogThrottle(clock::duration interval, std::size_t max_keys = 4096)
        : interval_(interval), max_keys_(max_keys) {}

    bool allow(std::string_view key, clock::time_point now, std::uint64_t& suppressed) {
        std::lock_guard lock(mutex_);
        auto it = entries_.find(std::string(key));
        if (it == entries_.end()) {
            if (entries_.size() >= max_keys_) entries_.clear();
            entries_.emplace(std::string(key), Entry{now, 0});
            suppressed = 0;
            return true;
        }
        if (now - it->second.logged < interval_) {
            ++it->second.held_back;
            return false;
        }
        suppressed = it->second.held_back;
        it->second = Entry{now, 0};
        return true;
    }

private:
    struct Entry {
        clock::time_point logged;
        std::uint64_t held_back = 0;
    };
    clock::duration interval_;
    std::size_t max_keys_;
    std::mutex mutex_;
    std::unordered_map<std::string, Entry> entries_;
};

}  // namespace tokengate::server
