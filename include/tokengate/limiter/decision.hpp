#pragma once

#include <span>
#include <string>
#include <vector>

#include "tokengate/config/config.hpp"
#include "tokengate/limiter/rate_bucket.hpp"

namespace tokengate::limiter {

/// One bucket a request is charged to.
struct Charge {
    const config::LimitSpec* spec = nullptr;
    config::Level level = config::Level::tenant;
    std::string key;    // the bucket's identity: "<level>:<limit name>:<subject>"
    double amount = 1;  // 1 for unit: requests, the request's cost for unit: cost
};

struct LimitStatus {
    const config::LimitSpec* spec = nullptr;
    config::Level level = config::Level::tenant;
    Verdict verdict;
    bool charged = false;  // false for a refused request and for a shadow limit that would refuse
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
    /// Settlement of a rate bucket: charge `delta` more (negative refunds).
    virtual void adjust(const Charge& charge, double delta) = 0;
    /// A concurrency slot ends.
    virtual void release(const Charge& charge) = 0;
};

/// Fills allowed / rejected / retry_after from verdicts already in `decision.statuses`.
void resolve(Decision& decision);

/// Returns the charges a decision actually took, for settlement.
std::vector<Charge> charged(std::span<const Charge> charges, const Decision& decision);

/// Settles once: releases concurrency slots and moves `unit: cost` buckets from the reserved
/// cost to `actual_cost`.
void settle(BucketStore& store, std::span<const Charge> charged, double actual_cost);

}  // namespace tokengate::limiter
