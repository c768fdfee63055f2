#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tokengate/config/config.hpp"
#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/usage.hpp"

namespace tokengate::cost {

/// Watches one upstream response for its usage, chosen by its head: an SSE stream through
/// SseUsageFilter, a JSON body through JsonUsageReader, anything else not at all.
class ResponseUsage {
public:
    /// `usage_injected`: the gateway asked for a stream's usage on the client's behalf, so the
    /// usage chunk is hidden (only when the body may change size: no Content-Length).
    /// `tokenizer` counts text the upstream sends without its count (null: the heuristic).
    void start(std::string_view content_type, bool has_content_length, bool usage_injected,
               const Tokenizer* tokenizer = nullptr);
    /// The bytes to forward (see SseUsageFilter::feed).
    std::string_view feed(std::string_view data, bool last);
    bool is_stream() const { return sse_.has_value(); }
    /// What the upstream reported; a JSON body's only once it was read whole.
    Usage usage(bool completed) const;
    std::uint64_t streamed_tokens() const { return sse_ ? sse_->streamed_tokens() : 0; }
    /// stop_at_budget, for a stream (see SseUsageFilter::pause_after); a JSON body is not stopped.
    void pause_after(std::uint64_t tokens) {
        if (sse_) sse_->pause_after(tokens);
    }
    bool paused() const { return sse_ && sse_->paused(); }
    std::string_view resume(std::uint64_t tokens) { return sse_ ? sse_->resume(tokens) : std::string_view(); }
    void stop_now() {
        if (sse_) sse_->stop_now();
    }
    bool stopped() const { return sse_ && sse_->stopped(); }
    std::string final_events(bool client_wants_usage, std::uint64_t prompt_tokens) const {
        return sse_ ? sse_->final_events(client_wants_usage, prompt_tokens) : std::string();
    }

private:
    std::optional<SseUsageFilter> sse_;
    std::optional<JsonUsageReader> json_;
};

/// How an exchange ended, as far as settlement cares.
struct ExchangeEnd {
    bool upstream_failed = false;  // refused, reset or timed out before any response
    bool completed = false;        // the whole response reached the client
    unsigned status = 0;           // the upstream's status
};

struct SettledCost {
    double cost = 0;
    std::uint64_t prompt_tokens = 0;
    std::uint64_t completion_tokens = 0;
    std::uint64_t cached_tokens = 0;  // of the prompt, as the upstream reported them
    bool usage_reported = false;      // the counts are the upstream's own, not estimates
    bool kept_reservation = false;    // a complete answer without usage: what was reserved stands
    bool clamped = false;             // the upstream reported more than the request could have used
};

/// What a request could have used (SPEC §17): input, the larger of its body's bytes and 4 × the
/// input estimate, plus 64; output, its bound × sequences.
struct UsageBounds {
    std::uint64_t prompt = UINT64_MAX;
    std::uint64_t completion = UINT64_MAX;
};
UsageBounds usage_bounds(const RequestSummary& request, std::uint64_t output_bound);

/// SPEC §5 and §10's settlement rule: an upstream that failed before any response refunds
/// everything (cost 0); the upstream's usage prices the request when it came; without usage, a stream or a response cut
/// short is charged its input and the text actually streamed; a complete non-2xx response
/// generated nothing (0); any other complete response keeps its reservation.
/// Reported counts are clamped to `bounds`.
SettledCost settled_cost(const config::CostConfig& config, double cost_factor, const RequestSummary& request,
                         double reserved, const ResponseUsage& observed, const ExchangeEnd& end,
                         const UsageBounds& bounds = {});

/// The settled exchange in every unit a limit counts (SPEC §14): the reservation where it was
/// kept, else the settled cost, the tokens and their price.
config::Amounts settled_amounts(const SettledCost& settled, const config::Amounts& reserved,
                                const config::ModelPrice* price);

}  // namespace tokengate::cost
