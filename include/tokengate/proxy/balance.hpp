#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tokengate/config/config.hpp"
#include "tokengate/proxy/pool.hpp"

namespace tokengate::proxy {

/// What an upstream's own /metrics said at its last scrape (SPEC §13), and how many requests
/// this gateway has sent it since. Written by the scraper, read by every worker: atomics.
class UpstreamLoad {
public:
    struct Signals {
        std::optional<double> queue, running, kv_cache;
    };
    /// A scrape that read the page; a signal it lacked stays empty.
    void scraped(const Signals& s);
    /// A scrape that failed (or a page without any signal): after 3 in a row, not `live`.
    void failed();
    /// A request sent to the upstream since the last scrape.
    void sent() { sent_since_.fetch_add(1, std::memory_order_relaxed); }
    /// This gateway's requests at the upstream now: counted from the send to the response's end.
    void started() { in_flight_.fetch_add(1, std::memory_order_relaxed); }
    void finished() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }
    std::int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
    /// What prefix affinity bounds (SPEC §22): this gateway's in flight plus the queue the last
    /// live scrape saw (other gateways' waiting requests among them).
    double affinity_load() const;

    /// Signals fresh enough to act on (the last scrape, or one of the two before it, read).
    bool live() const { return live_.load(std::memory_order_relaxed); }
    Signals signals() const;
    /// queue + running at the last scrape, plus what was sent since.
    double load() const;
    /// Requests sent since the last scrape: what the page cannot show yet.
    std::uint64_t sent_since() const { return sent_since_.load(std::memory_order_relaxed); }

private:
    static constexpr double k_none = -1;  // a signal the page did not have
    std::atomic<double> queue_{k_none}, running_{k_none}, kv_cache_{k_none};
    std::atomic<std::uint64_t> sent_since_{0};
    std::atomic<std::int64_t> in_flight_{0};
    std::atomic<unsigned> failures_{0};
    std::atomic<bool> live_{false};
};

/// SPEC §22's consistent-hash ring of a route's upstreams, by their names (so a replica added
/// or removed moves only its own share of prefixes), `k_points_per_weight` points per unit of
/// weight.
class AffinityRing {
public:
    static constexpr unsigned k_points_per_weight = 160;
    AffinityRing() = default;
    AffinityRing(const config::RouteConfig& route, std::span<const config::UpstreamConfig> upstreams);
    bool empty() const { return points_.empty(); }
    /// The route's upstreams in ring order from `hash`: the first is the prefix's home, then
    /// each next distinct one.
    std::vector<std::size_t> walk(std::uint64_t hash) const;
    const std::string& name(std::size_t upstream) const { return names_[upstream]; }

private:
    std::vector<std::pair<std::uint64_t, std::size_t>> points_;  // (point, upstream), sorted
    std::vector<std::string> names_;                             // by upstream index, for /admin/explain
    std::size_t distinct_ = 0;
};

/// A prompt prefix and its route's ring, for `balance: prefix_affinity`.
struct Affinity {
    const AffinityRing* ring = nullptr;
    std::optional<std::uint64_t> prefix;  // none: the request has no prompt text (by weight)
};

/// A route's upstream among those not ejected and not in `tried`; none if there is none.
/// `weighted`: at random by weight. `least_loaded`: the lowest queue + running + sent since the
/// scrape, ties to the heavier weight, while every candidate's signals are live (else by
/// weight). `prefix_affinity`: the prefix's home on the ring, or the next one on it whose
/// affinity_load is within `affinity.max_load` × the route's average (SPEC §22). `health` and
/// `load` are indexed like the config's upstreams. `why`, when given, says how it was chosen
/// (/admin/explain).
std::optional<std::size_t> pick_upstream(const config::RouteConfig& route,
                                         std::span<const std::shared_ptr<UpstreamHealth>> health,
                                         std::span<const std::shared_ptr<UpstreamLoad>> load, core::Nanos now,
                                         const Affinity& affinity = {}, std::span<const std::size_t> tried = {},
                                         std::string* why = nullptr);

}  // namespace tokengate::proxy
