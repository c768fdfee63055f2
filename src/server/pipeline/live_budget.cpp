#include "live_budget.hpp"

#include "answer_bound.hpp"
#include "tokengate/core/saturate.hpp"

namespace tokengate::server::pipeline {

LiveBudget::LiveBudget(const config::CostConfig& cost, const Admitted& admitted, const limiter::Decision& decision,
                       const limiter::Exposure& answers_in_flight)
    : cost_(cost), admitted_(admitted), answers_in_flight_(answers_in_flight), covered_(admitted.output.tokens) {
    const auto& summary = admitted.summary;
    if (!cost.stop_at_budget || !summary.stream || summary.sequences == 0) return;
    for (auto i : charged_cost_buckets(decision, admitted.charges.size())) charges_.push_back(admitted.charges[i]);
}

net::awaitable<bool> LiveBudget::extend(store::Store& store, std::uint64_t blocks) {
    const auto& summary = admitted_.summary;
    auto next = core::saturating_add(covered_, core::saturating_product(cost_.stream_charge_every, blocks));
    // What the block adds to the request's price (its input and surcharge are already paid).
    double block = cost::request_cost(cost_, admitted_.cost_factor, summary.input_tokens, next, summary.stream) -
                   cost::request_cost(cost_, admitted_.cost_factor, summary.input_tokens, covered_, summary.stream);
    if (block > 0) {
        for (auto& c : charges_) c.amount = block;
        auto decision = co_await store.decide(charges_);
        if (!decision.allowed || decision.unavailable) co_return false;
        charged_ += block;
        for (std::size_t i = 0; i < charges_.size() && i < decision.statuses.size(); ++i)
            if (decision.statuses[i].verdict.remaining < answers_in_flight_.of(charges_[i].key)) co_return false;
    }
    covered_ = next;
    co_return true;
}

}  // namespace tokengate::server::pipeline
