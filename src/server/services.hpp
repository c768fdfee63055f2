#pragma once

// Internal to the server module: what the connection coroutines share.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>

#include "log_throttle.hpp"
#include "tokengate/auth/subjects.hpp"
#include "tokengate/core/clock.hpp"
#include "tokengate/cost/output_history.hpp"
#include "tokengate/limiter/exposure.hpp"
#include "tokengate/metrics/activity.hpp"
#include "tokengate/metrics/registry.hpp"
#include "tokengate/proxy/pool.hpp"
#include "tokengate/server/access_log.hpp"
#include "tokengate/server/runtime.hpp"
#include "tokengate/store/store.hpp"

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
    metrics::Family& settlements_pending;
    metrics::Family& queue_wait;
    metrics::Family& inflight;
    metrics::Family& remaining_ratio;
    metrics::Family& quota_used;
    metrics::Family& quota_limit;
    metrics::Family& config_reloads;
    metrics::Family& output_capped;
    metrics::Family& streams_stopped;
    metrics::Family& usage_clamped;
    metrics::Family& upstream_retries;
    metrics::Family& tls_handshakes;
    metrics::Family& tls_handshake_failures;
    metrics::Family& upstream_tls_handshakes;
    metrics::Family& tls_certificate_not_after;
    metrics::Family& upstream_metrics_up;
    metrics::Family& upstream_queue;
    metrics::Family& upstream_running;
    metrics::Family& upstream_kv_cache;
    metrics::Family& adaptive_rate;

    /// The families a request updates by its tenant alone, and by its upstream alone. Their
    /// series are found through a per-thread slot per name, all of a name's families together
    /// (SPEC §19): a lookup hashes the name once into a small table, not family and labels into
    /// the registry's per-thread index, whose thousands of entries miss the cache.
    enum class PerTenant { admitted, settled, cost_reserved, cost_settled, count };
    enum class PerUpstream { inflight, duration, ttfb, count };
    metrics::Family::Ref series(PerTenant family, std::string_view tenant);
    metrics::Family::Ref series(PerUpstream family, std::string_view upstream);

private:
    const std::uint64_t id_;  // tells the per-thread slots of two gateways in one process apart
};

/// Shared by every worker thread.
struct Services {
    Services(std::shared_ptr<const Runtime> runtime, std::shared_ptr<AccessLog> log, const core::Clock& c)
        : runtime(std::move(runtime)),
          access_log(std::move(log)),
          clock(c),
          metrics(registry),
          pricing(std::make_unique<net::thread_pool>(this->runtime.get()->config->server.pricing_threads)) {}

    RuntimeHolder runtime;
    std::string config_path;
    /// Loads config_path and swaps it in; false (and `error`) if it is invalid.
    std::function<bool(std::string& error)> reload;
    std::shared_ptr<AccessLog> access_log;
    const core::Clock& clock;
    std::atomic<bool> draining{false};
    std::atomic<std::uint64_t> open_connections{0};
    metrics::Registry registry;
    GatewayMetrics metrics;
    auth::SubjectDirectory subjects;                              // each tenant's most recent end users (SPEC §21)
    metrics::Activity activity;                                   // the status page's last five minutes and hour
    cost::OutputHistory output_history;                           // settled output per (tenant, model), across reloads
    limiter::Exposure answers_in_flight;                          // SPEC §17: what they may still be charged
    LogThrottle handshake_log{core::k_nanos_per_second};          // failed client TLS handshakes, per reason
    LogThrottle upstream_tls_log{10 * core::k_nanos_per_second};  // an https upstream's, per upstream
    LogThrottle usage_clamp_log{LogThrottle::k_once};             // impossible usage reports: once per upstream
    /// SPEC §17: large bodies are tokenized here, so the event loops keep serving meanwhile.
    std::unique_ptr<net::thread_pool> pricing;
    // Last, so it goes first: a store that reports to the metrics never outlives them.
    std::unique_ptr<store::Store> store;  // built by make_store once the event loops exist
};

