#pragma once

// Stage 2, limit: every applicable limit decided at once (SPEC §3), then, for shaping
// queues, the wait for the request's turn. What comes out is a Permit that settles itself
// exactly once.

#include <boost/asio/awaitable.hpp>

#include <string_view>
#include <variant>
#include <vector>

#include "admit.hpp"
#include "rejection.hpp"
#include "tokengate/core/clock.hpp"
#include "tokengate/limiter/exposure.hpp"
#include "tokengate/metrics/registry.hpp"
#include "tokengate/store/store.hpp"

namespace tokengate::server {
struct GatewayMetrics;
}

namespace tokengate::server::pipeline {

namespace net = boost::asio;

/// Who wants to see the decisions the limits take (simulate charts them).
class DecisionSeen {
public:
    virtual void decided(const limiter::Decision& decision) = 0;

protected:
    ~DecisionSeen() = default;
};

/// An admitted request's hold on its buckets. settle() moves them from the reservation to
/// what was actually used, once; a Permit destroyed unsettled keeps the reservation.
class Permit {
public:
    Permit(store::Store& store, limiter::Decision decision, std::span<const limiter::Charge> charges,
           const config::Amounts& reserved, GatewayMetrics& metrics, std::string_view tenant);
    Permit(Permit&& other) noexcept;
    Permit& operator=(Permit&&) = delete;
    Permit(const Permit&) = delete;
    ~Permit() { settle(reserved_); }

    void settle(const config::Amounts& actual);
    /// Refused after all (answer_bound.hpp): every cost unit back, and not counted as settled,
    /// since it was never admitted.
    void withdraw();
    /// An answer's hold on what it may still be charged (answer_bound.hpp), given back at settlement.
    void keep(limiter::Exposure::Hold hold) { exposure_ = std::move(hold); }
    /// A live budget charged `amount` more to these buckets: settlement starts from there.
    void held_more(std::span<const limiter::Charge> buckets, double amount);
    bool settled() const { return done_; }
    const limiter::Decision& decision() const { return decision_; }
    /// The rate-limit headers every answer to this request carries (SPEC §6).
    const limiter::HeaderFields& headers() const { return headers_; }
    void set_headers(limiter::HeaderFields headers) { headers_ = std::move(headers); }
    /// Shaping: waits for the request's turn in every queue. Unless it started (the client
    /// left, or a queue displaced it) the permit is settled at 0: nothing was forwarded.
    net::awaitable<store::TurnResult> wait_turn(store::Store& store, const core::Clock& clock,
                                                std::span<const limiter::Charge> charges, store::TurnWatch watch);

private:
    /// Settles the charges once; false if they were already.
    bool move_charges_to(const config::Amounts& actual);

    store::Store* store_;  // the one that decided: it settles
    limiter::Decision decision_;
    config::Charges charged_;
    config::Amounts reserved_;
    GatewayMetrics* metrics_;
    std::string_view tenant_;  // lives in the config snapshot the request holds
    limiter::HeaderFields headers_;
    limiter::Exposure::Hold exposure_;
    bool done_ = false;
};

/// Decides and charges. Refusals: 429 (the limit's rejection, with its headers) or 503
/// rate_limiter_unavailable when a shared store is down under fail_closed. With
/// cost.cap_output, a request that only cost buckets refuse is capped (cap.hpp) and decided
/// again; `admitted` then holds the capped admission. With cost.stop_at_budget, a non-stream
/// answer is bounded beside the answers in flight (answer_bound.hpp): its bound may be lowered,
/// or it is refused (429) and its charge given back. `seen`, when given, is shown the final decision.
net::awaitable<Result<Permit>> limit(store::Store& store, Admitted& admitted, const config::CostConfig& cost,
                                     std::string_view tenant, GatewayMetrics& metrics, const core::Clock& clock,
                                     limiter::Exposure& answers_in_flight, DecisionSeen* seen = nullptr);

/// The 429 for a refused decision, with its headers (SPEC §6).
Rejection refused(const limiter::Decision& decision, std::span<const limiter::Charge> charges,
                  limiter::HeaderFields headers);

/// The 429 for a request a shaping queue displaced while it waited (SPEC §13).
Rejection displaced(const limiter::Charge& queue);

/// The quota gauges (tokengate_quota_used / _limit) from a decision's tenant quotas.
void observe_quotas(const limiter::Decision& decision, std::string_view tenant, GatewayMetrics& metrics);

/// The same decision, charging nothing (POST /admin/explain, GET /admin/tenants/<id>).
net::awaitable<limiter::Decision> preview(store::Store& store, std::span<const limiter::Charge> charges);

}  // namespace tokengate::server::pipeline
