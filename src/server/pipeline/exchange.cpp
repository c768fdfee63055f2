#include "exchange.hpp"

#include "../services.hpp"
#include "tokengate/cost/prompt_prefix.hpp"
#include "tokengate/proxy/balance.hpp"

#include <spdlog/spdlog.h>

#include <array>

namespace tokengate::server::pipeline {

namespace {

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
    return s.size() >= prefix.size() && beast::iequals(s.substr(0, prefix.size()), prefix);
}

/// Upstream fields the gateway's own rate-limit and request-id fields replace.
bool replaced_in_response(http::field, std::string_view name) {
    return starts_with_nocase(name, "x-ratelimit") || starts_with_nocase(name, "ratelimit") ||
           beast::iequals(name, "x-request-id");
}

Rejection no_upstream(limiter::HeaderFields headers) {
    return {http::status::bad_gateway,
            "server_error",
            "upstream_unavailable",
            "Every upstream for this route is ejected after failures.",
            std::move(headers),
            {},
            {}};
}

/// The forward's outcome as settlement and the answer see it.
Exchanged conclude(const ExchangeRequest& in, const proxy::ForwardResult& result, const cost::ResponseUsage& observed) {
    const auto& cfg = *in.runtime.config;
    const auto& summary = in.admitted.summary;
    Exchanged out;
    out.first_byte = result.first_byte_at ? result.first_byte_at : -1;
    out.status = result.status;
    cost::ExchangeEnd end{false, false, result.status};
    switch (result.outcome) {
        case proxy::ForwardOutcome::completed:
            end.completed = true;
            out.keep_alive = in.client.keep_alive;
            break;
        case proxy::ForwardOutcome::upstream_unavailable:
        case proxy::ForwardOutcome::upstream_timeout:
            end.upstream_failed = true;
            out.keep_alive = in.client.keep_alive;
            out.rejection = upstream_failed(result.outcome == proxy::ForwardOutcome::upstream_timeout,
                                            {in.headers.begin(), in.headers.end()});
            break;
        case proxy::ForwardOutcome::upstream_broken:
        case proxy::ForwardOutcome::retry_elsewhere: break;  // (exchange tries the next upstream instead)
        case proxy::ForwardOutcome::client_gone: out.status = 499; break;
    }
    const auto& output = in.admitted.output;
    // Every sequence's; a lowered bound is below the declared one, whose product is saturated.
    auto bound = output.bound_lowered() ? output.bound() * summary.sequences : summary.max_output_tokens;
    out.settled = cost::settled_cost(cfg.cost, in.admitted.cost_factor, summary, in.admitted.reserved.cost, observed,
                                     end, cost::usage_bounds(summary, bound));
    return out;
}

/// An https upstream's handshakes, counted; a failure's reason logged, once per upstream per
/// interval (a broken certificate fails every request).
void count_handshakes(Worker& worker, const std::string& upstream, const proxy::UpstreamHandshakes& tls) {
    auto& family = worker.services.metrics.upstream_tls_handshakes;
    if (tls.full) family.add({upstream, "full"}, tls.full);
    if (tls.resumed) family.add({upstream, "resumed"}, tls.resumed);
    if (!tls.failed) return;
    family.add({upstream, "failed"}, tls.failed);
    std::uint64_t held_back = 0;
    if (worker.services.upstream_tls_log.allow(upstream, worker.services.clock.now(), held_back))
        spdlog::warn("upstream {}: TLS handshake failed: {} ({} more since the last report)", upstream, tls.failure,
                     held_back);
}

/// An upstream that reports more than the request could have used is broken or hostile: its
/// report is clamped, counted, and logged once per upstream.
void usage_clamped(Worker& worker, const std::string& upstream, const cost::SettledCost& settled) {
    worker.services.metrics.usage_clamped.add({upstream});
    std::uint64_t held_back = 0;
    if (worker.services.usage_clamp_log.allow(upstream, worker.services.clock.now(), held_back))
        spdlog::warn(
            "upstream {} reported usage past what the request could have used; settled at the bound "
            "({} prompt, {} completion tokens)",
            upstream, settled.prompt_tokens, settled.completion_tokens);
}

/// The prompt prefix and ring prefix affinity needs; nothing for any other balance.
proxy::Affinity affinity_for(const Runtime& runtime, const Admitted& admitted, std::string_view body) {
    const auto& route = runtime.config->routes[admitted.route];
    if (route.balance != config::Balance::prefix_affinity) return {};
    return {&runtime.rings[admitted.route], cost::prompt_prefix_hash(body, admitted.summary.endpoint,
                                                                     route.affinity.prefix_tokens, admitted.tokenizer)};
}

/// Counts a request at its upstream while it is there (prefix affinity's bound).
struct AtUpstream {
    proxy::UpstreamLoad& load;
    explicit AtUpstream(proxy::UpstreamLoad& l) : load(l) {
        load.sent();  // least_loaded counts it until the next scrape
        load.started();
    }
    ~AtUpstream() { load.finished(); }
    AtUpstream(const AtUpstream&) = delete;
    AtUpstream& operator=(const AtUpstream&) = delete;
};

/// One attempt at one upstream, counted while it is there, with its metrics.
net::awaitable<proxy::ForwardResult> forward_to(Worker& worker, ExchangeRequest& in, std::size_t index,
                                                const proxy::UpstreamRequest& up, const proxy::ForwardHooks& hooks) {
    auto& services = worker.services;
    const auto& clock = services.clock;
    const auto& upstream = in.runtime.config->upstreams[index];
    auto started = clock.now();
    auto inflight = services.metrics.series(GatewayMetrics::PerUpstream::inflight, upstream.name);
    inflight.add(1);
    proxy::ForwardResult result;
    {
        AtUpstream at(*in.runtime.load[index]);
        result = co_await proxy::forward(worker.pool_for(upstream, worker.worker_count, in.runtime.upstream_tls[index]),
                                         *in.runtime.health[index], up, in.client, in.watch, hooks, clock);
    }
    inflight.add(-1);
    if (upstream.https) count_handshakes(worker, upstream.name, result.tls);
    services.metrics.series(GatewayMetrics::PerUpstream::duration, upstream.name)
        .observe(static_cast<double>(clock.now() - started) / 1e9);
    if (result.first_byte_at) {
        auto ttfb = static_cast<double>(result.first_byte_at - started) / 1e9;
        services.metrics.series(GatewayMetrics::PerUpstream::ttfb, upstream.name).observe(ttfb);
        services.activity.first_byte(upstream.name, ttfb);
    }
    co_return result;
}

}  // namespace

