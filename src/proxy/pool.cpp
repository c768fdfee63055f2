#include "tokengate/proxy/pool.hpp"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "tokengate/tls/context.hpp"

namespace tokengate::proxy {

namespace {
constexpr auto k_use = net::as_tuple(net::use_awaitable);

/// An idle connection must have nothing to read. EOF means the upstream closed it; a byte
/// means the upstream sent something no request asked for (a second response, a late body),
/// which the next request would take as its own answer: another tenant's response.
bool unusable(TimedStream& stream) {
    if (stream.tls()) return !stream.tls_idle_and_clean();  // the same, asked of the TLS layer
    char byte;
    auto fd = stream.socket().native_handle();
    ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}
}  // namespace

bool UpstreamHealth::record_failure(const config::UpstreamConfig& config, core::Nanos now) {
    unsigned failures = consecutive_failures_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (failures < config.eject_consecutive_failures) return false;
    consecutive_failures_.store(0, std::memory_order_relaxed);
    ejected_until_.store(now + config.eject_for, std::memory_order_relaxed);
    return true;
}

ConnectionPool::ConnectionPool(net::any_io_executor ex, config::UpstreamConfig config, std::size_t max_open,
                               std::shared_ptr<tls::ClientContext> tls)
    : ex_(std::move(ex)),
      config_(std::move(config)),
      tls_(std::move(tls)),
      max_open_(std::max<std::size_t>(1, max_open)) {}

bool ConnectionPool::differs(const config::UpstreamConfig& config, std::size_t max_open,
                             const tls::ClientContext* tls) const {
    return config.url != config_.url || tls != tls_.get() || config.api_key != config_.api_key ||
           config.connect_timeout != config_.connect_timeout ||
           config.first_byte_timeout != config_.first_byte_timeout ||
           config.stream_idle_timeout != config_.stream_idle_timeout ||
           config.eject_consecutive_failures != config_.eject_consecutive_failures ||
           config.eject_for != config_.eject_for || std::max<std::size_t>(1, max_open) != max_open_;
}

void ConnectionPool::update_config(config::UpstreamConfig config, std::size_t max_open,
                                   std::shared_ptr<tls::ClientContext> tls) {
    // Only a changed address or TLS context retires the idle connections; new timeouts or a new
    // key apply to them from their next request.
    bool same_peer = config.url == config_.url && tls == tls_;
    config_ = std::move(config);
    tls_ = std::move(tls);
    max_open_ = std::max<std::size_t>(1, max_open);
    if (!same_peer) {
        open_ -= idle_.size();
        idle_.clear();
    }
    while (!waiters_.empty()) wake_one();  // a raised limit may have room for them now
}

net::awaitable<ConnectionPool::Acquired> ConnectionPool::acquire(bool fresh) {
    for (;;) {
        while (!fresh && !idle_.empty()) {
            auto conn = std::move(idle_.back());
            idle_.pop_back();
            // Checked on every reuse, however recently it was idle: a byte that arrived after its
            // last response must never reach the next request. (A close that races with reuse
            // is caught by forward's one retry on a reused connection.)
            if (!unusable(conn->stream)) {
                conn->reused = true;
                co_return Acquired{{}, std::move(conn)};
            }
            --open_;
        }
        if (open_ >= max_open_ && !idle_.empty()) {  // a retry trades an idle connection for a new one
            idle_.pop_front();
            --open_;
        }
        if (open_ < max_open_) co_return co_await connect();
        auto timer = std::make_shared<net::steady_timer>(ex_);
        timer->expires_after(std::chrono::nanoseconds(config_.first_byte_timeout));
        waiters_.push_back(timer);
        auto [ec] = co_await timer->async_wait(k_use);
        std::erase(waiters_, timer);
        if (!ec) co_return Acquired{beast::error::timeout, nullptr, true};  // no slot freed in time
    }
}

net::awaitable<ConnectionPool::Acquired> ConnectionPool::connect() {
    ++open_;
    auto conn = std::make_unique<UpstreamConnection>(ex_);
    net::ip::tcp::resolver resolver(ex_);
    auto [rec, endpoints] = co_await resolver.async_resolve(config_.host, std::to_string(config_.port), k_use);
    if (rec) {
        --open_;
        wake_one();
        co_return Acquired{rec, nullptr};
    }
    conn->stream.expires_after(std::chrono::nanoseconds(config_.connect_timeout));
    auto [ec, endpoint] = co_await conn->stream.async_connect(endpoints, k_use);
    if (ec) {
        --open_;
        wake_one();
        co_return Acquired{ec, nullptr};
    }
    conn->stream.socket().set_option(net::ip::tcp::no_delay(true));
    if (!tls_) co_return Acquired{{}, std::move(conn)};
    // The handshake shares the connect deadline: both are "could we reach it at all".
    bool resumed = false;
    auto hec = co_await conn->stream.tls_connect(tls_, config_.host, resumed);
    if (hec) {
        Acquired failed{hec, nullptr, false, Handshake::failed, conn->stream.tls_failure(hec)};
        --open_;
        wake_one();
        co_return failed;
    }
    co_return Acquired{{}, std::move(conn), false, resumed ? Handshake::resumed : Handshake::full, {}};
}

void ConnectionPool::release(std::unique_ptr<UpstreamConnection> connection, bool reusable) {
    if (reusable && connection->buffer.size() == 0) {
        connection->stream.expires_never();
        idle_.push_back(std::move(connection));
    } else {
        beast::error_code ignored;
        connection->stream.socket().close(ignored);
        --open_;
    }
    wake_one();
}

void ConnectionPool::wake_one() {
    if (!waiters_.empty()) {
        waiters_.front()->cancel();
        waiters_.pop_front();
    }
}

}  // namespace tokengate::proxy
