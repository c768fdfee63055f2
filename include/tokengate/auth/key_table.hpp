#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tokengate/config/config.hpp"
#include "tokengate/core/sha256.hpp"

namespace tokengate::auth {

struct Principal {
    /// The config's tenant, or one made at run time (SPEC §21); either lives as long as the
    /// Runtime the request holds.
    const config::TenantConfig* tenant = nullptr;
    std::string key_id;   // first 12 hex digits of the key's SHA-256: safe to log
    std::string subject;  // the end user (SPEC §21): a JWT's `sub`; empty: none named
};

/// The API key from `Authorization: Bearer <key>`, else from `x-api-key`; empty if neither.
std::string_view extract_key(std::string_view authorization, std::string_view x_api_key);

/// Maps key digests to tenants. Only digests are kept; lookups hash the presented key and
/// confirm the match with a constant-time comparison.
class KeyTable {
public:
    explicit KeyTable(const config::GatewayConfig& config);
    std::optional<Principal> authenticate(std::string_view key) const;
    /// The same for a key already hashed (a caller that asks elsewhere next hashes once).
    std::optional<Principal> authenticate(const core::Sha256Digest& digest) const;
    /// The config's tenant with this id (a JWT's or a run-time key's), or nullptr.
    const config::TenantConfig* tenant(std::string_view id) const;

private:
    std::unordered_map<std::string, const config::TenantConfig*, core::DigestHash, std::equal_to<>> tenant_by_digest_;
    struct IdHash {
        using is_transparent = void;
        std::size_t operator()(std::string_view id) const { return std::hash<std::string_view>{}(id); }
    };
    std::unordered_map<std::string, const config::TenantConfig*, IdHash, std::equal_to<>> tenant_by_id_;
};

}  // namespace tokengate::auth
