#pragma once

// Stage 2c, answer bound (SPEC §17, cost.stop_at_budget): an admitted non-stream answer whose
// learned reservation is below its output bound may still be charged the difference, and it
// cannot be ended part way as a stream is. So it holds that difference against its cost
// buckets until it settles, and its bound is first lowered to what those buckets keep after
// the holds already there; where not even cost.min_output tokens would fit, it is refused.
// Any other request whose charge leaves less than the holds is refused too (a stream's later
// blocks: live_budget.hpp). N parallel answers then deliver at most the budget, its refill and
// one bound, where each used to take its whole bound.

#include <optional>

#include "admit.hpp"
#include "rejection.hpp"
#include "tokengate/limiter/decision.hpp"
#include "tokengate/limiter/exposure.hpp"

namespace tokengate::server::pipeline {

/// With stop_at_budget: refuses a request whose charge ate into the holds, or an answer of which
/// less than min_output fits beside the answers in flight; for a non-stream answer with a
/// learned reservation below its bound, lowers `admitted.output`'s bound as far as needed and
/// holds what it may still take (kept until it settles).
Result<limiter::Exposure::Hold> bound_answer(const config::CostConfig& cost, Admitted& admitted,
                                             const limiter::Decision& decision, limiter::Exposure& exposure);

/// The buckets a live budget charges and an answer's hold counts against: the tenant's enforced
/// `unit: cost` rate buckets that took this decision's charge (indices into it).
std::vector<std::size_t> charged_cost_buckets(const limiter::Decision& decision, std::size_t charges);

}  // namespace tokengate::server::pipeline
