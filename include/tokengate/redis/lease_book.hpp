#pragma once

#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokengate/core/clock.hpp"
#include "tokengate/core/hash.hpp"
#include "tokengate/limiter/decision.hpp"

namespace tokengate::redis {

/// Leased limits (SPEC §18): this replica's shares of the route, IP and global rate buckets,
/// taken from the shared bucket in Redis ahead of need and decided against here, so a request
/// asks Redis only for its tenant's limits. What a replica holds is already gone from the
/// shared bucket, so the fleet never admits more than the bucket allows; at worst the leases
/// outstanding sit unused in the replicas. No I/O here: RedisStore takes, renews and returns
/// them. Any thread may call.
class LeaseBook {
public:
    LeaseBook(double fraction, core::Nanos min_period, const core::Clock& clock);

    /// Whether a charge is leased rather than decided in Redis per request.
    static bool leased(const limiter::Charge& charge);
    /// What a lease takes at once: the fraction of the capacity, at least one request's worth.
    double lease_size(const limiter::Charge& charge) const;

    /// Takes every charge's amount from its lease, all or none: nothing, or the index (into
    /// `charges`) of the first whose lease holds too little.
    std::optional<std::size_t> take(std::span<const limiter::Charge* const> charges);
    /// Gives back what take() took (the tenant's decision refused).
    void give_back(std::span<const limiter::Charge* const> charges);
    /// A settled request used `delta` more (less, when negative) than it took.
    void settle(const limiter::Charge& charge, double delta);

    /// A renewal to send: the charge's key, how much to ask for.
    struct Renewal {
        std::string key;
        limiter::Charge charge;  // its spec, for the script; the amount is the lease's size
    };
    /// The leases among `charges` that have run below half their size with no renewal on its
    /// way; each is marked renewing until granted() hears the answer.
    std::vector<Renewal> due(std::span<const limiter::Charge* const> charges);
    /// Marks one lease renewing (a request found it short); false if a renewal is on its way.
    bool start_renewal(const limiter::Charge& charge);
    /// Redis's answer to a renewal: `amount` added to the lease (0: refused, or not answered),
    /// `shared_level` what the shared bucket holds after it. Refused (or given less than a
    /// lease), it does not ask again until a whole lease could be there (min_period at most).
    void granted(const limiter::Charge& charge, double amount, double shared_level);
    /// Whether the shared bucket was found empty lately: a short lease refuses without asking.
    bool waiting_for_refill(const limiter::Charge& charge) const;

    /// What the status of a leased charge says: admitted or not, the units left here and in
    /// the shared bucket as last seen, and when it could pass.
    limiter::Verdict verdict(const limiter::Charge& charge, bool admitted) const;

    /// A lease's unused part, to give back to Redis.
    struct Unused {
        limiter::Charge charge;  // amount: what is given back (below zero: a debt to charge)
    };
    /// Leases unused for min_period (or every lease: at shutdown), removed.
    std::vector<Unused> expire(bool everything);
    /// Units held in all leases (the fleet's overshoot bound is the sum over replicas).
    double held() const;

private:
    struct Lease {
        limiter::Charge charge;  // spec and key; amount: the lease's size
        double left = 0;         // may go below zero: a settlement used more than was taken
        double shared_level = 0;
        core::Nanos last_used = 0;
        core::Nanos empty_until = 0;  // the shared bucket was found empty: not asked before this
        bool renewing = false;
    };
    Lease& lease_of(const limiter::Charge& charge);

    double fraction_;
    core::Nanos min_period_;
    const core::Clock& clock_;
    mutable std::mutex mutex_;
    // Found by the charge's key as a view: a request's leased charges are looked up ~9 times.
    std::unordered_map<std::string, Lease, core::StringViewHash, std::equal_to<>> leases_;
};

}  // namespace tokengate::redis
