#include "tokengate/redis/lease_book.hpp"

#include <algorithm>
#include <cmath>

namespace tokengate::redis {

using limiter::Charge;

LeaseBook::LeaseBook(double fraction, core::Nanos min_period, const core::Clock& clock)
    : fraction_(fraction), min_period_(min_period), clock_(clock) {}

bool LeaseBook::leased(const Charge& charge) {
    // Shared by many tenants, so hot for every replica; queues and slots stay in Redis.
    return charge.level != config::Level::tenant && limiter::is_rate_bucket(*charge.spec);
}

double LeaseBook::lease_size(const Charge& charge) const {
    return std::max(fraction_ * charge.spec->capacity, charge.amount);
}

LeaseBook::Lease& LeaseBook::lease_of(const Charge& charge) {
    auto it = leases_.find(charge.key.view());
    if (it == leases_.end()) {
        it = leases_.try_emplace(std::string(charge.key.view())).first;
        it->second.charge = charge;
    }
    it->second.charge.spec = charge.spec;  // a reload's spec: the lease keeps its units
    return it->second;
}

std::optional<std::size_t> LeaseBook::take(std::span<const Charge* const> charges) {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < charges.size(); ++i)
        if (lease_of(*charges[i]).left + 1e-9 < charges[i]->amount) return i;
    auto now = clock_.now();
    for (const auto* c : charges) {
        auto& lease = lease_of(*c);
        lease.left -= c->amount;
        lease.last_used = now;
    }
    return std::nullopt;
}

void LeaseBook::give_back(std::span<const Charge* const> charges) {
    std::lock_guard lock(mutex_);
    for (const auto* c : charges) lease_of(*c).left += c->amount;
}

void LeaseBook::settle(const Charge& charge, double delta) {
    if (!std::isfinite(delta)) return;
    std::lock_guard lock(mutex_);
    auto& lease = lease_of(charge);
    // Debt is carried (a later renewal covers it), a refund no further than a full bucket.
    lease.left = std::clamp(lease.left - delta, -1e18, charge.spec->capacity);
    lease.last_used = clock_.now();
}

std::vector<LeaseBook::Renewal> LeaseBook::due(std::span<const Charge* const> charges) {
    std::vector<Renewal> out;
    std::lock_guard lock(mutex_);
    for (const auto* c : charges) {
        auto& lease = lease_of(*c);
        if (lease.renewing || lease.left >= lease_size(*c) / 2) continue;
        lease.renewing = true;
        Renewal r{std::string(c->key.view()), *c};
        r.charge.amount = lease_size(*c);
        out.push_back(std::move(r));
    }
    return out;
}

bool LeaseBook::start_renewal(const Charge& charge) {
    std::lock_guard lock(mutex_);
    auto& lease = lease_of(charge);
    if (lease.renewing) return false;
    lease.renewing = true;
    return true;
}

void LeaseBook::granted(const Charge& charge, double amount, double shared_level) {
    std::lock_guard lock(mutex_);
    auto& lease = lease_of(charge);
    lease.renewing = false;
    auto now = clock_.now();
    if (std::isfinite(amount) && amount > 0) lease.left += amount;
    if (std::isfinite(shared_level)) {
        lease.shared_level = shared_level;
        if (!(amount >= lease_size(lease.charge))) {
            // Refused, or given less than a lease: the bucket is empty. It refills at its rate,
            // or sooner when another replica returns a lease, so it is asked again after
            // min_period at the latest.
            double refill_s = std::max(0.0, lease_size(lease.charge) - shared_level) / charge.spec->current_rate();
            lease.empty_until = now + std::min<core::Nanos>(min_period_, static_cast<core::Nanos>(refill_s * 1e9));
        }
    }
    lease.last_used = now;
}

bool LeaseBook::waiting_for_refill(const Charge& charge) const {
    std::lock_guard lock(mutex_);
    auto it = leases_.find(charge.key.view());
    return it != leases_.end() && clock_.now() < it->second.empty_until;
}

limiter::Verdict LeaseBook::verdict(const Charge& charge, bool admitted) const {
    limiter::Verdict v;
    v.admitted = admitted;
    std::lock_guard lock(mutex_);
    auto it = leases_.find(charge.key.view());
    double left = it == leases_.end() ? 0 : it->second.left;
    double shared = it == leases_.end() ? 0 : it->second.shared_level;
    const auto& spec = *charge.spec;
    double rate = spec.current_rate();
    v.remaining = std::clamp(left + shared, 0.0, spec.capacity);
    auto seconds = [rate](double units) {
        return static_cast<core::Nanos>(std::min(4.6e9, std::max(0.0, units / rate)) * 1e9);
    };
    v.until_full = seconds(spec.capacity - v.remaining);
    if (!admitted) {
        v.never = charge.amount > spec.capacity;
        v.retry_after = v.never ? -1 : std::max<core::Nanos>(1'000'000, seconds(charge.amount - v.remaining));
    }
    return v;
}

std::vector<LeaseBook::Unused> LeaseBook::expire(bool everything) {
    std::vector<Unused> out;
    auto now = clock_.now();
    std::lock_guard lock(mutex_);
    for (auto it = leases_.begin(); it != leases_.end();) {
        auto& lease = it->second;
        if (lease.renewing || (!everything && now - lease.last_used < min_period_)) {
            ++it;
            continue;
        }
        // What is left goes back; a debt (a settlement used more than the lease held) is
        // charged to the shared bucket now.
        if (lease.left != 0) {
            Unused u{lease.charge};
            u.charge.amount = lease.left;
            out.push_back(std::move(u));
        }
        it = leases_.erase(it);
    }
    return out;
}

double LeaseBook::held() const {
    std::lock_guard lock(mutex_);
    double sum = 0;
    for (const auto& [key, lease] : leases_) sum += std::max(0.0, lease.left);
    return sum;
}

}  // namespace tokengate::redis
