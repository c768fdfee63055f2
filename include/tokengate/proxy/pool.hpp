#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>

#include "tokengate/config/config.hpp"
#include "tokengate/proxy/timed_stream.hpp"

namespace tokengate::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;

struct UpstreamConnection {
    static constexpr std::size_t k_relay_size = 16 * 1024;

    // Beast reads into the buffer's free capacity, at least 512 bytes: without room reserved an
    // upstream stream arrives 512 bytes a read, an SSE event per system call. The relay buffer
    // is left uninitialised: only the bytes a body uses become resident.
    explicit UpstreamConnection(net::any_io_executor ex)
        : stream(std::move(ex)), relay_buffer(std::make_unique_for_overwrite<char[]>(k_relay_size)) {
        buffer.reserve(16 * 1024);
    }
    TimedStream stream;
    beast::flat_buffer buffer;
    std::unique_ptr<char[]> relay_buffer;  // response body pieces on their way to the client (k_relay_size)
    bool reused = false;
};

/// Passive health of one upstream, shared by every worker thread: after N consecutive
/// failures the upstream is ejected for a while (SPEC §10).
class UpstreamHealth {
public:
    bool available(core::Nanos now) const { return now >= ejected_until_.load(std::memory_order_relaxed); }
    void record_success() { consecutive_failures_.store(0, std::memory_order_relaxed); }
    /// Returns true when this failure ejects the upstream.
    bool record_failure(const config::UpstreamConfig& config, core::Nanos now);

private:
    std::atomic<unsigned> consecutive_failures_{0};
    std::atomic<core::Nanos> ejected_until_{0};
};

/// Keep-alive connections to one upstream, owned by one worker thread (no locking).
/// At most `max_open` connections exist; further acquirers wait in FIFO order.
class ConnectionPool {
public:
    /// `tls`: the upstream's TLS context (https), or null.
    ConnectionPool(net::any_io_executor ex, config::UpstreamConfig config, std::size_t max_open,
                   std::shared_ptr<tls::ClientContext> tls = nullptr);

    enum class Handshake { none, full, resumed, failed };
    struct Acquired {
        beast::error_code ec;  // beast::error::timeout when no connection could be had in time
        std::unique_ptr<UpstreamConnection> connection;
        bool pool_exhausted = false;            // timed out waiting for a free slot: not the upstream's fault
        Handshake handshake = Handshake::none;  // a new https connection's
        std::string tls_failure{};              // why its handshake failed, for the log
    };
    /// An idle pooled connection, or a new one. `fresh` skips the idle ones (a retry).
    net::awaitable<Acquired> acquire(bool fresh);
    /// Returns a connection; a reusable one goes back to the idle list.
    void release(std::unique_ptr<UpstreamConnection> connection, bool reusable);

    const config::UpstreamConfig& config() const { return config_; }
    std::size_t open() const { return open_; }
    const tls::ClientContext* tls() const { return tls_.get(); }
    /// Whether a reloaded upstream's settings differ from the ones in use (cheap: per request).
    bool differs(const config::UpstreamConfig& config, std::size_t max_open, const tls::ClientContext* tls) const;
    void update_config(config::UpstreamConfig config, std::size_t max_open, std::shared_ptr<tls::ClientContext> tls);

private:
    net::awaitable<Acquired> connect();
    void wake_one();

    net::any_io_executor ex_;
    config::UpstreamConfig config_;
    std::shared_ptr<tls::ClientContext> tls_;
    std::size_t max_open_;
    std::size_t open_ = 0;
    std::deque<std::unique_ptr<UpstreamConnection>> idle_;
    std::deque<std::shared_ptr<net::steady_timer>> waiters_;
};

}  // namespace tokengate::proxy
