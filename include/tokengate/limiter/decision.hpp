#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tokengate/config/config.hpp"
#include "tokengate/limiter/rate_bucket.hpp"
#include "tokengate/limiter/shape_queue.hpp"

namespace tokengate::limiter {

/// One bucket a request is charged to.
struct Charge {
    const config::LimitSpec* spec = nullptr;
    config::Level level = config::Level::tenant;
    std::string key;    // the bucket's identity: "<level>:<limit name>:<subject>"
    double amount = 1;  // 1 for unit: requests, the request's cost for unit: cost
    std::string_view tenant;  // for fair queueing; points into the config snapshot
};

inline bool is_shaping(const config::LimitSpec& spec) {
    return spec.algorithm == config::Algorithm::leaky_bucket && spec.mode == config::LeakyMode::shape;
}

struct LimitStatus {
    const config::LimitSpec* spec = nullptr;
    config::Level level = config::Level::tenant;
    Verdict verdict;
    bool charged = false;  // false for a refused request and for a shadow limit that would refuse
    std::uint64_t ticket = 0;  // shaping: the place in the queue to wait with (0 = start now)
};

/// The outcome of checking every applicable limit at once.
struct Decision {
    bool allowed = true;
    int rejected = -1;            // index of the enforced limit that refused (the longest wait)
    core::Nanos retry_after = 0;  // refused: until the request could pass; -1 if it never can
    std::vector<LimitStatus> statuses;  // parallel to the charges

    bool never() const { return !allowed && retry_after < 0; }
};

/// Counts buckets. decide() is all-or-nothing: it charges every bucket only if every
/// enforced limit admits; a refused request charges nothing anywhere.
class BucketStore {
public:
    virtual ~BucketStore() = default;
    virtual Decision decide(std::span<const Charge> charges) = 0;
    /// What decide() would say, changing nothing and creating no bucket (admin, explain).
    virtual Decision peek(std::span<const Charge> charges) = 0;
    /// Settlement of a rate bucket: charge `delta` more (negative refunds).
    virtual void adjust(const Charge& charge, double delta) = 0;
    /// A concurrency slot ends.
    virtual void release(const Charge& charge) = 0;

    /// Shaping: a queued request asks to start (see ShapeQueue::try_start).
    virtual ShapeQueue::StartCheck queue_try_start(const Charge& charge, std::uint64_t ticket) = 0;
    /// Shaping: a queued request leaves before it started, giving its place back.
    virtual void queue_cancel(const Charge& charge, std::uint64_t ticket) = 0;
    /// Shaping: `wake` is called (from any thread; it must only schedule) when the ticket
    /// should call queue_try_start again.
    virtual void queue_set_waker(const Charge& charge, std::uint64_t ticket, std::function<void()> wake) = 0;
};

/// Fills allowed / rejected / retry_after from verdicts already in `decision.statuses`.
void resolve(Decision& decision);

/// Returns the charges a decision actually took, for settlement.
std::vector<Charge> charged(std::span<const Charge> charges, const Decision& decision);

/// Settles once: releases concurrency slots and moves `unit: cost` buckets from the reserved
/// cost to `actual_cost`.
void settle(BucketStore& store, std::span<const Charge> charged, double actual_cost);

}  // namespace tokengate::limiter
