#include "shed.hpp"

#include <algorithm>

namespace tokengate::server::pipeline {

namespace {

std::optional<double> least(const LoadSeen& load, std::optional<double> proxy::UpstreamLoad::Signals::*signal) {
    std::optional<double> out;
    for (const auto& u : load.upstreams)
        if (auto v = u.*signal) out = std::min(out.value_or(*v), *v);
    return out;
}

}  // namespace

std::optional<double> LoadSeen::least_queue() const { return least(*this, &proxy::UpstreamLoad::Signals::queue); }
std::optional<double> LoadSeen::least_kv_cache() const { return least(*this, &proxy::UpstreamLoad::Signals::kv_cache); }

LoadSeen read_load(const Runtime& rt, std::size_t route, core::Nanos now) {
    LoadSeen out;
    for (const auto& u : rt.config->routes[route].upstreams) {
        if (!rt.health[u.upstream]->available(now)) continue;
        const auto& load = *rt.load[u.upstream];
        if (!load.live()) return {};
        auto s = load.signals();
        // The queue as it will be: the scrape's, plus what was sent since (least_loaded's
        // estimate). Without it a flood fills the GPU between two scrapes.
        if (s.queue) *s.queue += static_cast<double>(load.sent_since());
        out.upstreams.push_back(s);
    }
    return out;
}

Result<std::monostate> shed(const config::GatewayConfig& cfg, const Admitted& a, const LoadSeen& load) {
    const auto& tenant = *a.principal.tenant;
    // None seen (not live, or none available: the exchange answers 502): nobody is shed.
    if (!cfg.overload || tenant.priority != config::Priority::sheddable || load.upstreams.empty()) return {};
    const auto& o = *cfg.overload;
    auto past = [&](const proxy::UpstreamLoad::Signals& s) {
        return (o.queue && s.queue && *s.queue >= *o.queue) || (o.kv_cache && s.kv_cache && *s.kv_cache >= *o.kv_cache);
    };
    if (!std::all_of(load.upstreams.begin(), load.upstreams.end(), past)) return {};  // one with room
    return Rejection{http::status::service_unavailable,
                     "server_error",
                     "server_overloaded",
                     "The model servers are overloaded; requests of tier '" + tenant.tier +
                         "' are shed until they recover. Retry shortly.",
                     {{"Retry-After", "1"}},
                     {},
                     {}};
}

}  // namespace tokengate::server::pipeline
