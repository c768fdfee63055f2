#include "answer_bound.hpp"

#include <algorithm>
#include <limits>

namespace tokengate::server::pipeline {

namespace {

// Built outside any coroutine; the refusal names the bucket the answers in flight hold.
Rejection held_by_answers_in_flight(const limiter::LimitStatus& status) {
    return {http::status::too_many_requests,
            "tokens",
            "rate_limit_exceeded",
            "Rate limit reached for " + std::string(config::to_string(status.level)) + " limit '" + status.spec->name +
                "': what is left of it is held by this tenant's answers in flight, which may still use their "
                "output bounds. Retry shortly.",
            {{"Retry-After", "1"}},
            config::to_string(status.level),
            status.spec->name};
}

}  // namespace

std::vector<std::size_t> charged_cost_buckets(const limiter::Decision& decision, std::size_t charges) {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < decision.statuses.size() && i < charges; ++i) {
        const auto& s = decision.statuses[i];
        if (s.charged && s.spec->enforce && s.level == config::Level::tenant && s.spec->unit == config::Unit::cost &&
            limiter::is_rate_bucket(*s.spec))
            out.push_back(i);
    }
    return out;
}

Result<limiter::Exposure::Hold> bound_answer(const config::CostConfig& cost, Admitted& admitted,
                                             const limiter::Decision& decision, limiter::Exposure& exposure) {
    if (!cost.stop_at_budget) return limiter::Exposure::Hold{};
    auto buckets = charged_cost_buckets(decision, admitted.charges.size());
    if (buckets.empty()) return limiter::Exposure::Hold{};
    std::vector<std::string> keys;
    std::vector<double> remaining;
    for (auto i : buckets) {
        keys.emplace_back(admitted.charges[i].key);
        remaining.push_back(decision.statuses[i].verdict.remaining);
    }
    const auto& summary = admitted.summary;
    auto& output = admitted.output;
    // Only a non-stream answer whose reservation is below its bound may take more than it paid.
    bool may_take_more = !summary.stream && summary.sequences > 0 && output.learned && !output.capped;
    auto price = [&](std::uint64_t output_tokens) {
        return cost::request_cost(cost, admitted.cost_factor, summary.input_tokens, output_tokens, summary.stream);
    };
    const double reserved = price(output.tokens);
    std::size_t tightest = buckets.front();
    bool refused = false;
    auto hold = exposure.hold_within(std::move(keys), remaining, [&](double free, std::size_t which) {
        tightest = buckets[which];
        // Whatever it is, a request whose own charge ate into the holds takes what they may need.
        if (free < 0) {
            refused = true;
            return 0.0;
        }
        if (!may_take_more) return 0.0;
        auto bound_tokens = summary.max_output_tokens;
        if (price(bound_tokens) - reserved <= free) return price(bound_tokens) - reserved;
        auto fits = cost::largest_output_within(cost, admitted.cost_factor, summary.input_tokens, summary.stream,
                                                reserved + free, output.tokens, bound_tokens);
        auto per_sequence = (fits ? *fits : output.tokens) / summary.sequences;
        auto least = std::min<std::uint64_t>(output.declared, std::max<std::uint64_t>(1, cost.min_output));
        if (per_sequence < least) {
            refused = true;
            return 0.0;
        }
        output.lowered = per_sequence;
        return price(per_sequence * summary.sequences) - reserved;
    });
    if (refused) return held_by_answers_in_flight(decision.statuses[tightest]);
    return hold;
}

}  // namespace tokengate::server::pipeline
