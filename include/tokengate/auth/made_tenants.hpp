#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tokengate/config/config.hpp"

namespace tokengate::auth {

/// Tenants that are not in the config (SPEC §21): made by the admin API, or named by a JWT
/// whose tier claim names a tier. Each is its tier's limits and priority under its own id,
/// built once per config on first use and kept as long as the config, so a request's
/// Principal may point at it while a reload or a DELETE goes on.
class MadeTenants {
public:
    /// Past this many (id, tier) pairs a config refuses more: an issuer minting a new tenant a
    /// request must not grow the gateway without bound.
    static constexpr std::size_t k_max = 100'000;

    explicit MadeTenants(const config::GatewayConfig& config) : config_(config) {}

    /// The tenant `id` on `tier`; nullptr if the config has no such tier, or k_max are made.
    const config::TenantConfig* get(std::string_view id, std::string_view tier);

private:
    const config::GatewayConfig& config_;
    std::mutex mutex_;
    std::unordered_map<std::string, std::unique_ptr<const config::TenantConfig>> made_;  // by id '\0' tier
};

}  // namespace tokengate::auth
