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

/// The 503 server_overloaded to answer, or nullopt to go on. An upstream whose signals are not
/// live counts as not overloaded: nobody is shed on a guess.
std::optional<Rejection> shed(const Runtime& runtime, const Admitted& admitted, core::Nanos now);

}  // namespace tokengate::server::pipeline
