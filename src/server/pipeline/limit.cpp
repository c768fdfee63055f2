#include "limit.hpp"

#include <algorithm>

#include "../services.hpp"
#include "answer_bound.hpp"
#include "cap.hpp"
#include "tokengate/limiter/headers.hpp"

namespace tokengate::server::pipeline {

namespace {

// Built outside the coroutines (GCC 12 cannot lower initializer lists inside them).
limiter::HeaderFields retry_in_a_second() { return {{"Retry-After", "1"}}; }

Rejection store_unavailable() {
    return {http::status::service_unavailable,
            "server_error",
            "rate_limiter_unavailable",
            "The shared rate limiter is unavailable; retry shortly.",
            retry_in_a_second(),
            {},
            {}};
}

}  // namespace

Rejection refused(const limiter::Decision& decision, std::span<const limiter::Charge> charges,
                  limiter::HeaderFields headers) {
    auto why = limiter::describe_rejection(decision, charges);
    const auto& s = decision.statuses[decision.rejected];
    return {http::status::too_many_requests,
            std::move(why.type),
            std::move(why.code),
            std::move(why.message),
            std::move(headers),
            config::to_string(s.level),
            s.spec->name};
}

namespace {

/// Shadow refusals and the remaining-ratio gauge, from every decision.
void observe(const limiter::Decision& decision, std::string_view tenant, GatewayMetrics& metrics) {
    for (const auto& s : decision.statuses) {
        if (!s.spec->enforce && !s.verdict.admitted)
            metrics.shadow_rejections.add({config::to_string(s.level), s.spec->name, tenant});
        if (s.level == config::Level::tenant && s.spec->capacity > 0)
            metrics.remaining_ratio.set({tenant, s.spec->name}, std::max(0.0, s.verdict.remaining) / s.spec->capacity);
    }
    observe_quotas(decision, tenant, metrics);
}

bool tenant_quota(const limiter::Charge& c) {
    return c.level == config::Level::tenant && c.spec->algorithm == config::Algorithm::quota;
}

}  // namespace

void observe_quotas(const limiter::Decision& decision, std::string_view tenant, GatewayMetrics& metrics) {
    for (const auto& s : decision.statuses) {
        if (s.level != config::Level::tenant || s.spec->algorithm != config::Algorithm::quota) continue;
        double allowance = s.spec->capacity + s.quota_added;
        // Refused, remaining is what is left; admitted, what is left after this request.
        metrics.quota_used.set({tenant, s.spec->name}, std::max(0.0, allowance - s.verdict.remaining));
        metrics.quota_limit.set({tenant, s.spec->name}, allowance);
    }
}

Permit::Permit(store::Store& store, limiter::Decision decision, std::span<const limiter::Charge> charges,
               const config::Amounts& reserved, GatewayMetrics& metrics, std::string_view tenant)
    : store_(&store),
      decision_(std::move(decision)),
      charged_(limiter::charged<config::Charges>(charges, decision_)),
      reserved_(reserved),
      metrics_(&metrics),
      tenant_(tenant) {}

Permit::Permit(Permit&& other) noexcept
    : store_(other.store_),
      decision_(std::move(other.decision_)),
      charged_(std::move(other.charged_)),
      reserved_(other.reserved_),
      metrics_(other.metrics_),
      tenant_(other.tenant_),
      headers_(std::move(other.headers_)),
      exposure_(std::move(other.exposure_)),
      done_(other.done_) {
    other.done_ = true;  // the moved-from permit settles nothing
}

void Permit::settle(const config::Amounts& actual) {
    if (move_charges_to(actual)) metrics_->series(GatewayMetrics::PerTenant::settled, tenant_).add();
}

void Permit::withdraw() { move_charges_to({}); }

bool Permit::move_charges_to(const config::Amounts& actual) {
    if (done_) return false;
    done_ = true;
    store_->settle(decision_, charged_, actual);
    // Only once the bucket carries what the answer used: released before, another answer
    // could count on the same room twice.
    exposure_.release();
    // The used gauge follows the settlement (the store's own count is not read back).
    for (const auto& c : charged_)
        if (tenant_quota(c) && limiter::settles(c, actual))
            metrics_->quota_used.add({tenant_, c.spec->name}, actual.in(c.spec->unit) - c.amount);
    return true;
}

void Permit::held_more(std::span<const limiter::Charge> buckets, double amount) {
    if (amount == 0) return;
    for (auto& c : charged_)
        for (const auto& b : buckets)
            if (c.key == b.key) c.amount += amount;
}

net::awaitable<store::TurnResult> Permit::wait_turn(store::Store& store, const core::Clock& clock,
                                                    std::span<const limiter::Charge> charges, store::TurnWatch watch) {
    if (!decision_.must_wait()) co_return store::TurnResult{};
    auto turn = co_await store::wait_for_turn(store, clock, charges, decision_, std::move(watch));
    if (!turn.started()) settle({});  // never forwarded: every cost unit back
    co_return turn;
}

Rejection displaced(const limiter::Charge& queue) {
    return {http::status::too_many_requests,
            "requests",
            "rate_limit_exceeded",
            "Rate limit reached for " + std::string(config::to_string(queue.level)) + " limit '" + queue.spec->name +
                "': while this request waited, its place in the queue went to higher-priority requests "
                "(or the queue slowed past max_wait). Retry shortly.",
            retry_in_a_second(),
            config::to_string(queue.level),
            queue.spec->name};
}

net::awaitable<Result<Permit>> limit(store::Store& store, Admitted& admitted, const config::CostConfig& cost,
                                     std::string_view tenant, GatewayMetrics& metrics, const core::Clock& clock,
                                     limiter::Exposure& answers_in_flight, DecisionSeen* seen) {
    auto decision = co_await store.decide(admitted.charges);
    if (decision.unavailable) co_return store_unavailable();
    if (!decision.allowed && cost.cap_output)
        if (auto capped = cap_output(cost, admitted, decision)) {
            // A shorter answer instead of a 429: decided again (the buckets may have moved).
            auto again = co_await store.decide(capped->charges);
            if (again.unavailable) co_return store_unavailable();
            if (again.allowed) {
                admitted = std::move(*capped);
                metrics.output_capped.add({tenant});
            }
            decision = std::move(again);
        }
    auto headers =
        limiter::rate_limit_headers<limiter::HeaderFields>(decision, clock.unix_now(), admitted.summary.anthropic());
    observe(decision, tenant, metrics);
    if (seen) seen->decided(decision);
    if (!decision.allowed) {
        auto no = refused(decision, admitted.charges, std::move(headers));
        if (admitted.summary.input_count_stopped && decision.never()) {
            // Counted past the limit's capacity, then no further: its size is a lower bound.
            std::string why = "This request's input is more than ";
            why += std::to_string(admitted.summary.input_tokens - 1);
            why += " tokens (counting stopped there), more than limit '";
            why += no.limit;
            why += "' can ever admit. Shorten the prompt.";
            no.message = std::move(why);
        }
        co_return no;
    }
    auto answer = bound_answer(cost, admitted, decision, answers_in_flight);
    Permit permit(store, std::move(decision), admitted.charges, admitted.reserved, metrics, tenant);
    if (auto* no = std::get_if<Rejection>(&answer)) {
        permit.withdraw();
        no->headers.insert(no->headers.begin(), headers.begin(), headers.end());
        co_return std::move(*no);
    }
    permit.keep(std::move(std::get<limiter::Exposure::Hold>(answer)));
    if (admitted.output.bound_lowered()) {
        headers.push_back({"x-tokengate-output-capped", std::to_string(admitted.output.bound())});
        if (admitted.output.lowered) metrics.output_capped.add({tenant});
    }
    metrics.series(GatewayMetrics::PerTenant::admitted, tenant).add();
    permit.set_headers(std::move(headers));
    co_return permit;
}

net::awaitable<limiter::Decision> preview(store::Store& store, std::span<const limiter::Charge> charges) {
    co_return co_await store.peek(charges);
}

}  // namespace tokengate::server::pipeline
