#include "tokengate/classify/classify.hpp"

#include <algorithm>

#include "tokengate/config/config.hpp"

namespace tokengate::classify {

using config::Level;

namespace {

bool any_glob(const std::vector<std::string>& patterns, std::string_view text) {
    for (const auto& p : patterns)
        if (config::glob_match(p, text)) return true;
    return false;
}

/// A `per: subject` bucket's subject, "<tenant>/<end user>" or "<tenant>/(none)", appended to
/// `out`: a std::string (subject_of) or a charge's inline key.
template <typename Text>
void append_subject(Text& out, std::string_view tenant, std::string_view end_user) {
    out.append(tenant).append("/").append(end_user.empty() ? std::string_view("(none)") : end_user);
}

void add_level(config::Charges& out, const std::vector<config::LimitSpec>& specs, Level level, std::string_view subject,
               const RequestFacts& facts) {
    for (const auto& spec : specs) {
        if (!limit_applies(spec, facts.model)) continue;
        if (spec.per_subject && !facts.subject) continue;
        config::Charge c;
        c.spec = &spec;
        c.level = level;
        c.key = bucket_key(level, spec.name, spec.per_subject ? std::string_view() : subject);
        if (spec.per_subject) append_subject(c.key, subject, *facts.subject);
        c.amount = facts.reserved.in(spec.unit);
        c.tenant = facts.tenant_id;
        c.priority = facts.priority;
        out.push_back(std::move(c));
    }
}

}  // namespace

config::BucketKey bucket_key(Level level, std::string_view limit, std::string_view subject) {
    config::BucketKey key(config::to_string(level));
    key.append(":").append(limit).append(":").append(subject);
    return key;
}

std::string subject_of(std::string_view tenant, std::string_view end_user) {
    std::string s;
    s.reserve(tenant.size() + 1 + std::max<std::size_t>(end_user.size(), 6));
    append_subject(s, tenant, end_user);
    return s;
}

std::vector<config::Charge> tenant_charges(const config::TenantConfig& tenant) {
    std::vector<config::Charge> charges;
    charges.reserve(tenant.limits.size());
    for (const auto& spec : tenant.limits)
        if (!spec.per_subject)  // one bucket per end user: no one bucket to show for the tenant
            charges.push_back({&spec,
                               Level::tenant,
                               bucket_key(Level::tenant, spec.name, tenant.id),
                               0,
                               tenant.id,
                               tenant.priority,
                               {}});
    return charges;
}

bool limit_applies(const config::LimitSpec& spec, std::string_view model) {
    return spec.models.empty() || any_glob(spec.models, model);
}

std::optional<std::size_t> match_route(const config::GatewayConfig& config, std::string_view path,
                                       std::string_view model) {
    for (std::size_t i = 0; i < config.routes.size(); ++i) {
        const auto& r = config.routes[i];
        bool path_ok = r.prefix ? path.substr(0, r.path.size()) == r.path : path == r.path;
        if (path_ok && (r.models.empty() || any_glob(r.models, model))) return i;
    }
    return std::nullopt;
}

config::Charges applicable_limits(const config::GatewayConfig& config, const RequestFacts& facts) {
    config::Charges out;
    const auto& tenant = *facts.tenant;
    out.reserve(tenant.limits.size() + config.ip_limits.size() + config.routes[facts.route].limits.size() +
                config.global_limits.size());
    RequestFacts with_tenant = facts;
    with_tenant.tenant_id = tenant.id;
    with_tenant.priority = tenant.priority;
    const auto& f = with_tenant;
    add_level(out, tenant.limits, Level::tenant, tenant.id, f);
    add_level(out, config.ip_limits, Level::ip, f.client_ip, f);
    add_level(out, config.routes[f.route].limits, Level::route, config.routes[f.route].path, f);
    add_level(out, config.global_limits, Level::global, "*", f);
    return out;
}

}  // namespace tokengate::classify
