#pragma once

// Stage 1b, shed (SPEC §13): while every available upstream of the request's route is past
// `overload` (its queue, from the last scrape plus what was sent it since, or its KV cache),
// a sheddable tier's requests are refused before anything is charged; standard and critical
// ones pass.

#include <optional>

#include "admit.hpp"
#include "rejection.hpp"
#include "tokengate/server/runtime.hpp"

namespace tokengate::server::pipeline {

struct ShedCheck {
    std::optional<Rejection> refused;  // the 503 server_overloaded to answer
    /// The load the check read, for the access log (and simulate's replay of it): the least
    /// queue and KV cache among the route's available upstreams, while all their signals are live.
    std::optional<double> queue, kv_cache;
};

/// An upstream whose signals are not live counts as not overloaded: nobody is shed on a guess.
ShedCheck shed(const Runtime& runtime, const Admitted& admitted, core::Nanos now);

}  // namespace tokengate::server::pipeline
