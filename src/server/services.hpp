#pragma once

// Internal to the server module: what the connection coroutines share.

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "tokengate/core/clock.hpp"
#include "tokengate/metrics/registry.hpp"
#include "tokengate/proxy/pool.hpp"
#include "tokengate/redis/redis_store.hpp"
#include "tokengate/server/runtime.hpp"
#include "tokengate/store/memory_store.hpp"

namespace spdlog {
class logger;
}

namespace tokengate::server {

namespace net = boost::asio;
namespace beast = boost::beast;

/// The metric families of SPEC §10, in one place.
struct GatewayMetrics {
    explicit GatewayMetrics(metrics::Registry& r);
    metrics::Family& requests;
    metrics::Family& admitted;
    metrics::Family& settled;
    metrics::Family& rejections;
    metrics::Family& shadow_rejections;
    metrics::Family& cost_reserved;
    metrics::Family& cost_settled;
    metrics::Family& tokens;
    metrics::Family& upstream_duration;
    metrics::Family& upstream_ttfb;
    metrics::Family& queue_depth;
    metrics::Family& queue_wait;
    metrics::Family& inflight;
    metrics::Family& remaining_ratio;
    metrics::Family& config_reloads;
};

/// Shared by every worker thread.
struct Services {
    Services(std::shared_ptr<const Runtime> runtime, std::shared_ptr<spdlog::logger> log,
             const core::Clock& c)
        : runtime(std::move(runtime)), access_log(std::move(log)), clock(c), store(c), metrics(registry) {}

    RuntimeHolder runtime;
    std::string config_path;
    /// Loads config_path and swaps it in; false (and `error`) if it is invalid.
    std::function<bool(std::string& error)> reload;
    std::shared_ptr<spdlog::logger> access_log;
    const core::Clock& clock;
    store::MemoryStore store;
    std::unique_ptr<redis::RedisStore> redis;  // store.backend: redis (then `store` is unused)
    std::atomic<bool> draining{false};
    std::atomic<std::uint64_t> open_connections{0};
    metrics::Registry registry;
    GatewayMetrics metrics;
};

/// One per worker thread; touched only from that thread's event loop.
struct Worker {
    explicit Worker(Services& s) : services(s), ioc(1), access_flush_timer(ioc) {}

    /// This worker's pool for an upstream, created (or re-pointed after a reload) on demand.
    proxy::ConnectionPool& pool_for(const config::UpstreamConfig& upstream, std::size_t workers);
    /// Queues one access-log line; lines leave in batches (see flush_access_log).
    void log_access(std::string_view line);
    /// Hands the queued lines to the access logger as one message.
    void flush_access_log();

    Services& services;
    net::io_context ioc;
    std::optional<net::ip::tcp::acceptor> acceptor;
    std::unordered_map<std::string, std::unique_ptr<proxy::ConnectionPool>> pools;
    std::unordered_set<proxy::TimedStream*> idle_connections;  // closed at once on drain
    std::size_t worker_count = 1;
    // Handing the logger thread one message per request costs a wakeup (and, on few cores, a
    // context switch) per request; a batch per worker every few ms costs one per batch.
    std::string access_batch;
    // Armed by the first line of a batch, so an idle worker sleeps instead of waking to flush.
    net::steady_timer access_flush_timer;
    bool access_flush_armed = false;
};

net::awaitable<void> serve_connection(net::ip::tcp::socket socket, Worker& worker);
net::awaitable<void> serve_admin_connection(net::ip::tcp::socket socket, Services& services);

}  // namespace tokengate::server
