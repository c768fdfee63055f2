#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokengate/config/config.hpp"
#include "tokengate/core/inline_string.hpp"
#include "tokengate/core/recycled.hpp"

namespace tokengate::config {

/// One bucket a request is charged to: what classify finds applies, what the limiter and the
/// stores decide on.
/// What a request holds, or finally used, in each unit a limit can count (SPEC §5, §14).
struct Amounts {
    double cost = 0;    // cost units
    double tokens = 0;  // prompt + completion tokens
    double usd = 0;     // at the model's price
    double in(Unit unit) const {
        switch (unit) {
            case Unit::requests: return 1;
            case Unit::cost: return cost;
            case Unit::tokens: return tokens;
            case Unit::usd: return usd;
        }
        return 1;
    }
};

/// "<level>:<limit name>:<subject>": built for every charge of every request, so held inline
/// (an IPv6 subject or a long limit name still fits in 95 bytes).
using BucketKey = core::InlineString<95>;

struct Charge {
    const LimitSpec* spec = nullptr;
    Level level = Level::tenant;
    BucketKey key;                           // the bucket's identity: "<level>:<limit name>:<subject>"
    double amount = 1;                       // the request's Amounts in the limit's unit (1 for requests)
    std::string_view tenant;                 // for fair queueing; points into the config snapshot
    Priority priority = Priority::standard;  // the tenant's class, served in that order by a shaping queue
    core::CalendarWindow window = {};        // quota: the window the store charged (filled by the decision)
};

/// A request's charges: a handful (SPEC §19), in one recycled block, so that a stage hands them
/// on (admission, permit) by moving a pointer, not six 150-byte charges.
using Charges = std::vector<Charge, core::RecyclingAllocator<Charge>>;

}  // namespace tokengate::config
