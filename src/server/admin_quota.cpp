#include "admin_quota.hpp"

#include <algorithm>
#include <cmath>

#include "pipeline/limit.hpp"
#include "services.hpp"
#include "tokengate/classify/classify.hpp"
#include "tokengate/core/calendar.hpp"

namespace tokengate::server {

namespace http = boost::beast::http;
using nlohmann::json;

namespace {

constexpr double k_max_top_up = 1e15;  // the largest limit a config may set

json quota_json(const config::LimitSpec& spec, const limiter::QuotaState& state, const config::GatewayConfig& config) {
    return {{"name", spec.name},
            {"used", state.used},
            {"limit", spec.capacity + state.added},
            {"configured_limit", spec.capacity},
            {"added", state.added},
            {"unit", config::to_string(spec.unit)},
            {"period", core::to_string(spec.period)},
            {"timezone", config.quota_timezone},
            {"resets_at", core::rfc3339(state.window.end)},
            {"enforce", spec.enforce}};
}

}  // namespace

json quotas_json(const limiter::Decision& state, const config::GatewayConfig& config) {
    json out = json::array();
    for (const auto& s : state.statuses) {
        if (s.spec->algorithm != config::Algorithm::quota) continue;
        // A preview charges 0: what remains is the allowance less what was used.
        double allowance = s.spec->capacity + s.quota_added;
        out.push_back(
            quota_json(*s.spec, {std::max(0.0, allowance - s.verdict.remaining), s.quota_added, s.window}, config));
    }
    return out;
}

boost::asio::awaitable<AdminResponse> change_quota(Services& services, const config::GatewayConfig& config,
                                                   const config::TenantConfig& tenant, std::string_view name,
                                                   std::string_view body) {
    auto charges = classify::tenant_charges(tenant);
    auto charge = std::find_if(charges.begin(), charges.end(), [&](const limiter::Charge& c) {
        return c.spec->name == name && c.spec->algorithm == config::Algorithm::quota;
    });
    if (charge == charges.end())
        co_return admin_error(http::status::not_found, "not_found",
                              "Tenant '" + tenant.id + "' has no quota named '" + std::string(name) + "'.");
    auto request = json::parse(body, nullptr, false);
    bool shaped = request.is_object() && !request.empty() &&
                  std::all_of(request.items().begin(), request.items().end(),
                              [](const auto& kv) { return kv.key() == "add" || kv.key() == "reset"; });
    double add = 0;
    bool reset = false;
    if (shaped && request.contains("add")) {
        const auto& a = request["add"];
        shaped = a.is_number() && a.get<double>() > 0 && a.get<double>() <= k_max_top_up;
        if (shaped) add = a.get<double>();
    }
    if (shaped && request.contains("reset")) {
        shaped = request["reset"].is_boolean();
        if (shaped) reset = request["reset"].get<bool>();
    }
    if (!shaped || (add == 0 && !reset))
        co_return admin_error(http::status::bad_request, "invalid_body",
                              "Send {\"add\": N} (0 < N <= 1e15, in the quota's unit) to top up the current window, "
                              "or {\"reset\": true} to start it over.");
    if (add > 0 && !reset) {
        // SPEC §17: no top-up may take the window's allowance past what the state file keeps.
        auto now = co_await pipeline::preview(*services.store, {&*charge, 1});
        if (!now.unavailable && !now.statuses.empty() && now.statuses[0].quota_added + add > core::k_max_counter)
            co_return admin_error(http::status::bad_request, "invalid_body",
                                  "This top-up would take the quota's additions past 1e18, the most a counter keeps.");
    }
    auto state = co_await services.store->quota(*charge, add, reset);
    if (!state)
        co_return admin_error(http::status::service_unavailable, "rate_limiter_unavailable",
                              "The shared store (Redis) did not answer; the change may not have been made.");
    const auto& spec = *charge->spec;
    services.metrics.quota_used.set({tenant.id, spec.name}, state->used);
    services.metrics.quota_limit.set({tenant.id, spec.name}, spec.capacity + state->added);
    co_return json_response(http::status::ok, {{"tenant", tenant.id}, {"quota", quota_json(spec, *state, config)}});
}

}  // namespace tokengate::server
