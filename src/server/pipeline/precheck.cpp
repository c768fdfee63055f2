#include "precheck.hpp"

#include <algorithm>
#include <cmath>

#include "identify.hpp"
#include "limit.hpp"
#include "tokengate/classify/classify.hpp"
#include "tokengate/limiter/headers.hpp"

namespace tokengate::server::pipeline {

std::uint64_t count_limit(const config::CostConfig& cost, double cost_factor, std::span<const limiter::Charge> charges,
                          const limiter::Decision& status) {
    double most = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < charges.size(); ++i) {
        const auto& spec = *charges[i].spec;
        bool quota = spec.algorithm == config::Algorithm::quota;
        if (!spec.enforce || !(quota || limiter::is_rate_bucket(spec))) continue;
        double room = spec.capacity + (quota && i < status.statuses.size() ? status.statuses[i].quota_added : 0);
        // Input tokens past which the request alone is more than the limit can hold (a token
        // of rounding to spare).
        if (spec.unit == config::Unit::tokens) most = std::min(most, room + 1);
        else if (spec.unit == config::Unit::cost)
            most = std::min(most, room * cost.input_per / cost_factor + cost.input_per);
    }
    return most < 1.8e19 ? static_cast<std::uint64_t>(std::ceil(most)) : UINT64_MAX;
}

net::awaitable<Result<std::uint64_t>> precheck(store::Store& store, const Runtime& runtime, const Incoming& in,
                                               const core::Clock& clock, std::optional<auth::Principal>& who) {
    constexpr std::uint64_t k_no_limit = UINT64_MAX;
    const auto& cfg = *runtime.config;
    if (!in.target.ok) co_return k_no_limit;
    auto identified = identify(runtime, in.key, in.unix_now);
    if (!std::holds_alternative<auth::Principal>(identified)) co_return k_no_limit;  // admit refuses it
    who = std::move(std::get<auth::Principal>(identified));
    auto model = cost::sniff_model(in.body);
    if (!model) co_return k_no_limit;
    auto route = classify::match_route(cfg, in.target.path, *model);
    if (!route) co_return k_no_limit;
    const auto* m = cost::find_model(cfg.models, *model);
    double factor = m ? m->cost_factor : 1.0;
    // The least any request costs: no input, no output (the cost formula's minimums).
    auto least = cost::request_amounts(cfg.cost, factor, nullptr, 0, 0, false);
    // The end user is known here only from a token or a header: else its limits wait for admit.
    std::optional<std::string_view> subject;
    if (!who->subject.empty()) subject = who->subject;
    else if (!in.subject_header.empty()) subject = in.subject_header;
    else if (cfg.auth.subject.body_field.empty()) subject = std::string_view();
    auto charges =
        classify::applicable_limits(cfg, {who->tenant, in.client_ip, *route, *model, least, {}, {}, subject});
    auto status = co_await store.peek(charges);
    if (status.unavailable) co_return k_no_limit;
    if (!status.allowed) {
        bool anthropic = cost::is_anthropic(cost::endpoint_for_path(in.target.path));
        co_return refused(status, charges,
                          limiter::rate_limit_headers<limiter::HeaderFields>(status, clock.unix_now(), anthropic));
    }
    co_return count_limit(cfg.cost, factor, charges, status);
}

}  // namespace tokengate::server::pipeline
