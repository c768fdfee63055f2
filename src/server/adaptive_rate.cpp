#include "adaptive_rate.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <set>

#include "services.hpp"

namespace tokengate::server {

namespace {

using Follower = RateAdapter::Follower;

/// Every adaptive limit once (a tier's limit is copied into each of its tenants: they share
/// one rate), with the upstreams it follows.
std::vector<Follower> followers(const config::GatewayConfig& cfg) {
    std::vector<Follower> out;
    std::set<const std::atomic<double>*> seen;
    auto scraped_of = [&](const config::RouteConfig* only) {
        std::set<std::size_t> ups;
        for (const auto& route : cfg.routes)
            if (!only || only == &route)
                for (const auto& u : route.upstreams)
                    if (cfg.upstreams[u.upstream].metrics) ups.insert(u.upstream);
        return std::vector<std::size_t>(ups.begin(), ups.end());
    };
    auto add = [&](const std::vector<config::LimitSpec>& limits, const config::RouteConfig* route) {
        for (const auto& spec : limits) {
            if (!spec.adaptive || !seen.insert(spec.adaptive->rate_per_s.get()).second) continue;
            Follower f{&spec, scraped_of(route), 0};
            for (auto u : f.upstreams) {
                auto i = cfg.upstreams[u].metrics->interval;
                f.interval = f.interval ? std::min(f.interval, i) : i;
            }
            if (!f.upstreams.empty()) out.push_back(std::move(f));
        }
    };
    for (const auto& t : cfg.tenants) add(t.limits, nullptr);
    for (const auto& r : cfg.routes) add(r.limits, &r);
    add(cfg.ip_limits, nullptr);
    add(cfg.global_limits, nullptr);
    return out;
}

/// The sum of the queues, the largest KV cache, or the slowest p90 time to first byte, over the
/// upstreams whose signals are live; nullopt when none has it.
std::optional<double> signal_of(const Follower& f, const Runtime& rt, Services& services) {
    std::optional<double> out;
    for (auto u : f.upstreams) {
        const auto& load = *rt.load[u];
        if (!load.live()) continue;
        auto s = load.signals();
        switch (f.spec->adaptive->signal) {
            case config::LoadSignal::queue:
                if (s.queue) out = out.value_or(0) + *s.queue;
                break;
            case config::LoadSignal::kv_cache:
                if (s.kv_cache) out = std::max(out.value_or(0), *s.kv_cache);
                break;
            case config::LoadSignal::ttft: {
                auto latency = services.activity.first_byte_latency(rt.config->upstreams[u].name);
                if (latency.samples) out = std::max(out.value_or(0), latency.p90_s);
                break;
            }
        }
    }
    return out;
}

}  // namespace

void RateAdapter::tick(const Runtime& rt, Services& services, core::Nanos now) {
    if (built_for_ != rt.config) {  // a reload: new limits (each with its rate anew)
        built_for_ = rt.config;
        followers_ = followers(*rt.config);
        next_.clear();
    }
    for (const auto& f : followers_) {
        const auto& a = *f.spec->adaptive;
        auto& next = next_[a.rate_per_s.get()];
        double configured = f.spec->rate_per_s;
        double was = a.rate_per_s->load(std::memory_order_relaxed);
        auto signal = signal_of(f, rt, services);
        services.metrics.adaptive_rate.set({f.spec->name}, was);
        // Nothing to follow (3 scrapes failed): the configured rate at once, never stuck low.
        // A step up or down waits for the interval.
        if (signal && now < next) continue;
        if (!signal && was == configured) continue;
        next = now + f.interval;
        double rate = was;
        if (!signal) rate = configured;
        else if (*signal > a.target) rate = std::max(a.min_rate_per_s, was * 0.7);
        else if (*signal < 0.8 * a.target) rate = std::min(configured, was + configured / 10);
        services.metrics.adaptive_rate.set({f.spec->name}, rate);
        if (rate == was) continue;
        a.rate_per_s->store(rate, std::memory_order_relaxed);
        if (signal)
            spdlog::info("adaptive limit {}: {} {:.3g} against a target of {:.3g}: rate {:.4g}/s -> {:.4g}/s",
                         f.spec->name, config::to_string(a.signal), *signal, a.target, was, rate);
        else
            spdlog::warn("adaptive limit {}: no live {} signal from its upstreams: back to its configured {:.4g}/s",
                         f.spec->name, config::to_string(a.signal), rate);
    }
}

}  // namespace tokengate::server
