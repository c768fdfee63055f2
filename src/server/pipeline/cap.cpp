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
        bool rate_bucket =
            s.spec->algorithm == config::Algorithm::token_bucket ||
            (s.spec->algorithm == config::Algorithm::leaky_bucket && s.spec->mode == config::LeakyMode::police);
        if (s.spec->unit != config::Unit::cost || !rate_bucket) return std::nullopt;
        budget = std::min(budget, s.verdict.remaining);
    }
    auto price = [&](std::uint64_t output) {
        return cost::request_cost(cost, admitted.cost_factor, summary.input_tokens, output, summary.stream);
    };
    auto least = summary.sequences * cost.min_output;  // sequences ≤ 128, min_output ≤ 1e6: no overflow
    if (!(budget >= price(least)) || least >= admitted.output.tokens) return std::nullopt;
    // The cost grows with the output: the largest that fits, by bisection (any rounding).
    std::uint64_t fits = least, too_many = admitted.output.tokens;
    while (too_many - fits > 1) {
        auto mid = fits + (too_many - fits) / 2;
        (price(mid) <= budget ? fits : too_many) = mid;
    }
    Admitted capped = admitted;
    capped.output.per_sequence = fits / summary.sequences;
    capped.output.tokens = capped.output.per_sequence * summary.sequences;
    capped.output.capped = true;
    capped.reserved = price(capped.output.tokens);
    for (auto& charge : capped.charges)
        if (charge.spec->unit == config::Unit::cost) charge.amount = capped.reserved;
    return capped;
}

}  // namespace tokengate::server::pipeline
