#include "budget.hpp"

#include <algorithm>
#include <limits>

namespace tokengate::server::pipeline {

std::optional<std::uint64_t> stream_budget(const config::CostConfig& cost, const Admitted& admitted,
                                           const limiter::Decision& decision) {
    const auto& summary = admitted.summary;
    if (!cost.stop_at_budget || !summary.stream || summary.sequences == 0) return std::nullopt;
    double remaining = std::numeric_limits<double>::infinity();
    for (const auto& s : decision.statuses) {
        bool rate_bucket =
            s.spec->algorithm == config::Algorithm::token_bucket ||
            (s.spec->algorithm == config::Algorithm::leaky_bucket && s.spec->mode == config::LeakyMode::police);
        if (s.charged && s.spec->enforce && s.spec->unit == config::Unit::cost && rate_bucket)
            remaining = std::min(remaining, std::max(0.0, s.verdict.remaining));
    }
    if (remaining == std::numeric_limits<double>::infinity()) return std::nullopt;
    double affordable = admitted.reserved + remaining;
    auto price = [&](std::uint64_t output) {
        return cost::request_cost(cost, admitted.cost_factor, summary.input_tokens, output, summary.stream);
    };
    // The most output that costs no more than that, by bisection (the cost grows with it).
    std::uint64_t fits = 0, too_many = 1;
    while (price(too_many) <= affordable && too_many < (1ull << 62)) too_many *= 2;
    if (price(too_many) <= affordable) return std::nullopt;  // no budget binds
    while (too_many - fits > 1) {
        auto mid = fits + (too_many - fits) / 2;
        (price(mid) <= affordable ? fits : too_many) = mid;
    }
    return fits;
}

}  // namespace tokengate::server::pipeline
