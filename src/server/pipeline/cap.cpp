#include "cap.hpp"

#include <algorithm>
#include <limits>

namespace tokengate::server::pipeline {

std::optional<Admitted> cap_output(const config::CostConfig& cost, const Admitted& admitted,
                                   const limiter::Decision& refused) {
    const auto& summary = admitted.summary;
    if (refused.allowed || refused.unavailable || summary.sequences == 0) return std::nullopt;
    double budget = std::numeric_limits<double>::infinity();
    for (const auto& s : refused.statuses) {
        if (s.verdict.admitted || !s.spec->enforce) continue;
        if (s.spec->unit != config::Unit::cost || !limiter::is_rate_bucket(*s.spec)) return std::nullopt;
        budget = std::min(budget, s.verdict.remaining);
    }
    auto least = summary.sequences * cost.min_output;  // sequences ≤ 128, min_output ≤ 1e6: no overflow
    if (least >= admitted.output.tokens) return std::nullopt;
    auto fits = cost::largest_output_within(cost, admitted.cost_factor, summary.input_tokens, summary.stream, budget,
                                            least, admitted.output.tokens);
    if (!fits) return std::nullopt;
    Admitted capped = admitted;
    capped.output.per_sequence = *fits / summary.sequences;
    capped.output.tokens = capped.output.per_sequence * summary.sequences;
    capped.output.capped = true;
    capped.reserved = cost::request_amounts(cost, admitted.cost_factor, admitted.price, summary.input_tokens,
                                            capped.output.tokens, summary.stream);
    for (auto& charge : capped.charges) charge.amount = capped.reserved.in(charge.spec->unit);
    return capped;
}

}  // namespace tokengate::server::pipeline
