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
    // No budget binds below 2^62 tokens: then nothing stops the stream.
    constexpr std::uint64_t k_unbounded = 1ull << 62;
    auto fits = cost::largest_output_within(cost, admitted.cost_factor, summary.input_tokens, summary.stream,
                                            admitted.reserved.cost + remaining, 0, k_unbounded);
    if (fits == k_unbounded) return std::nullopt;
    return fits.value_or(0);
}

}  // namespace tokengate::server::pipeline
