#pragma once

// Stage 1a, precheck (SPEC §17), for a body large enough to be priced on the pricing pool:
// the limits that need no price (requests, concurrency, an exhausted bucket or quota) are
// decided first with the least a request can cost, so a request they refuse costs no
// tokenizer time; and the tightest capacity bounds how far counting goes.

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <optional>

#include "admit.hpp"
#include "rejection.hpp"
#include "tokengate/core/clock.hpp"
#include "tokengate/store/store.hpp"

namespace tokengate::server::pipeline {

namespace net = boost::asio;

/// How many input tokens to count at most (past them no limit could admit the request), or a
/// 429: refused even at the least cost. Nothing is charged. `who` is set when the key is known,
/// for the log. A request precheck cannot read (bad path, key or JSON, no route) goes on to
/// admit(), which says why.
net::awaitable<Result<std::uint64_t>> precheck(store::Store& store, const Runtime& runtime, const Incoming& in,
                                               const core::Clock& clock, std::optional<auth::Principal>& who);

/// The most input tokens any of these limits could admit (their capacity, in tokens), or
/// UINT64_MAX; `status` gives a quota's top-ups.
std::uint64_t count_limit(const config::CostConfig& cost, double cost_factor, std::span<const limiter::Charge> charges,
                          const limiter::Decision& status);

}  // namespace tokengate::server::pipeline
