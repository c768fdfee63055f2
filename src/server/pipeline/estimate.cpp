#include "estimate.hpp"

#include <algorithm>

#include "tokengate/core/saturate.hpp"

namespace tokengate::server::pipeline {

cost::OutputHistory::Settings history_settings(const config::LearnedEstimate& learned) {
    return {learned.window, learned.quantile, learned.min_samples, learned.max_series};
}

OutputReservation estimate_output(const config::CostConfig& cost, const cost::OutputHistory& history,
                                  std::string_view tenant, const cost::RequestSummary& summary) {
    using Source = OutputReservation::Source;
    OutputReservation r;
    r.declared = r.per_sequence = summary.output_per_sequence;
    r.tokens = summary.max_output_tokens;
    if (cost.output_estimate != config::OutputEstimate::learned) return r;
    if (summary.sequences == 0) {
        r.source = Source::generates_nothing;
        return r;
    }
    auto known = history.estimate(tenant, summary.model, history_settings(cost.learned));
    r.samples = known.samples;
    if (!known.tokens) {
        r.source = Source::too_few_samples;
        return r;
    }
    r.quantile = *known.tokens;
    if (r.quantile >= summary.output_per_sequence) {
        r.source = Source::not_below;
        return r;
    }
    r.source = Source::learned;
    r.learned = true;
    r.per_sequence = r.quantile;
    r.tokens = core::saturating_product(summary.sequences, r.per_sequence);
    return r;
}

std::string describe(const OutputReservation& r, const config::CostConfig& cost) {
    using Source = OutputReservation::Source;
    auto q = "p" + std::to_string(static_cast<int>(cost.learned.quantile * 100 + 0.5));
    auto last = "the " + q + " of the last " + std::to_string(r.samples) + " settlements (" +
                std::to_string(r.quantile) + " tokens a sequence)";
    std::string why;
    switch (r.source) {
        case Source::declared_setting: why = "declared: cost.output_estimate is declared"; break;
        case Source::generates_nothing: why = "declared: this request generates nothing"; break;
        case Source::too_few_samples:
            why = "declared: " + std::to_string(r.samples) + " of the " + std::to_string(cost.learned.min_samples) +
                  " settlements needed for this tenant and model";
            break;
        case Source::not_below:
            why = "declared: " + last + " is not below the declared " + std::to_string(r.declared);
            break;
        case Source::learned: why = "learned: " + last + " is below the declared " + std::to_string(r.declared); break;
    }
    if (r.capped) why += "; capped to " + std::to_string(r.per_sequence) + " tokens a sequence to fit the budget";
    return why;
}

void learn(const config::CostConfig& cost, cost::OutputHistory& history, std::string_view tenant,
           const cost::RequestSummary& summary, unsigned status, const cost::SettledCost& settled) {
    if (cost.output_estimate != config::OutputEstimate::learned) return;
    if (!settled.usage_reported || status < 200 || status >= 300 || summary.sequences == 0) return;
    // Per sequence, rounded up: n sequences share one usage count.
    auto per_sequence = (settled.completion_tokens + summary.sequences - 1) / summary.sequences;
    history.record(tenant, summary.model, per_sequence, history_settings(cost.learned));
}

}  // namespace tokengate::server::pipeline
