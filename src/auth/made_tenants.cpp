#include "tokengate/auth/made_tenants.hpp"

#include <algorithm>

namespace tokengate::auth {

const config::TenantConfig* MadeTenants::get(std::string_view id, std::string_view tier) {
    std::string key;
    key.reserve(id.size() + 1 + tier.size());
    key.append(id).append(1, '\0').append(tier);
    std::lock_guard lock(mutex_);
    if (auto it = made_.find(key); it != made_.end()) return it->second.get();
    auto named = std::find_if(config_.tiers.begin(), config_.tiers.end(),
                              [&](const config::TierConfig& t) { return t.name == tier; });
    if (named == config_.tiers.end() || made_.size() >= k_max) return nullptr;
    auto tenant = std::make_unique<config::TenantConfig>();
    tenant->id = std::string(id);
    tenant->tier = named->name;
    tenant->priority = named->priority;
    tenant->limits = named->limits;  // as a configured tenant of the tier has them, overrides aside
    return made_.emplace(std::move(key), std::move(tenant)).first->second.get();
}

}  // namespace tokengate::auth
