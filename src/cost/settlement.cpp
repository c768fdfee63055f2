#include "tokengate/cost/settlement.hpp"

#include <algorithm>

#include "tokengate/core/saturate.hpp"

namespace tokengate::cost {

void ResponseUsage::start(std::string_view content_type, bool has_content_length, bool usage_injected,
                          const Tokenizer* tokenizer) {
    if (content_type.rfind("text/event-stream", 0) == 0)
        sse_.emplace(usage_injected && !has_content_length, std::size_t{1} << 20, tokenizer);
    else if (content_type.find("json") != std::string_view::npos) json_.emplace(std::size_t{8} << 20, tokenizer);
}

std::string_view ResponseUsage::feed(std::string_view data, bool last) {
    if (sse_) return sse_->feed(data, last);
    if (json_) json_->feed(data);
    return data;
}

Usage ResponseUsage::usage(bool completed) const {
    if (sse_) return sse_->usage();
    if (json_ && completed) return json_->finish();
    return {};
}

UsageBounds usage_bounds(const RequestSummary& request, std::uint64_t output_bound) {
    UsageBounds b;
    auto estimate_room = request.input_tokens > UINT64_MAX / 4 ? UINT64_MAX : 4 * request.input_tokens;
    b.prompt = core::saturating_add(std::max(request.body_bytes, estimate_room), 64);
    b.completion = output_bound;
    return b;
}

SettledCost settled_cost(const config::CostConfig& config, double cost_factor, const RequestSummary& request,
                         double reserved, const ResponseUsage& observed, const ExchangeEnd& end,
                         const UsageBounds& bounds) {
    SettledCost out;
    if (end.upstream_failed) return out;  // nothing was generated: refund every cost unit
    auto usage = observed.usage(end.completed);
    if (usage.known) {
        out.prompt_tokens = usage.prompt_known ? usage.prompt_tokens : request.input_tokens;
        out.completion_tokens = usage.completion_tokens;
        out.cached_tokens = usage.prompt_known ? usage.cached_tokens : 0;
        out.usage_reported = true;
        // What no request could have used is a broken or hostile report: clamped, and said.
        out.clamped = out.prompt_tokens > bounds.prompt || out.completion_tokens > bounds.completion;
        out.prompt_tokens = std::min(out.prompt_tokens, bounds.prompt);
        out.completion_tokens = std::min(out.completion_tokens, bounds.completion);
        out.cached_tokens = std::min(out.cached_tokens, out.prompt_tokens);
    } else if (observed.is_stream() || !end.completed) {
        // No usage (an older TGI, or a stream cut short): the input and what was sent.
        out.prompt_tokens = request.input_tokens;
        // The gateway's own count of what it relayed, not a report: never clamped (a live
        // budget charged it as it went).
        out.completion_tokens = observed.streamed_tokens();
    } else {
        out.kept_reservation = end.status >= 200 && end.status < 300;
        out.cost = out.kept_reservation ? reserved : 0;  // an error generated nothing
        return out;
    }
    out.cost =
        request_cost(config, cost_factor, out.prompt_tokens, out.completion_tokens, request.stream, out.cached_tokens);
    return out;
}

config::Amounts settled_amounts(const SettledCost& settled, const config::Amounts& reserved,
                                const config::ModelPrice* price) {
    if (settled.kept_reservation) return reserved;
    config::Amounts a;
    a.cost = settled.cost;
    a.tokens = static_cast<double>(settled.prompt_tokens) + static_cast<double>(settled.completion_tokens);
    a.usd = usd_cost(price, settled.prompt_tokens, settled.cached_tokens, settled.completion_tokens);
    return a;
}

}  // namespace tokengate::cost