std::optional<std::size_t> choose_upstream(const Runtime& runtime, const Admitted& admitted, std::string_view body,
                                           core::Nanos now, std::string* why) {
    return proxy::pick_upstream(runtime.config->routes[admitted.route], runtime.health, runtime.load, now,
                                affinity_for(runtime, admitted, body), {}, why);
}

net::awaitable<Exchanged> exchange(Worker& worker, ExchangeRequest in) {
    auto& services = worker.services;
    const auto& clock = services.clock;
    const auto& cfg = *in.runtime.config;
    const auto& summary = in.admitted.summary;
    const auto& route = cfg.routes[in.admitted.route];
    auto affinity = affinity_for(in.runtime, in.admitted, in.request.body());
    // The upstreams tried so far: at most 1 + retry.attempts (8), kept in place (no allocation).
    std::array<std::size_t, 9> tried{};
    std::size_t tries = 0;
    auto index = proxy::pick_upstream(route, in.runtime.health, in.runtime.load, clock.now(), affinity);
    if (!index) {
        Exchanged none;
        none.keep_alive = in.client.keep_alive;
        none.rejection = no_upstream({in.headers.begin(), in.headers.end()});
        co_return none;
    }
    // A stream's usage arrives only if asked for: ask on the client's behalf, and hide the
    // answer from a client that did not ask.
    bool usage_injected = summary.stream && summary.injects_stream_usage() && !summary.client_wants_usage;
    core::RecycledString body;
    if (usage_injected) body = cost::with_stream_usage(in.request.body(), summary.has_stream_options);
    else body = std::move(in.request.body());
    // SPEC §17: the upstream generates no more than was declared, even when the client named no limit.
    if (summary.sequences > 0 && (in.admitted.output.bound_lowered() || !summary.output_named))
        body = cost::with_output_limit(body, summary, in.admitted.output.bound());

    // The hooks: views of these lambdas, which outlive every attempt below.
    cost::ResponseUsage observed;
    auto decorate = [&](const proxy::UpstreamResponseHead& h, core::RecycledString& head) {
        for (const auto& f : in.headers) proxy::wire::field(head, f.name, f.value);
        proxy::wire::field(head, "X-Request-Id", in.origin.request_id);
        observed.start(proxy::first_field(h, http::field::content_type),
                       !proxy::first_field(h, http::field::content_length).empty(), usage_injected,
                       in.admitted.tokenizer);
        if (in.live) observed.pause_after(in.live->covered() + cfg.cost.stream_charge_every);
    };
    auto on_chunk = [&](std::string_view data, bool last) { return observed.feed(data, last); };
    core::RecycledString after;  // what the live budget lets through, or how the stream ends
    auto after_piece = [&]() -> net::awaitable<proxy::ForwardHooks::Next> {
        after.clear();
        // Past what is paid for (or held at it), the next block is charged before anything
        // more is relayed; what was held then goes on.
        while (!observed.stopped() && (observed.paused() || observed.streamed_tokens() >= in.live->covered())) {
            if (!co_await in.live->extend(*services.store)) {
                observed.stop_now();
                break;
            }
            after.append(observed.resume(in.live->covered() + cfg.cost.stream_charge_every));
        }
        if (!observed.stopped()) co_return proxy::ForwardHooks::Next{after, false};
        after += observed.final_events(summary.client_wants_usage, summary.input_tokens);
        co_return proxy::ForwardHooks::Next{after, true};
    };
    // SPEC §22: a refusal in routes[].retry.on goes to another upstream, while one is left.
    std::optional<std::size_t> next;
    auto retry_elsewhere = [&](unsigned status) {
        return next && std::find(route.retry.on.begin(), route.retry.on.end(), status) != route.retry.on.end();
    };
    proxy::ForwardHooks hooks;
    hooks.decorate = decorate;
    hooks.replaced = replaced_in_response;
    hooks.on_chunk = on_chunk;
    if (in.live) hooks.after_piece = after_piece;
    if (route.retry.attempts > 0) hooks.retry_elsewhere = retry_elsewhere;
    for (unsigned attempt = 0;; ++attempt) {
        tried[tries++] = *index;
        next.reset();
        if (attempt < route.retry.attempts && tries < tried.size())
            next = proxy::pick_upstream(route, in.runtime.health, in.runtime.load, clock.now(), affinity,
                                        std::span(tried.data(), tries));
        const auto& upstream = cfg.upstreams[*index];
        // The body is copied only while another upstream may need it.
        auto up = proxy::make_upstream_request(in.request.base(), in.target, upstream, in.origin,
                                               next ? body : std::move(body));
        auto result = co_await forward_to(worker, in, *index, up, hooks);
        if (result.outcome == proxy::ForwardOutcome::retry_elsewhere) {
            services.metrics.upstream_retries.add({upstream.name, std::to_string(result.status)});
            index = next;
            continue;
        }
        auto out = conclude(in, result, observed);
        if (out.settled.clamped) usage_clamped(worker, upstream.name, out.settled);
        out.upstream = upstream.name;
        out.stopped = result.stopped;
        co_return out;
    }
}

}  // namespace tokengate::server::pipeline
