#pragma once

// Internal to the server module.

#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tokengate/core/clock.hpp"

namespace tokengate::server {

/// Whether a warning about `key` (a client's address, an upstream) may be logged now: once
/// per interval per key, with the number held back since. A flood of bad handshakes costs a
/// line per peer per interval, never one per connection or per byte. Shared by the workers
/// (it is asked only on failures); bounded: at `max_keys` keys its memory starts afresh.
class LogThrottle {
public:
    static constexpr core::Nanos k_once = std::numeric_limits<core::Nanos>::max();  // once per key, ever

    explicit LogThrottle(core::Nanos interval, std::size_t max_keys = 4096)
        : interval_(interval), max_keys_(max_keys) {}

    /// `now` from the injected clock (core::Clock::now()).
    bool allow(std::string_view key, core::Nanos now, std::uint64_t& suppressed) {
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
        core::Nanos logged = 0;
        std::uint64_t held_back = 0;
    };
    core::Nanos interval_;
    std::size_t max_keys_;
    std::mutex mutex_;
    std::unordered_map<std::string, Entry> entries_;
};

}  // namespace tokengate::server
