#include "tokengate/proxy/balance.hpp"

#include <random>

namespace tokengate::proxy {

std::optional<std::size_t> pick_upstream(const config::RouteConfig& route,
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

}  // namespace tokengate::proxy
