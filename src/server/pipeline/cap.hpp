#pragma once

// Stage 2b, cap (SPEC §12, cost.cap_output): a request refused only by `unit: cost` buckets,
// whose input and cost.min_output tokens would still fit, is priced again with the largest
// output that fits; the body sent upstream then carries that output limit.

#include <optional>

#include "admit.hpp"
#include "tokengate/limiter/decision.hpp"

namespace tokengate::server::pipeline {

/// The admission re-priced with the largest output per sequence that fits every refusing
/// bucket's remaining budget; nullopt when lowering the output cannot help (a requests or
/// concurrency limit refused, a shaping queue is full, or less than min_output would fit).
std::optional<Admitted> cap_output(const config::CostConfig& cost, const Admitted& admitted,
                                   const limiter::Decision& refused);

}  // namespace tokengate::server::pipeline
