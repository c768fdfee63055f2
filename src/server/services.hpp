#pragma once

// Internal to the server module: what the connection coroutines share.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "tokengate/core/clock.hpp"
#include "tokengate/proxy/pool.hpp"
#include "tokengate/server/runtime.hpp"
#include "tokengate/store/memory_store.hpp"

namespace spdlog {
class logger;
}

namespace tokengate::server {

namespace net = boost::asio;
namespace beast = boost::beast;

/// Shared by every worker thread.
struct Services {
    Services(std::shared_ptr<const Runtime> runtime, std::shared_ptr<spdlog::logger> log,
             const core::Clock& c)
        : runtime(std::move(runtime)), access_log(std::move(log)), clock(c), store(c) {}

    RuntimeHolder runtime;
    std::shared_ptr<spdlog::logger> access_log;
    const core::Clock& clock;
    store::MemoryStore store;
    std::atomic<bool> draining{false};
    std::atomic<std::uint64_t> open_connections{0};
};

/// One per worker thread; touched only from that thread's event loop.
struct Worker {
    explicit Worker(Services& s) : services(s), ioc(1) {}

    /// This worker's pool for an upstream, created (or re-pointed after a reload) on demand.
    proxy::ConnectionPool& pool_for(const config::UpstreamConfig& upstream, std::size_t workers);

    Services& services;
    net::io_context ioc;
    std::optional<net::ip::tcp::acceptor> acceptor;
    std::unordered_map<std::string, std::unique_ptr<proxy::ConnectionPool>> pools;
    std::unordered_set<beast::tcp_stream*> idle_connections;  // closed at once on drain
    std::size_t worker_count = 1;
};

net::awaitable<void> serve_connection(net::ip::tcp::socket socket, Worker& worker);

}  // namespace tokengate::server
