#include "shed.hpp"

namespace tokengate::server::pipeline {

std::optional<Rejection> shed(const Runtime& rt, const Admitted& a, core::Nanos now) {
    const auto& cfg = *rt.config;
    const auto& tenant = cfg.tenants[a.principal.tenant];
    if (!cfg.overload || tenant.priority != config::Priority::sheddable) return std::nullopt;
    const auto& o = *cfg.overload;
    bool any = false;
    for (const auto& u : cfg.routes[a.route].upstreams) {
        if (!rt.health[u.upstream]->available(now)) continue;
        const auto& load = *rt.load[u.upstream];
        if (!load.live()) return std::nullopt;
        auto s = load.signals();
        // The queue as it will be: the scrape's, plus what was sent since (least_loaded's
        // estimate). Without it a flood fills the GPU between two scrapes.
        double queue = s.queue ? *s.queue + static_cast<double>(load.sent_since()) : 0;
        bool past =
            (o.queue && s.queue && queue >= *o.queue) || (o.kv_cache && s.kv_cache && *s.kv_cache >= *o.kv_cache);
        if (!past) return std::nullopt;  // one with room: nobody is shed
        any = true;
    }
    if (!any) return std::nullopt;  // none available: the exchange answers 502
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
