#pragma once

// Stage 3b, live budget (SPEC §17, cost.stop_at_budget): a stream relays its reservation
// freely; past it, every `cost.stream_charge_every` tokens are charged to the tenant's cost
// limits before they are relayed, and a refused charge ends the stream. All the tenant's
// streams charge the same buckets as they go, so N concurrent streams overshoot the budget
// by at most N blocks, where a budget read once at admission let each spend it all.

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <vector>

#include "admit.hpp"
#include "tokengate/limiter/decision.hpp"
#include "tokengate/limiter/exposure.hpp"
#include "tokengate/store/store.hpp"

namespace tokengate::server::pipeline {

namespace net = boost::asio;

class LiveBudget {
public:
    /// Inactive when stop_at_budget is off, the request is not a generating stream, or none of
    /// the tenant's enforced `unit: cost` rate buckets took a charge.
    LiveBudget(const config::CostConfig& cost, const Admitted& admitted, const limiter::Decision& decision,
               const limiter::Exposure& answers_in_flight);

    bool active() const { return !charges_.empty(); }
    /// The output tokens paid for so far: the reservation, then each block charged.
    std::uint64_t covered() const { return covered_; }
    /// Charges the next block to every cost limit at once; false if any refused (or the store
    /// failed closed), or if it left less than the answers in flight may still take (their
    /// hold, answer_bound.hpp): the stream ends where it is, and settlement trues the block up.
    /// `blocks` at once: simulate's bound on the work an absurdly long stream may cost.
    net::awaitable<bool> extend(store::Store& store, std::uint64_t blocks = 1);
    /// The charges the blocks went to, and what each took in all (cost units), for settlement.
    const std::vector<limiter::Charge>& charges() const { return charges_; }
    double charged() const { return charged_; }

private:
    const config::CostConfig& cost_;
    const Admitted& admitted_;
    const limiter::Exposure& answers_in_flight_;
    std::vector<limiter::Charge> charges_;
    std::uint64_t covered_ = 0;
    double charged_ = 0;
};

}  // namespace tokengate::server::pipeline
