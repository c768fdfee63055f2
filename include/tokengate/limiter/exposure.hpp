#pragma once

// SPEC §17: what answers in flight may still be charged beyond what they reserved. A learned
// reservation (§12) can be smaller than the output bound written upstream, and a non-stream
// answer cannot be stopped part way, so each such answer holds its difference against every
// cost bucket it was charged to until it settles. With cost.stop_at_budget, a later answer's
// bound is lowered, and a stream's next block refused, where they would eat into what those
// answers may still take: tokens delivered stay within the budget, its refill and one bound.
// Per replica: with Redis, each replica sees its own answers in flight.

#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokengate/core/hash.hpp"

namespace tokengate::limiter {

class Exposure {
public:
    /// One answer's holds; given back when released or destroyed.
    class Hold {
    public:
        Hold() = default;
        Hold(Hold&& other) noexcept;
        Hold& operator=(Hold&& other) noexcept;
        Hold(const Hold&) = delete;
        Hold& operator=(const Hold&) = delete;
        ~Hold() { release(); }
        void release();
        double amount() const { return amount_; }

    private:
        friend class Exposure;
        Exposure* owner_ = nullptr;
        std::vector<std::string> keys_;
        double amount_ = 0;
    };

    Exposure() = default;
    Exposure(const Exposure&) = delete;
    Exposure& operator=(const Exposure&) = delete;

    /// What answers in flight may still charge to this bucket (its charge key).
    double of(std::string_view key) const;
    /// Decides and holds in one step, so two answers never both count on the same room:
    /// `take(free, i)` is offered the least over the buckets of remaining[i] − of(keys[i]) (i is
    /// that bucket) and returns the amount to hold against every one of them (≤ 0: none).
    Hold hold_within(std::vector<std::string> keys, std::span<const double> remaining,
                     const std::function<double(double free, std::size_t tightest)>& take);

private:
    void give_back(const std::vector<std::string>& keys, double amount);

    struct Held {
        double amount = 0;
        std::size_t answers = 0;  // the last one out erases the entry, leaving no rounding behind
    };
    mutable std::mutex mutex_;
    std::unordered_map<std::string, Held, core::StringViewHash, std::equal_to<>> held_;
};

}  // namespace tokengate::limiter
