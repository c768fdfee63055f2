#include "tokengate/proxy/balance.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "tokengate/core/hash.hpp"

namespace tokengate::proxy {

namespace {

std::optional<double> read(const std::atomic<double>& v) {
    double x = v.load(std::memory_order_relaxed);
    return x < 0 ? std::nullopt : std::optional<double>(x);
}

/// Not ejected, and not already tried by this request.
struct Usable {
    std::span<const std::shared_ptr<UpstreamHealth>> health;
    std::span<const std::size_t> tried;
    core::Nanos now;
    bool operator()(std::size_t upstream) const {
        return health[upstream]->available(now) && std::find(tried.begin(), tried.end(), upstream) == tried.end();
    }
};

std::optional<std::size_t> by_weight(const config::RouteConfig& route, const Usable& usable) {
    thread_local std::minstd_rand rng{std::random_device{}()};
    unsigned total = 0;
    for (const auto& u : route.upstreams)
        if (usable(u.upstream)) total += u.weight;
    if (total == 0) return std::nullopt;
    unsigned pick = std::uniform_int_distribution<unsigned>(0, total - 1)(rng);
    for (const auto& u : route.upstreams) {
        if (!usable(u.upstream)) continue;
        if (pick < u.weight) return u.upstream;
        pick -= u.weight;
    }
    return route.upstreams.front().upstream;
}

std::optional<std::size_t> least_loaded(const config::RouteConfig& route,
                                        std::span<const std::shared_ptr<UpstreamLoad>> load, const Usable& usable) {
    std::optional<std::size_t> best;
    double best_load = 0;
    unsigned best_weight = 0;
    for (const auto& u : route.upstreams) {
        if (!usable(u.upstream)) continue;
        if (!load[u.upstream]->live()) return by_weight(route, usable);  // no signal: weights
        double l = load[u.upstream]->load();
        if (!best || l < best_load || (l == best_load && u.weight > best_weight))
            best = u.upstream, best_load = l, best_weight = u.weight;
    }
    return best;
}

std::string load_text(double load) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", load);
    return buf;
}

unsigned weight_of(const config::RouteConfig& route, std::size_t upstream) {
    for (const auto& u : route.upstreams)
        if (u.upstream == upstream) return u.weight;
    return 1;
}

/// Consistent hashing with bounded loads (after Mirrokni, Thorup, Zadimoghaddam): the first
/// upstream on the ring from the prefix whose load is not above max_load × the route's average
/// load, the average taken per unit of weight (an upstream of twice the weight may carry twice
/// the load, as HAProxy's and Envoy's bounded hashing share their slots by weight) and as at
/// least one request (a GPU with one request is not hot); the least loaded if every one is.
std::optional<std::size_t> by_affinity(const config::RouteConfig& route, const Affinity& affinity,
                                       std::span<const std::shared_ptr<UpstreamLoad>> load, const Usable& usable,
                                       std::string* why) {
    std::vector<std::size_t> order;
    for (auto u : affinity.ring->walk(*affinity.prefix))
        if (usable(u)) order.push_back(u);
    if (order.empty()) return std::nullopt;
    double total = 0, total_weight = 0;
    for (auto u : order) total += load[u]->affinity_load(), total_weight += weight_of(route, u);
    std::string passed;
    std::optional<std::size_t> least;
    for (auto u : order) {
        double share = total * weight_of(route, u) / total_weight;
        double bound = route.affinity.max_load * std::max(1.0, share);
        double l = load[u]->affinity_load();
        if (!least || l < load[*least]->affinity_load()) least = u;
        if (l <= bound) {
            if (why)
                *why = "prefix_affinity: " + passed + "'" + affinity.ring->name(u) + "'" +
                       (passed.empty() ? " is the prefix's home" : " is next on the ring") + " (load " + load_text(l) +
                       ", bound " + load_text(bound) + ")";
            return u;
        }
        passed += "'" + affinity.ring->name(u) + "'" + " (load " + load_text(l) + ") is over the bound " +
                  load_text(bound) + "; ";
    }
    if (why) *why = "prefix_affinity: " + passed + "the least loaded";
    return least;
}

}  // namespace

AffinityRing::AffinityRing(const config::RouteConfig& route, std::span<const config::UpstreamConfig> upstreams) {
    double total_weight = 0;
    for (const auto& u : route.upstreams) total_weight += u.weight;
    auto n = static_cast<double>(route.upstreams.size());
    for (const auto& u : route.upstreams) {
        // Points by weight share, about k_points_per_weight an upstream on average: a weight of
        // a million costs no more than one.
        auto points = std::max<std::uint64_t>(
            1, static_cast<std::uint64_t>(std::llround(k_points_per_weight * n * u.weight / total_weight)));
        const auto& name = upstreams[u.upstream].name;
        if (names_.size() <= u.upstream) names_.resize(u.upstream + 1);
        names_[u.upstream] = name;
        for (std::uint64_t i = 0; i < points; ++i)
            points_.emplace_back(core::hash_bytes(name + "#" + std::to_string(i), 0x52494E47ull), u.upstream);
    }
    std::sort(points_.begin(), points_.end());
    std::vector<std::size_t> seen;
    for (const auto& p : points_)
        if (std::find(seen.begin(), seen.end(), p.second) == seen.end()) seen.push_back(p.second);
    distinct_ = seen.size();
}

std::vector<std::size_t> AffinityRing::walk(std::uint64_t hash) const {
    std::vector<std::size_t> out;
    if (points_.empty()) return out;
    auto start = std::lower_bound(points_.begin(), points_.end(), std::pair<std::uint64_t, std::size_t>{hash, 0});
    auto at = static_cast<std::size_t>(start - points_.begin());
    for (std::size_t k = 0; k < points_.size() && out.size() < distinct_; ++k) {
        auto upstream = points_[(at + k) % points_.size()].second;
        if (std::find(out.begin(), out.end(), upstream) == out.end()) out.push_back(upstream);
    }
    return out;
}

double UpstreamLoad::affinity_load() const {
    double queue = live() ? read(queue_).value_or(0) : 0;
    return static_cast<double>(std::max<std::int64_t>(0, in_flight())) + queue;
}

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
                                         std::span<const std::shared_ptr<UpstreamLoad>> load, core::Nanos now,
                                         const Affinity& affinity, std::span<const std::size_t> tried,
                                         std::string* why) {
    Usable usable{health, tried, now};
    switch (route.balance) {
        case config::Balance::least_loaded:
            if (why) *why = "least_loaded: the lowest queue + running (by weight while a scrape is not live)";
            return least_loaded(route, load, usable);
        case config::Balance::prefix_affinity:
            if (affinity.ring && !affinity.ring->empty() && affinity.prefix)
                return by_affinity(route, affinity, load, usable, why);
            if (why) *why = "prefix_affinity: the request has no prompt text, so by weight";
            return by_weight(route, usable);
        case config::Balance::weighted: break;
    }
    if (why) *why = "weighted: at random by weight (this is one draw)";
    return by_weight(route, usable);
}

}  // namespace tokengate::proxy
