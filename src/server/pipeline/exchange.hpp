#pragma once

// Stage 3, exchange: an upstream for the route, the request sent there, the response relayed
// to the client while cost::ResponseUsage reads its usage; then what the exchange cost.

#include <boost/asio/awaitable.hpp>

#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "admit.hpp"
#include "live_budget.hpp"
#include "rejection.hpp"
#include "tokengate/cost/settlement.hpp"
#include "tokengate/proxy/forward.hpp"
#include "tokengate/proxy/message.hpp"
#include "tokengate/proxy/upstream_request.hpp"

namespace tokengate::server {
struct Worker;
struct Runtime;
}  // namespace tokengate::server

namespace tokengate::server::pipeline {

namespace net = boost::asio;

struct ExchangeRequest {
    const Runtime& runtime;
    const Admitted& admitted;
    proxy::ClientRequest& request;  // its body moves upstream
    const proxy::NormalizedTarget& target;
    proxy::ClientOrigin origin;
    std::span<const limiter::HeaderField> headers;  // added to the client's response head
    proxy::ClientSide client;
    proxy::ExchangeWatch& watch;
    LiveBudget* live = nullptr;  // stop_at_budget: what the stream has paid for, charged as it goes
};

struct Exchanged {
    unsigned status = 0;        // for the log: the upstream's status, 499 if the client left
    bool keep_alive = false;    // the client connection can take another request
    cost::SettledCost settled;  // what to settle the permit with
    core::Nanos first_byte = -1;
    std::string_view upstream;           // its name; empty if none was available
    std::optional<Rejection> rejection;  // 502 / 504 to answer: nothing reached the client yet
    bool stopped = false;                // ended at the budget (stop_at_budget)
};

/// Picks the upstream (prefix affinity reads the body's prompt), forwards, and, under
/// routes[].retry, asks another upstream when one refuses before relaying anything (SPEC §22).
net::awaitable<Exchanged> exchange(Worker& worker, ExchangeRequest in);

/// The upstream `admitted` would go to now, and why (/admin/explain); none if every one is ejected.
std::optional<std::size_t> choose_upstream(const Runtime& runtime, const Admitted& admitted, std::string_view body,
                                           core::Nanos now, std::string* why);

}  // namespace tokengate::server::pipeline
