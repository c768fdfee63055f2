#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tokengate/config/charge.hpp"
#include "tokengate/config/config.hpp"
#include "tokengate/core/recycled.hpp"
#include "tokengate/limiter/rate_bucket.hpp"
#include "tokengate/limiter/shape_queue.hpp"

namespace tokengate::limiter {

using Charge = config::Charge;

inline bool is_shaping(const config::LimitSpec& spec) {
    return spec.algorithm == config::Algorithm::leaky_bucket && spec.mode == config::LeakyMode::shape;
}

/// A bucket whose level a charge lowers at once: a token bucket or a leaky-bucket meter.
inline bool is_rate_bucket(const config::LimitSpec& spec) {
    return spec.algorithm == config::Algorithm::token_bucket ||
           (spec.algorithm == config::Algorithm::leaky_bucket && spec.mode == config::LeakyMode::police);
}

struct LimitStatus {
    const config::LimitSpec* spec = nullptr;
    config::Level level = config::Level::tenant;
    Verdict verdict;
    bool charged = false;              // false for a refused request and for a shadow limit that would refuse
    std::uint64_t ticket = 0;          // shaping: the place in the queue to wait with (0 = start now)
    core::Nanos wait = 0;              // shaping on a shared store: start this long after the decision
    core::CalendarWindow window = {};  // quota: the window decided in
    double quota_added = 0;            // quota: top-ups granted for that window
};

/// Which store keeps what a decision took: its settlement and queue turns go there.
enum class Keeper : std::uint8_t {
    none,    // nothing was taken
    memory,  // this process's buckets: the memory store, or a shared store's stand-in while it is down
    shared,  // the shared store
};

/// The outcome of checking every applicable limit at once.
struct Decision {
    bool allowed = true;
    int rejected = -1;            // index of the enforced limit that refused (the longest wait)
    core::Nanos retry_after = 0;  // refused: until the request could pass; -1 if it never can
    // Parallel to the charges; in a recycled block, so a decision moves as a pointer.
    std::vector<LimitStatus, core::RecyclingAllocator<LimitStatus>> statuses;
    Keeper keeper = Keeper::none;  // where the charges were taken
    std::string lease;             // identifies the request's concurrency slots in that store
    bool unavailable = false;      // the shared store failed and on_error is fail_closed

    bool never() const { return !allowed && retry_after < 0; }
    /// Admitted into a shaping queue: the request starts later, or when its ticket comes up.
    bool must_wait() const {
        for (const auto& s : statuses)
            if (s.wait > 0 || s.ticket) return true;
        return false;
    }
};

/// Fills allowed / rejected / retry_after from verdicts already in `decision.statuses`.
void resolve(Decision& decision);

/// Returns the charges a decision actually took, for settlement (a permit keeps them inline).
template <typename Out = std::vector<Charge>>
Out charged(std::span<const Charge> charges, const Decision& decision) {
    Out out;
    out.reserve(charges.size());
    for (std::size_t i = 0; i < charges.size(); ++i)
        if (decision.statuses[i].charged) {
            out.push_back(charges[i]);
            out.back().window = decision.statuses[i].window;  // a quota settles in the window it was charged in
        }
    return out;
}

/// Whether settlement changes this charge: a concurrency slot to release, or a rate bucket or
/// quota whose actual amount differs from the reservation (requests are counted as they come).
inline bool settles(const Charge& c, const config::Amounts& actual) {
    if (c.spec->algorithm == config::Algorithm::concurrency) return true;
    return !is_shaping(*c.spec) && c.spec->unit != config::Unit::requests && actual.in(c.spec->unit) != c.amount;
}

}  // namespace tokengate::limiter
