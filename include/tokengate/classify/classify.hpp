#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokengate/config/charge.hpp"
#include "tokengate/config/config.hpp"

namespace tokengate::classify {

/// The first route whose path (exact, or prefix) and model patterns match.
std::optional<std::size_t> match_route(const config::GatewayConfig& config, std::string_view path,
                                       std::string_view model);

struct RequestFacts {
    const config::TenantConfig* tenant = nullptr;  // never null for applicable_limits
    std::string_view client_ip;
    std::size_t route = 0;
    std::string_view model;
    config::Amounts reserved;                                // what the request reserves, in every unit
    std::string_view tenant_id;                              // filled in by applicable_limits from the config
    config::Priority priority = config::Priority::standard;  // likewise
    /// The end user (SPEC §21) for `per: subject` limits: "" is the tenant's "(none)"; nullopt:
    /// not known yet (precheck, before the body), and those limits are left out.
    std::optional<std::string_view> subject = std::string_view();
};

/// A `per: subject` bucket's subject: "<tenant>/<end user>", or "<tenant>/(none)".
std::string subject_of(std::string_view tenant, std::string_view end_user);

/// Every limit that applies to a request, at every level, as charges to decide on at once.
config::Charges applicable_limits(const config::GatewayConfig& config, const RequestFacts& facts);

/// A bucket's identity in every store: "<level>:<limit name>:<subject>" (the tenant id, the
/// client IP, the route path, or "*").
config::BucketKey bucket_key(config::Level level, std::string_view limit, std::string_view subject);

/// The tenant-level charges (amount 0) whose state GET /admin/tenants/{id} shows.
std::vector<config::Charge> tenant_charges(const config::TenantConfig& tenant);

/// Whether a limit with a `models:` filter applies to this model.
bool limit_applies(const config::LimitSpec& spec, std::string_view model);

}  // namespace tokengate::classify
