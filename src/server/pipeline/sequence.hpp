#pragma once

// The stage sequence after admission (SPEC §1), one for `serve` and `simulate`: a request the
// gateway answers itself (count_tokens) → shed → limit → queue turn → exchange → settle → learn.
// What differs between the two is behind `Ends`: serve watches a client socket and exchanges with
// an upstream; simulate replays a trace line's usage on a manual clock. A stage added here is one
// both run.

#include <boost/asio/awaitable.hpp>

#include <functional>
#include <optional>
#include <span>
#include <string>

#include "admit.hpp"
#include "exchange.hpp"
#include "limit.hpp"
#include "live_budget.hpp"
#include "record.hpp"
#include "rejection.hpp"
#include "tokengate/auth/subjects.hpp"
#include "tokengate/core/clock.hpp"
#include "tokengate/cost/output_history.hpp"
#include "tokengate/limiter/exposure.hpp"
#include "tokengate/store/store.hpp"

namespace tokengate::server {
struct GatewayMetrics;
}

namespace tokengate::server::pipeline {

namespace net = boost::asio;

/// What the stages use, and nothing else of the process.
struct StageServices {
    store::Store& store;
    const core::Clock& clock;
    GatewayMetrics& metrics;
    cost::OutputHistory& output_history;
    limiter::Exposure& answers_in_flight;
    auth::SubjectDirectory& subjects;  // each tenant's most recent end users (SPEC §21)
};

/// The request's two ends: its client, and what answers it.
class Ends : public DecisionSeen {
public:
    virtual ~Ends() = default;
    /// Every decision the limits took on admission, refused or not (simulate charts them).
    void decided(const limiter::Decision&) override {}
    /// Admitted: from here until the exchange ends, a client that leaves is noticed.
    virtual void admitted() {}
    /// A wait for queue turns needs to know whether the client left.
    virtual store::TurnWatch turn_watch() = 0;
    /// The wait ended without a start: the client is no longer watched.
    virtual net::awaitable<void> not_started() { co_return; }
    /// The exchange, with the permit's headers; `live` charges a stream as it goes.
    virtual net::awaitable<Exchanged> exchange(const Admitted& admitted, const Permit& permit, LiveBudget* live) = 0;
    /// The exchange is over: the client is no longer watched.
    virtual net::awaitable<void> exchanged() { co_return; }
};

/// How a request ended, for its answer; the access record has the rest.
struct Outcome {
    std::optional<Rejection> refusal;  // to answer instead of (or, after a failed exchange, in place of) a response
    bool keep_alive = false;           // whether the client connection stays (not when it left while queued)
    std::string answer;                // a 200 JSON body the gateway answers itself (count_tokens.hpp)
};

/// Runs the stages for an admitted request and fills `rec` as they go (SPEC §9).
net::awaitable<Outcome> proceed(const StageServices& services, const Runtime& runtime, Admitted& admitted,
                                RequestRecord& rec, Ends& ends);

/// Fills the record's part admission knows (its price, its model and route, what it asked for).
void record_admission(const Runtime& runtime, const Admitted& admitted, RequestRecord& rec);

}  // namespace tokengate::server::pipeline
