#pragma once

// Stage 1b, estimate (inside admit): how much output to reserve, and, once the exchange has
// settled, what the request really generated (SPEC §12, cost.output_estimate: learned).

#include <cstdint>
#include <string>
#include <string_view>

#include "tokengate/config/config.hpp"
#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/output_history.hpp"
#include "tokengate/cost/settlement.hpp"

namespace tokengate::server::pipeline {

struct OutputReservation {
    /// Why this much: numbers only on the data plane; describe() words them for explain.
    enum class Source { declared_setting, generates_nothing, too_few_samples, not_below, learned };
    Source source = Source::declared_setting;
    bool learned = false;            // the learned quantile replaced the declared maximum
    bool capped = false;             // lowered to fit the budget (cost.cap_output)
    std::uint64_t lowered = 0;       // SPEC §17: the bound lowered beside answers in flight (0: not)
    std::uint64_t declared = 0;      // what the request declared a sequence (or its default)
    std::uint64_t per_sequence = 0;  // the output tokens reserved for each sequence
    std::uint64_t tokens = 0;        // for all sequences, saturated
    std::uint32_t samples = 0;       // settlements known for this tenant and model
    std::uint64_t quantile = 0;      // their quantile, when there are enough

    /// SPEC §17: the output bound per sequence written upstream: the declared output, or what
    /// cap_output or the answer bound lowered it to. A learned reservation may be smaller;
    /// settlement charges the rest.
    std::uint64_t bound() const { return capped ? per_sequence : lowered ? lowered : declared; }
    bool bound_lowered() const { return capped || lowered; }
};

/// The reason, in words, for /admin/explain.
std::string describe(const OutputReservation& r, const config::CostConfig& cost);

cost::OutputHistory::Settings history_settings(const config::LearnedEstimate& learned);

/// The declared maximum, or with `learned` the smaller of it and the tenant's quantile for
/// the model once min_samples settlements are known.
OutputReservation estimate_output(const config::CostConfig& cost, const cost::OutputHistory& history,
                                  std::string_view tenant, const cost::RequestSummary& summary);

/// Teaches the history what one settled request generated per sequence: only counts the
/// upstream reported, for a complete 2xx answer of a request that generates.
void learn(const config::CostConfig& cost, cost::OutputHistory& history, std::string_view tenant,
           const cost::RequestSummary& summary, unsigned status, const cost::SettledCost& settled);

}  // namespace tokengate::server::pipeline
