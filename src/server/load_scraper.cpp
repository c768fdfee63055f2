#include "load_scraper.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>

#include <unordered_map>

#include "adaptive_rate.hpp"
#include "services.hpp"
#include "tokengate/metrics/exposition.hpp"
#include "tokengate/proxy/timed_stream.hpp"

namespace tokengate::server {

namespace http = beast::http;

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);
constexpr auto k_tick = std::chrono::milliseconds(100);
// vLLM's page with its histograms is a few hundred KB: more than this is refused, not read.
constexpr std::uint64_t k_max_page_bytes = 4u << 20;

struct Outcome {
    bool ok = false;
    std::string why;
    metrics::LoadSignals signals;
};

/// One GET of the page, connect to last byte under `metrics.timeout`.
net::awaitable<Outcome> read_page(std::shared_ptr<const Runtime> rt, std::size_t index) {
    const auto& up = rt->config->upstreams[index];
    const auto& m = *up.metrics;
    auto ex = co_await net::this_coro::executor;
    proxy::TimedStream stream(ex);
    stream.expires_after(std::chrono::nanoseconds(m.timeout));
    net::ip::tcp::resolver resolver(ex);
    auto [rec, endpoints] = co_await resolver.async_resolve(up.host, std::to_string(up.port), k_use);
    if (rec) co_return Outcome{false, "resolve: " + rec.message(), {}};
    auto [cec, endpoint] = co_await stream.async_connect(endpoints, k_use);
    if (cec) co_return Outcome{false, "connect: " + cec.message(), {}};
    if (up.https) {
        bool resumed = false;
        if (auto hec = co_await stream.tls_connect(rt->upstream_tls[index], up.host, resumed))
            co_return Outcome{false, "TLS: " + hec.message(), {}};
    }
    http::request<http::empty_body> req{http::verb::get, up.base_path + m.path, 11};
    req.set(http::field::host, up.host + ":" + std::to_string(up.port));
    req.set(http::field::user_agent, "tokengate");
    req.set(http::field::accept, "text/plain");
    req.keep_alive(false);
    auto [wec, wn] = co_await http::async_write(stream, req, k_use);
    if (wec) co_return Outcome{false, "write: " + wec.message(), {}};
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(k_max_page_bytes);
    parser.header_limit(64 * 1024);
    auto [rdec, rn] = co_await http::async_read(stream, buffer, parser, k_use);
    if (rdec == http::error::body_limit)
        co_return Outcome{false, "the page is over " + std::to_string(k_max_page_bytes) + " bytes", {}};
    if (rdec) co_return Outcome{false, "read: " + rdec.message(), {}};
    const auto& res = parser.get();
    if (res.result() != http::status::ok) co_return Outcome{false, "HTTP " + std::to_string(res.result_int()), {}};
    auto signals = metrics::read_load_signals(res.body());
    if (!signals.queue && !signals.running && !signals.kv_cache)
        co_return Outcome{false, "no queue, running or KV-cache series it knows", signals};
    co_return Outcome{true, {}, signals};
}

/// Per upstream name, so a reload keeps the schedule and the log's memory.
struct Schedule {
    core::Nanos next = 0;  // on the injected clock
    bool in_flight = false;
    bool failing = false;  // logged once per run of failures, not every interval
};

net::awaitable<void> scrape(Services& services, std::shared_ptr<const Runtime> rt, std::size_t index,
                            Schedule& schedule) {
    const auto& name = rt->config->upstreams[index].name;
    auto outcome = co_await read_page(rt, index);
    auto& load = *rt->load[index];
    auto& m = services.metrics;
    if (outcome.ok) {
        load.scraped({outcome.signals.queue, outcome.signals.running, outcome.signals.kv_cache});
        m.upstream_metrics_up.set({name}, 1);
        if (outcome.signals.queue) m.upstream_queue.set({name}, *outcome.signals.queue);
        if (outcome.signals.running) m.upstream_running.set({name}, *outcome.signals.running);
        if (outcome.signals.kv_cache) m.upstream_kv_cache.set({name}, *outcome.signals.kv_cache);
        if (schedule.failing) spdlog::info("upstream {}: /metrics readable again", name);
        schedule.failing = false;
    } else {
        load.failed();
        m.upstream_metrics_up.set({name}, 0);
        if (!schedule.failing) spdlog::warn("upstream {}: cannot read its metrics: {}", name, outcome.why);
        schedule.failing = true;
    }
    schedule.in_flight = false;
}

}  // namespace

net::awaitable<void> watch_upstream_load(Services& services) {
    auto ex = co_await net::this_coro::executor;
    net::steady_timer timer(ex);
    std::unordered_map<std::string, Schedule> schedules;  // by upstream name; node-stable
    RateAdapter adapter;
    for (;;) {
        auto rt = services.runtime.get();
        auto now = services.clock.now();
        const auto& upstreams = rt->config->upstreams;
        for (std::size_t i = 0; i < upstreams.size(); ++i) {
            if (!upstreams[i].metrics) continue;
            auto& schedule = schedules[upstreams[i].name];
            if (schedule.in_flight || now < schedule.next) continue;
            schedule.in_flight = true;
            schedule.next = now + upstreams[i].metrics->interval;
            net::co_spawn(ex, scrape(services, rt, i, schedule), net::detached);
        }
        adapter.tick(*rt, services, services.clock.now());
        timer.expires_after(k_tick);
        auto [ec] = co_await timer.async_wait(k_use);
        if (ec) co_return;
    }
}

}  // namespace tokengate::server
