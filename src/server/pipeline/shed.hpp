#pragma once

// Stage 1b, shed (SPEC §13): while every available upstream of the request's route is past
// `overload` (its queue, from the last scrape plus what was sent it since, or its KV cache),
// a sheddable tier's requests are refused before anything is charged; standard and critical
// ones pass.

#include <optional>
#include <variant>
#include <vector>

#include "admit.hpp"
#include "rejection.hpp"
#include "tokengate/proxy/balance.hpp"
#include "tokengate/server/runtime.hpp"

namespace tokengate::server::pipeline {

/// The load of a route's available upstreams, as shedding reads it; kept in the access log
/// whether or not the request was shed (simulate replays it).
struct LoadSeen {
    /// Each available upstream's signals, the queue counting what was sent since the scrape;
    /// empty when any of them is not live (nobody is shed on a guess) or none is available.
    std::vector<proxy::UpstreamLoad::Signals> upstreams;
    std::optional<double> least_queue() const;
    std::optional<double> least_kv_cache() const;
};

LoadSeen read_load(const Runtime& runtime, std::size_t route, core::Nanos now);

/// The 503 server_overloaded for a sheddable tier while every upstream seen is past `overload`.
Result<std::monostate> shed(const config::GatewayConfig& config, const Admitted& admitted, const LoadSeen& load);

}  // namespace tokengate::server::pipeline
