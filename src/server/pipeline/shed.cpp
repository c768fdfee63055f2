#include "shed.hpp"

#include <algorithm>

namespace tokengate::server::pipeline {

namespace {

void keep_least(std::optional<double>& least, double v) { least = std::min(least.value_or(v), v); }

}  // namespace

ShedCheck shed(const Runtime& rt, const Admitted& a, core::Nanos now) {
    const auto& cfg = *rt.config;
    ShedCheck out;
    bool any = false, past_all = true;
    for (const auto& u : cfg.routes[a.route].upstreams) {
        if (!rt.health[u.upstream]->available(now)) continue;
        const auto& load = *rt.load[u.upstream];
        if (!load.live()) return {};
        any = true;
        auto s = load.signals();
        // The queue as it will be: the scrape's, plus what was sent since (least_loaded's
        // estimate). Without it a flood fills the GPU between two scrapes.
        std::optional<double> queue;
        if (s.queue) keep_least(out.queue, *(queue = *s.queue + static_cast<double>(load.sent_since())));
        if (s.kv_cache) keep_least(out.kv_cache, *s.kv_cache);
        if (!cfg.overload) continue;
        const auto& o = *cfg.overload;
        past_all &=
            (o.queue && queue && *queue >= *o.queue) || (o.kv_cache && s.kv_cache && *s.kv_cache >= *o.kv_cache);
    }
    const auto& tenant = cfg.tenants[a.principal.tenant];
    // None available: the exchange answers 502. One with room: nobody is shed.
    if (!cfg.overload || tenant.priority != config::Priority::sheddable || !any || !past_all) return out;
    out.refused = Rejection{http::status::service_unavailable,
                            "server_error",
                            "server_overloaded",
                            "The model servers are overloaded; requests of tier '" + tenant.tier +
                                "' are shed until they recover. Retry shortly.",
                            {{"Retry-After", "1"}},
                            {},
                            {}};
    return out;
}

}  // namespace tokengate::server::pipeline
