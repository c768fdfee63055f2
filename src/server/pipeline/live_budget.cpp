#include "live_budget.hpp"

namespace tokengate::server::pipeline {

LiveBudget::LiveBudget(const config::CostConfig& cost, const Admitted& admitted, const limiter::Decision& decision)
    : cost_(cost), admitted_(admitted), covered_(admitted.output.tokens) {
    const auto& summary = admitted.summary;
    if (!cost.stop_at_budget || !summary.stream || summary.sequences == 0) return;
    for (std::size_t i = 0; i < decision.statuses.size() && i < admitted.charges.size(); ++i) {
        const auto& s = decision.statuses[i];
        if (s.charged && s.spec->enforce && s.level == config::Level::tenant && s.spec->unit == config::Unit::cost &&
            limiter::is_rate_bucket(*s.spec))
            charges_.push_back(admitted.charges[i]);
    }
}

net::awaitable<bool> LiveBudget::extend(store::Store& store) {
    const auto& summary = admitted_.summary;
    auto next = covered_ + cost_.stream_charge_every;
    // What the block adds to the request's price (its input and surcharge are already paid).
    double block = cost::request_cost(cost_, admitted_.cost_factor, summary.input_tokens, next, summary.stream) -
                   cost::request_cost(cost_, admitted_.cost_factor, summary.input_tokens, covered_, summary.stream);
    if (block > 0) {
        for (auto& c : charges_) c.amount = block;
        auto decision = co_await store.decide(charges_);
        if (!decision.allowed || decision.unavailable) co_return false;
        charged_ += block;
    }
    covered_ = next;
    co_return true;
}

}  // namespace tokengate::server::pipeline