/// One per worker thread; touched only from that thread's event loop.
struct Worker {
    explicit Worker(Services& s) : services(s), ioc(1), access_flush_timer(ioc) {}

    /// This worker's pool for an upstream, created (or re-pointed after a reload) on demand.
    proxy::ConnectionPool& pool_for(const config::UpstreamConfig& upstream, std::size_t workers,
                                    const std::shared_ptr<tls::ClientContext>& tls);
    /// Where the next access-log line is written, straight into the batch; lines leave in
    /// batches (see flush_access_log). Call access_line_written() after each.
    std::string& next_access_line() {
        if (!access_batch.empty()) access_batch += '\n';
        return access_batch;
    }
    void access_line_written();
    /// Hands the queued lines to the access logger as one message.
    void flush_access_log();

    Services& services;
    net::io_context ioc;
    std::optional<net::ip::tcp::acceptor> acceptor;
    std::optional<net::ip::tcp::acceptor> plain_acceptor;  // beside a TLS listener (server.tls.plain_listen)
    std::unordered_map<std::string, std::unique_ptr<proxy::ConnectionPool>> pools;
    /// Every client connection with its "between requests" flag: a drain closes the idle ones
    /// at once. Registered once per connection, not per request.
    std::unordered_map<proxy::TimedStream*, const bool*> client_connections;
    std::size_t worker_count = 1;
    // Handing the logger thread one message per request costs a wakeup (and, on few cores, a
    // context switch) per request; a batch per worker every few ms costs one per batch.
    std::string access_batch;
    // Armed by the first line of a batch, so an idle worker sleeps instead of waking to flush.
    net::steady_timer access_flush_timer;
    bool access_flush_armed = false;
};

/// The configured store (store.backend), attached to the workers' event loops: the one place
/// that knows which stores exist.
std::unique_ptr<store::Store> make_store(const config::GatewayConfig& config, const core::Clock& clock,
                                         metrics::Registry& registry, std::span<const std::unique_ptr<Worker>> workers);

/// With the Redis store, the book of keys and tenants made at run time, kept in Redis and read
/// again whenever another replica changes it (SPEC §21), reached as `store` reaches Redis; null
/// with the memory store, whose book is auth.keys_file's (the Runtime's).
std::shared_ptr<RunTimeBook> make_shared_book(const store::Store& store, Worker& first);

/// Whether a reload changes the store in a way only a restart applies.
bool store_changed(const config::StoreConfig& was, const config::StoreConfig& now);

/// One of server.max_connections: taken as a connection is accepted, before its session starts
/// (so the bursts that several workers accept at once count each other's connections), and
/// given back when the session ends, or is destroyed unstarted at shutdown.
class ConnectionSlot {
public:
    /// A slot, unless `limit` connections are open already.
    static std::optional<ConnectionSlot> take(std::atomic<std::uint64_t>& open, std::uint64_t limit) {
        auto count = open.load();
        do {
            if (count >= limit) return std::nullopt;
        } while (!open.compare_exchange_weak(count, count + 1));
        return ConnectionSlot(open);
    }
    ConnectionSlot(ConnectionSlot&& other) noexcept : open_(std::exchange(other.open_, nullptr)) {}
    ConnectionSlot& operator=(ConnectionSlot&&) = delete;
    ~ConnectionSlot() {
        if (open_) open_->fetch_sub(1);
    }

private:
    explicit ConnectionSlot(std::atomic<std::uint64_t>& open) : open_(&open) {}
    std::atomic<std::uint64_t>* open_;
};

/// `tls`: the listener's context when the connection came to the TLS listener.
net::awaitable<void> serve_connection(net::ip::tcp::socket socket, Worker& worker, bool tls, ConnectionSlot slot);
net::awaitable<void> serve_admin_connection(net::ip::tcp::socket socket, Services& services);

}  // namespace tokengate::server
