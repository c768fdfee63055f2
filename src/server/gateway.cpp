#include "tokengate/server/gateway.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <thread>

#include "services.hpp"

namespace tokengate::server {

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);
using reuse_port = net::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

void log_exception(std::exception_ptr e) {
    if (!e) return;
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& ex) {
        spdlog::error("connection ended by an exception: {}", ex.what());
    }
}

class GatewayImpl final : public Gateway {
public:
    GatewayImpl(std::shared_ptr<const config::GatewayConfig> config, std::shared_ptr<spdlog::logger> log,
                const core::Clock& clock)
        : services_(std::make_shared<const Runtime>(config), std::move(log), clock) {
        unsigned threads = config->server.threads ? config->server.threads
                                                  : std::max(1u, std::thread::hardware_concurrency());
        auto address = net::ip::make_address(config->server.host);
        net::ip::tcp::endpoint endpoint{address, config->server.port};
        for (unsigned i = 0; i < threads; ++i) {
            auto w = std::make_unique<Worker>(services_);
            w->worker_count = threads;
            auto& acc = w->acceptor.emplace(w->ioc);
            acc.open(endpoint.protocol());
            acc.set_option(net::socket_base::reuse_address(true));
            acc.set_option(reuse_port(true));
            acc.bind(endpoint);
            acc.listen(net::socket_base::max_listen_connections);
            endpoint = acc.local_endpoint();  // port 0: every worker shares the port the first got
            workers_.push_back(std::move(w));
        }
        port_ = endpoint.port();
    }

    void run() override {
        for (auto& w : workers_) net::co_spawn(w->ioc, accept_loop(*w), log_exception);
        net::co_spawn(workers_.front()->ioc, evict_idle_buckets(*workers_.front()), net::detached);
        std::vector<std::thread> threads;
        for (std::size_t i = 1; i < workers_.size(); ++i)
            threads.emplace_back([w = workers_[i].get()] { run_worker(*w); });
        run_worker(*workers_.front());
        for (auto& t : threads) t.join();
    }

    void drain() override {
        if (services_.draining.exchange(true)) return;
        for (auto& w : workers_) {
            net::post(w->ioc, [w = w.get()] {
                beast::error_code ignored;
                if (w->acceptor) w->acceptor->close(ignored);
                for (auto* stream : w->idle_connections) stream->cancel();
            });
        }
        auto timeout = services_.runtime.get()->config->server.drain_timeout;
        net::co_spawn(workers_.front()->ioc, wait_for_drain(timeout), net::detached);
    }

    void stop() override {
        stopping_ = true;
        for (auto& w : workers_) w->ioc.stop();
    }

    void reload(std::shared_ptr<const config::GatewayConfig> config) override {
        auto previous = services_.runtime.get();
        services_.runtime.set(std::make_shared<const Runtime>(std::move(config), previous.get()));
    }

    unsigned short port() const override { return port_; }

private:
    static void run_worker(Worker& w) {
        for (;;) {
            try {
                w.ioc.run();
                return;
            } catch (const std::exception& e) {
                spdlog::error("worker loop: {}", e.what());
            }
        }
    }

    net::awaitable<void> accept_loop(Worker& w) {
        for (;;) {
            auto [ec, socket] = co_await w.acceptor->async_accept(k_use);
            if (ec) {
                if (!w.acceptor->is_open() || services_.draining.load()) co_return;
                // Out of descriptors and the like: back off briefly rather than spin.
                net::steady_timer pause(w.ioc, std::chrono::milliseconds(20));
                co_await pause.async_wait(k_use);
                continue;
            }
            auto limit = services_.runtime.get()->config->server.max_connections;
            if (services_.open_connections.load() >= limit) {
                beast::error_code ignored;
                socket.close(ignored);
                continue;
            }
            net::co_spawn(w.ioc, serve_connection(std::move(socket), w), log_exception);
        }
    }

    net::awaitable<void> evict_idle_buckets(Worker& w) {
        net::steady_timer timer(w.ioc);
        while (!services_.draining.load()) {
            timer.expires_after(std::chrono::seconds(10));
            auto [ec] = co_await timer.async_wait(k_use);
            if (ec) co_return;
            services_.store.evict_idle();
        }
    }

    net::awaitable<void> wait_for_drain(core::Nanos timeout) {
        net::steady_timer timer(workers_.front()->ioc);
        auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout);
        while (services_.open_connections.load() > 0 && std::chrono::steady_clock::now() < deadline) {
            timer.expires_after(std::chrono::milliseconds(20));
            co_await timer.async_wait(k_use);
        }
        if (services_.open_connections.load() > 0)
            spdlog::warn("drain timeout: closing {} connections still open", services_.open_connections.load());
        stop();
    }

    Services services_;
    std::vector<std::unique_ptr<Worker>> workers_;
    unsigned short port_ = 0;
    std::atomic<bool> stopping_{false};
};

}  // namespace

proxy::ConnectionPool& Worker::pool_for(const config::UpstreamConfig& upstream, std::size_t workers) {
    auto per_worker = (upstream.max_connections + workers - 1) / workers;
    auto& pool = pools[upstream.name];
    if (!pool) pool = std::make_unique<proxy::ConnectionPool>(ioc.get_executor(), upstream, per_worker);
    else if (pool->config().url != upstream.url || pool->config().api_key != upstream.api_key)
        pool->update_config(upstream, per_worker);
    return *pool;
}

std::unique_ptr<Gateway> make_gateway(std::shared_ptr<const config::GatewayConfig> config,
                                      std::shared_ptr<spdlog::logger> access_log, const core::Clock& clock) {
    return std::make_unique<GatewayImpl>(std::move(config), std::move(access_log), clock);
}

}  // namespace tokengate::server
