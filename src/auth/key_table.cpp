#include "tokengate/auth/key_table.hpp"

#include "tokengate/core/sha256.hpp"

namespace tokengate::auth {

std::string_view extract_key(std::string_view authorization, std::string_view x_api_key) {
    constexpr std::string_view k_bearer = "bearer ";
    if (authorization.size() > k_bearer.size()) {
        bool is_bearer = true;
        for (std::size_t i = 0; i < k_bearer.size(); ++i) {
            char c = authorization[i];
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
            if (c != k_bearer[i]) is_bearer = false;
        }
        if (is_bearer) {
            auto key = authorization.substr(k_bearer.size());
            while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
            while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
            if (!key.empty()) return key;
        }
    }
    return x_api_key;
}

KeyTable::KeyTable(const config::GatewayConfig& config) {
    for (const auto& t : config.tenants) {
        tenant_by_id_.emplace(t.id, &t);
        for (const auto& digest : t.key_digests) tenant_by_digest_.emplace(digest, &t);
    }
}

const config::TenantConfig* KeyTable::tenant(std::string_view id) const {
    auto it = tenant_by_id_.find(id);
    return it == tenant_by_id_.end() ? nullptr : it->second;
}

std::optional<Principal> KeyTable::authenticate(std::string_view key) const {
    if (key.empty()) return std::nullopt;
    return authenticate(core::sha256(key));
}

std::optional<Principal> KeyTable::authenticate(const core::Sha256Digest& digest) const {
    std::string_view digest_view(reinterpret_cast<const char*>(digest.data()), digest.size());
    auto it = tenant_by_digest_.find(digest_view);
    if (it == tenant_by_digest_.end() || !core::constant_time_equal(it->first, digest_view)) return std::nullopt;
    return Principal{it->second, core::to_hex(digest.data(), 6), {}};
}

}  // namespace tokengate::auth
