#pragma once

// SPEC §14's admin API for quotas: where each stands (GET /admin/tenants/{id}), a top-up or a
// reset (POST /admin/tenants/{id}/quotas/{name}).

#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include <string_view>

#include "admin_http.hpp"
#include "tokengate/config/config.hpp"
#include "tokengate/limiter/decision.hpp"

namespace tokengate::server {

struct Services;

/// A tenant's quotas from a preview of its limits: used, limit (top-ups included), unit,
/// period and resets_at (RFC 3339), in the order the config lists them.
nlohmann::json quotas_json(const limiter::Decision& state, const config::GatewayConfig& config);

/// POST /admin/tenants/{id}/quotas/{name} with {"add": N} and/or {"reset": true}.
boost::asio::awaitable<AdminResponse> change_quota(Services& services, const config::GatewayConfig& config,
                                                   const config::TenantConfig& tenant, std::string_view name,
                                                   std::string_view body);

}  // namespace tokengate::server
