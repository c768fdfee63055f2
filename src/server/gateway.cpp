#include "tokengate/server/gateway.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <thread>

#include "jwks_watch.hpp"
#include "load_scraper.hpp"
#include "run_time_book.hpp"
#include "services.hpp"
#include "state_keeper.hpp"
#include "tokengate/config/loader.hpp"
#include "tokengate/server/responses.hpp"
#include "tokengate/tls/context.hpp"

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
    GatewayImpl(std::shared_ptr<const config::GatewayConfig> config, std::string config_path,
                std::shared_ptr<AccessLog> log, const core::Clock& clock, bool ignore_state)
        : services_(std::make_shared<const Runtime>(config), std::move(log), clock) {
        services_.config_path = std::move(config_path);
        services_.reload = [this](std::string& error) { return reload_from_file(error); };
        unsigned threads =
            config->server.threads ? config->server.threads : std::max(1u, std::thread::hardware_concurrency());
        auto address = net::ip::make_address(config->server.host);
        net::ip::tcp::endpoint endpoint{address, config->server.port};
        const auto& tls = config->server.tls;
        std::optional<net::ip::tcp::endpoint> plain;
        if (tls && tls->plain) plain.emplace(net::ip::make_address(tls->plain_host), tls->plain_port);
        for (unsigned i = 0; i < threads; ++i) {
            auto w = std::make_unique<Worker>(services_);
            w->worker_count = threads;
            // port 0: every worker shares the port the first got
            endpoint = listen_on(w->acceptor.emplace(w->ioc), endpoint);
            if (plain) plain = listen_on(w->plain_acceptor.emplace(w->ioc), *plain);
            workers_.push_back(std::move(w));
        }
        port_ = endpoint.port();
        if (plain) plain_port_ = plain->port();
        if (config->admin.enabled) {
            net::ip::tcp::endpoint admin{net::ip::make_address(config->admin.host), config->admin.port};
            auto& acc = admin_acceptor_.emplace(workers_.front()->ioc);
            acc.open(admin.protocol());
            acc.set_option(net::socket_base::reuse_address(true));
            acc.bind(admin);
            acc.listen();
            admin_port_ = acc.local_endpoint().port();
        }
        note_certificate(*services_.runtime.get());
        // Last: nothing that can still fail may follow connections bound to the loops.
        services_.store = make_store(*config, clock, services_.registry, workers_);
        if (auto book = make_shared_book(*services_.store, *workers_.front()))
            services_.runtime.set(std::make_shared<const Runtime>(config, services_.runtime.get().get(), book));
        if (config->store.backend == config::StoreBackend::memory && !config->store.state_file.path.empty())
            state_.emplace(config->store.state_file.path, config->store.snapshot_interval, *services_.store, clock,
                           services_.registry, ignore_state);
    }

    void run() override {
        bool tls = services_.runtime.get()->server_tls != nullptr;
        for (auto& w : workers_) {
            net::co_spawn(w->ioc, accept_loop(*w, *w->acceptor, tls), log_exception);
            if (w->plain_acceptor) net::co_spawn(w->ioc, accept_loop(*w, *w->plain_acceptor, false), log_exception);
        }
        if (admin_acceptor_) net::co_spawn(workers_.front()->ioc, admin_accept_loop(), log_exception);
        net::co_spawn(workers_.front()->ioc, evict_idle_buckets(*workers_.front()), net::detached);
        net::co_spawn(workers_.front()->ioc, watch_upstream_load(services_), log_exception);
        net::co_spawn(workers_.front()->ioc, watch_jwks(services_), log_exception);
        std::vector<std::thread> threads;
        for (std::size_t i = 1; i < workers_.size(); ++i)
            threads.emplace_back([w = workers_[i].get()] { run_worker(*w); });
        if (state_) state_->start();
        run_worker(*workers_.front());
        for (auto& t : threads) t.join();
        if (state_) state_->stop();                      // and the last snapshot, with every settlement in it
        for (auto& w : workers_) w->flush_access_log();  // the loops are done: no line stays behind
        services_.store->stop();
        if (const auto& book = services_.runtime.get()->book) book->stop();
    }

    void drain() override {
        if (services_.draining.exchange(true)) return;
        for (auto& w : workers_) {
            net::post(w->ioc, [w = w.get()] {
                beast::error_code ignored;
                if (w->acceptor) w->acceptor->close(ignored);
                if (w->plain_acceptor) w->plain_acceptor->close(ignored);
                for (auto [stream, idle] : w->client_connections)
                    if (*idle) stream->cancel();
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
        if (config->server.host != previous->config->server.host ||
            config->server.port != previous->config->server.port)
            spdlog::warn("reload: server.listen changed; it takes effect only at restart");
        // The listeners were opened for one protocol; a certificate can change, the protocol not.
        const auto& was_tls = previous->config->server.tls;
        if (config->server.tls.has_value() != was_tls.has_value())
            throw std::runtime_error("server.tls cannot be turned on or off by a reload; restart the gateway");
        if (config->server.tls &&
            (config->server.tls->plain != was_tls->plain || config->server.tls->plain_port != was_tls->plain_port ||
             config->server.tls->plain_host != was_tls->plain_host))
            spdlog::warn("reload: server.tls.plain_listen changed; it takes effect only at restart");
        const auto& was = previous->config->store;
        if (store_changed(was, config->store))
            spdlog::warn("reload: store backend, URL, pool, TLS and state file take effect only at restart");
        auto fresh = std::make_shared<const Runtime>(std::move(config), previous.get());
        note_certificate(*fresh);
        services_.runtime.set(std::move(fresh));
    }

    bool reload_from_file(std::string& error) override {
        try {
            auto fresh = config::load_config_file(services_.config_path);
            reload(fresh);
            services_.metrics.config_reloads.add({"success"});
            spdlog::info("configuration reloaded from {}", services_.config_path);
            return true;
        } catch (const config::ConfigError& e) {
            error = e.what();
        } catch (const std::exception& e) {
            error = services_.config_path + ": " + e.what();
        }
        services_.metrics.config_reloads.add({"failure"});
        spdlog::error("reload refused, the previous configuration keeps serving: {}", error);
        return false;
    }

    unsigned short port() const override { return port_; }
    unsigned short admin_port() const override { return admin_port_; }
    unsigned short plain_port() const override { return plain_port_; }

private:
    void note_certificate(const Runtime& runtime) {
        if (runtime.server_tls)
            services_.metrics.tls_certificate_not_after.set(
                {}, static_cast<double>(tls::certificate_not_after(*runtime.server_tls)));
    }

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

    static net::ip::tcp::endpoint listen_on(net::ip::tcp::acceptor& acc, const net::ip::tcp::endpoint& endpoint) {
        acc.open(endpoint.protocol());
        acc.set_option(net::socket_base::reuse_address(true));
        acc.set_option(reuse_port(true));
        acc.bind(endpoint);
        acc.listen(net::socket_base::max_listen_connections);
        return acc.local_endpoint();
    }

    net::awaitable<void> accept_loop(Worker& w, net::ip::tcp::acceptor& acceptor, bool tls) {
        co_await wait_for_store(w);
        beast::error_code ignored;
        acceptor.non_blocking(true, ignored);  // for the accepts after the first, below
        for (;;) {
            auto [ec, socket] = co_await acceptor.async_accept(k_use);
            if (ec) {
                if (!acceptor.is_open() || services_.draining.load()) co_return;
                // Out of descriptors and the like: back off briefly rather than spin.
                net::steady_timer pause(w.ioc, std::chrono::milliseconds(20));
                co_await pause.async_wait(k_use);
                continue;
            }
            // Then the rest of the backlog at once: one accept per trip through a busy event loop
            // kept a burst of new connections waiting behind every request in flight (a p99 of
            // 100-490 ms at 256 new connections, against 11-22 ms so).
            // At the connection limit the rest wait for the next turn (and a slot, or their 503).
            take_connection(w, std::move(socket), tls);
            auto limit = services_.runtime.get()->config->server.max_connections;
            for (int more = 0; more < k_accepts_at_once && services_.open_connections.load() < limit; ++more) {
                beast::error_code aec;
                net::ip::tcp::socket next(w.ioc);
                acceptor.accept(next, aec);
                if (aec) break;
                take_connection(w, std::move(next), tls);
            }
        }
    }

    // At most this many more a wake-up, so the requests in flight are not held up for long.
    static constexpr int k_accepts_at_once = 64;

    /// Serves `socket`, or refuses it at the connection limit.
    void take_connection(Worker& w, net::ip::tcp::socket socket, bool tls) {
        auto limit = services_.runtime.get()->config->server.max_connections;
        auto slot = ConnectionSlot::take(services_.open_connections, limit);
        if (!slot) {
            // Refuse cleanly: one small non-blocking write of a 503, then close.
            static const std::string k_full = [] {
                std::string body = error_body("The gateway is at its connection limit; retry shortly.", "server_error",
                                              "too_many_connections");
                return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                       "Connection: close\r\nRetry-After: 1\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body;
            }();
            beast::error_code ignored;
            socket.non_blocking(true, ignored);
            // A TLS client would read the plain answer as a broken handshake: it gets the close.
            if (!tls) socket.write_some(net::buffer(k_full), ignored);
            socket.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
            socket.close(ignored);
            return;
        }
        net::co_spawn(w.ioc, serve_connection(std::move(socket), w, tls, std::move(*slot)), log_exception);
    }

    /// With a shared store, the first requests wait (in the listen backlog, up to 3 s) for its
    /// connections rather than all falling back at startup.
    net::awaitable<void> wait_for_store(Worker& w) {
        bool ready = co_await services_.store->wait_ready(std::chrono::seconds(3));
        if (!ready && &w == workers_.front().get())
            spdlog::warn("the store is not reachable yet; serving with on_error until it is");
    }

    net::awaitable<void> admin_accept_loop() {
        for (;;) {
            auto [ec, socket] = co_await admin_acceptor_->async_accept(k_use);
            if (ec) {
                if (!admin_acceptor_->is_open()) co_return;
                continue;
            }
            net::co_spawn(workers_.front()->ioc, serve_admin_connection(std::move(socket), services_), log_exception);
        }
    }

    net::awaitable<void> evict_idle_buckets(Worker& w) {
        net::steady_timer timer(w.ioc);
        while (!services_.draining.load()) {
            timer.expires_after(std::chrono::seconds(10));
            auto [ec] = co_await timer.async_wait(k_use);
            if (ec) co_return;
            services_.store->evict_idle();
        }
    }

    net::awaitable<void> wait_for_drain(core::Nanos timeout) {
        net::steady_timer timer(workers_.front()->ioc);
        const auto& clock = services_.clock;
        auto deadline = clock.now() + timeout;
        while (services_.open_connections.load() > 0 && clock.now() < deadline) {
            timer.expires_after(std::chrono::milliseconds(20));
            co_await timer.async_wait(k_use);
        }
        if (services_.open_connections.load() > 0)
            spdlog::warn("drain timeout: closing {} connections still open", services_.open_connections.load());
        // Settlements still on their way to a shared store get a moment to land, with what
        // this replica holds of its shared limits.
        services_.store->release_leases();
        auto settle_deadline = std::max(deadline, clock.now() + 2 * core::k_nanos_per_second);
        while (services_.store->settlements_outstanding() > 0 && clock.now() < settle_deadline) {
            timer.expires_after(std::chrono::milliseconds(20));
            co_await timer.async_wait(k_use);
        }
        if (auto left = services_.store->settlements_outstanding(); left > 0)
            spdlog::error("shutdown: {} settlements could not reach the store", left);
        beast::error_code ignored;
        if (admin_acceptor_) admin_acceptor_->close(ignored);
        stop();
    }

    Services services_;
    std::vector<std::unique_ptr<Worker>> workers_;
    unsigned short port_ = 0;
    unsigned short admin_port_ = 0;
    unsigned short plain_port_ = 0;
    std::optional<net::ip::tcp::acceptor> admin_acceptor_;
    std::atomic<bool> stopping_{false};
    std::optional<StateKeeper> state_;  // store.state_file
};

}  // namespace

std::unique_ptr<Gateway> make_gateway(std::shared_ptr<const config::GatewayConfig> config, std::string config_path,
                                      std::shared_ptr<AccessLog> access_log, const core::Clock& clock,
                                      bool ignore_state) {
    return std::make_unique<GatewayImpl>(std::move(config), std::move(config_path), std::move(access_log), clock,
                                         ignore_state);
}

}  // namespace tokengate::server
