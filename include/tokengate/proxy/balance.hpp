#pragma once

#include <memory>
#include <optional>
#include <span>

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
    std::atomic<unsigned> failures_{0};
    std::atomic<bool> live_{false};
};

/// A route's upstream among those not ejected; none if every one is. `weighted`: at random by
/// weight. `least_loaded`: the lowest queue + running + sent since the scrape, ties to the
/// heavier weight, while every candidate's signals are live (else by weight). `health` and
/// `load` are indexed like the config's upstreams.
std::optional<std::size_t> pick_upstream(const config::RouteConfig& route,
                                         std::span<const std::shared_ptr<UpstreamHealth>> health,
                                         std::span<const std::shared_ptr<UpstreamLoad>> load, core::Nanos now);

}  // namespace tokengate::proxy
