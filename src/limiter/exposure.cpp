#include "tokengate/limiter/exposure.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace tokengate::limiter {

Exposure::Hold::Hold(Hold&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), keys_(std::move(other.keys_)), amount_(other.amount_) {}

Exposure::Hold& Exposure::Hold::operator=(Hold&& other) noexcept {
    if (this != &other) {
        release();
        owner_ = std::exchange(other.owner_, nullptr);
        keys_ = std::move(other.keys_);
        amount_ = other.amount_;
    }
    return *this;
}

void Exposure::Hold::release() {
    if (auto* owner = std::exchange(owner_, nullptr)) owner->give_back(keys_, amount_);
}

double Exposure::of(std::string_view key) const {
    std::lock_guard lock(mutex_);
    auto it = held_.find(key);
    return it == held_.end() ? 0.0 : it->second.amount;
}

Exposure::Hold Exposure::hold_within(std::vector<std::string> keys, std::span<const double> remaining,
                                     const std::function<double(double, std::size_t)>& take) {
    Hold h;
    if (keys.empty() || keys.size() != remaining.size()) return h;
    std::lock_guard lock(mutex_);
    double free = std::numeric_limits<double>::infinity();
    std::size_t tightest = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
        auto it = held_.find(keys[i]);
        auto left = remaining[i] - (it == held_.end() ? 0.0 : it->second.amount);
        if (left < free) free = left, tightest = i;
    }
    auto amount = take(free, tightest);
    if (!(amount > 0)) return h;
    for (const auto& key : keys) {
        auto& held = held_[key];
        held.amount += amount;
        ++held.answers;
    }
    h.owner_ = this;
    h.keys_ = std::move(keys);
    h.amount_ = amount;
    return h;
}

void Exposure::give_back(const std::vector<std::string>& keys, double amount) {
    std::lock_guard lock(mutex_);
    for (const auto& key : keys) {
        auto it = held_.find(key);
        if (it == held_.end()) continue;
        if (--it->second.answers == 0) held_.erase(it);
        else it->second.amount = std::max(0.0, it->second.amount - amount);
    }
}

}  // namespace tokengate::limiter
