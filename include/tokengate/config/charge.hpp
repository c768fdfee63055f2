#pragma once

#include <string>
#include <string_view>

#include "tokengate/config/config.hpp"

namespace tokengate::config {

/// One bucket a request is charged to: what classify finds applies, what the limiter and the
/// stores decide on.
struct Charge {
    const LimitSpec* spec = nullptr;
    Level level = Level::tenant;
    std::string key;          // the bucket's identity: "<level>:<limit name>:<subject>"
    double amount = 1;        // 1 for unit: requests, the request's cost for unit: cost
    std::string_view tenant;  // for fair queueing; points into the config snapshot
};

}  // namespace tokengate::config
