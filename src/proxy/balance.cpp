#include "tokengate/proxy/balance.hpp"

#include <random>

namespace tokengate::proxy {

namespace {

std::optional<double> read(const std::atomic<double>& v) {
    double x = v.load(std::memory_order_relaxed);
    return x < 0 ? std::nullopt : std::optional<double>(x);
}

std::optional<std::size_t> by_weight(const config::RouteConfig& route,
                                     std::span<const std::shared_ptr<UpstreamHealth>> health, core::Nanos now) {
    thread_local std::minstd_rand rng{std::random_device{}()};
    unsigned total = 0;
    for (const auto& u : route.upstreams)
        if (health[u.upstream]->available(now)) total += u.weight;
    if (total == 0) return std::nullopt;
    unsigned pick = std::uniform_int_distribution<unsigned>(0, total - 1)(rng);
    for (const auto& u : route.upstreams) {
        if (!health[u.upstream]->available(now)) continue;
        if (pick < u.weight) return u.upstream;
        pick -= u.weight;
    }
    return route.upstreams.front().upstream;
}

}  // namespace

void UpstreamLoad::scraped(const Signals& s) {
    // A value from a hostile page may be anything: only finite, non-negative ones count.
    auto store = [](std::atomic<double>& to, std::optional<double> v) {
        to.store(v && *v >= 0 && *v < 1e12 ? *v : k_none, std::memory_order_relaxed);
    };
    store(queue_, s.queue);
    store(running_, s.running);
    store(kv_cache_, s.kv_cache);
    sent_since_.store(0, std::memory_order_relaxed);
    bool any = s.queue || s.running || s.kv_cache;
    if (!any) return failed();
    failures_.store(0, std::memory_order_relaxed);
    live_.store(true, std::memory_order_relaxed);
}

void UpstreamLoad::failed() {
    if (failures_.fetch_add(1, std::memory_order_relaxed) + 1 >= 3) live_.store(false, std::memory_order_relaxed);
}

UpstreamLoad::Signals UpstreamLoad::signals() const { return {read(queue_), read(running_), read(kv_cache_)}; }

double UpstreamLoad::load() const {
    auto s = signals();
    return s.queue.value_or(0) + s.running.value_or(0) +
           static_cast<double>(sent_since_.load(std::memory_order_relaxed));
}

std::optional<std::size_t> pick_upstream(const config::RouteConfig& route,
                                         std::span<const std::shared_ptr<UpstreamHealth>> health,
                                         std::span<const std::shared_ptr<UpstreamLoad>> load, core::Nanos now) {
    if (route.balance != config::Balance::least_loaded) return by_weight(route, health, now);
    std::optional<std::size_t> best;
    double best_load = 0;
    unsigned best_weight = 0;
    for (const auto& u : route.upstreams) {
        if (!health[u.upstream]->available(now)) continue;
        if (!load[u.upstream]->live()) return by_weight(route, health, now);  // no signal: weights
        double l = load[u.upstream]->load();
        if (!best || l < best_load || (l == best_load && u.weight > best_weight))
            best = u.upstream, best_load = l, best_weight = u.weight;
    }
    return best;
}

}  // namespace tokengate::proxy
