#include "estimate.hpp"

#include <algorithm>

namespace tokengate::server::pipeline {

namespace {

std::uint64_t saturating_product(std::uint64_t a, std::uint64_t b) {
    unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
    return p > UINT64_MAX ? UINT64_MAX : static_cast<std::uint64_t>(p);
}

}  // namespace

cost::OutputHistory::Settings history_settings(const config::LearnedEstimate& learned) {
    return {learned.window, learned.quantile, learned.min_samples, learned.max_series};
}

OutputReservation estimate_output(const config::CostConfig& cost, const cost::OutputHistory& history,
                                  std::string_view tenant, const cost::RequestSummary& summary) {
    OutputReservation r;
    r.per_sequence = summary.output_per_sequence;
    r.tokens = summary.max_output_tokens;
    if (cost.output_estimate != config::OutputEstimate::learned) {
        r.why = "declared: cost.output_estimate is declared";
        return r;
    }
    if (summary.sequences == 0) {
        r.why = "declared: this request generates nothing";
        return r;
    }
    auto settings = history_settings(cost.learned);
    auto known = history.estimate(tenant, summary.model, settings);
    r.samples = known.samples;
    if (!known.tokens) {
        r.why = "declared: " + std::to_string(known.samples) + " of the " + std::to_string(settings.min_samples) +
                " settlements needed for this tenant and model";
        return r;
    }
    r.quantile = *known.tokens;
    auto q = "p" + std::to_string(static_cast<int>(settings.quantile * 100 + 0.5));
    if (r.quantile >= summary.output_per_sequence) {
        r.why = "declared: the " + q + " of the last " + std::to_string(known.samples) + " settlements (" +
                std::to_string(r.quantile) + " tokens a sequence) is not below the declared " +
                std::to_string(summary.output_per_sequence);
        return r;
    }
    r.learned = true;
    r.per_sequence = r.quantile;
    r.tokens = saturating_product(summary.sequences, r.per_sequence);
    r.why = "learned: the " + q + " of the last " + std::to_string(known.samples) + " settlements is " +
            std::to_string(r.quantile) + " tokens a sequence, below the declared " +
            std::to_string(summary.output_per_sequence);
    return r;
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
