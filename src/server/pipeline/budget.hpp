#pragma once

// Stage 2c, budget (SPEC §12, cost.stop_at_budget): how far a stream may run past its
// reservation. The exchange ends it there for the client and cuts the upstream off.

#include <cstdint>
#include <optional>

#include "admit.hpp"
#include "tokengate/limiter/decision.hpp"

namespace tokengate::server::pipeline {

/// The output tokens an admitted stream may relay: as many as its reservation and the
/// tightest `unit: cost` bucket's remaining budget (after this request's charge) pay for.
/// nullopt when stop_at_budget is off, the request is not a stream, or no cost bucket applies.
std::optional<std::uint64_t> stream_budget(const config::CostConfig& cost, const Admitted& admitted,
                                           const limiter::Decision& decision);

}  // namespace tokengate::server::pipeline
