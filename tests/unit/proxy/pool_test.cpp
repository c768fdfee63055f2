// ConnectionPool against an in-process loopback listener: reuse, eviction of connections the
// upstream closed or wrote to unasked, and the connection limit.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>

#include <cstring>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "tokengate/proxy/pool.hpp"

namespace tokengate::proxy {
namespace {

using namespace std::chrono_literals;
using tcp = net::ip::tcp;

struct Fixture {
    net::io_context ioc;
    tcp::acceptor acceptor{ioc, {net::ip::make_address("127.0.0.1"), 0}};
    std::vector<tcp::socket> accepted;  // the upstream's ends, in connection order
    std::optional<ConnectionPool> pool;

    explicit Fixture(std::size_t max_open = 4) {
        config::UpstreamConfig cfg;
        cfg.host = "127.0.0.1";
        cfg.port = acceptor.local_endpoint().port();
        cfg.first_byte_timeout = 300'000'000;  // how long an acquirer waits for a free slot
        pool.emplace(ioc.get_executor(), cfg, max_open);
    }
    ConnectionPool::Acquired acquire(bool fresh = false) {
        std::optional<ConnectionPool::Acquired> out;
        net::co_spawn(ioc, pool->acquire(fresh),
                      [&](std::exception_ptr, ConnectionPool::Acquired a) { out = std::move(a); });
        run_until([&] { return out.has_value(); });
        if (out->connection && !out->connection->reused) accepted.push_back(acceptor.accept());
        return std::move(*out);
    }
    /// Starts an acquire that `out` receives once the loop completes it.
    void acquire_later(std::optional<ConnectionPool::Acquired>& out) {
        net::co_spawn(ioc, pool->acquire(false),
                      [&out](std::exception_ptr, ConnectionPool::Acquired a) { out = std::move(a); });
    }
    void run_until(const std::function<bool()>& done) {
        for (auto give_up = std::chrono::steady_clock::now() + 10s;
             !done() && std::chrono::steady_clock::now() < give_up;) {
            if (ioc.stopped()) ioc.restart();
            ioc.run_one_for(50ms);
        }
        ASSERT_TRUE(done());
    }
};

TEST(ConnectionPool, AReleasedConnectionIsReused) {
    Fixture f;
    auto first = f.acquire();
    ASSERT_TRUE(first.connection) << first.ec.message();
    EXPECT_FALSE(first.connection->reused);
    auto* raw = first.connection.get();
    f.pool->release(std::move(first.connection), true);
    auto second = f.acquire();
    ASSERT_TRUE(second.connection);
    EXPECT_TRUE(second.connection->reused);
    EXPECT_EQ(second.connection.get(), raw);
    EXPECT_EQ(f.pool->open(), 1u);
    EXPECT_EQ(f.accepted.size(), 1u);
}

TEST(ConnectionPool, AConnectionTheUpstreamClosedIsNotReused) {
    Fixture f;
    auto first = f.acquire();
    f.pool->release(std::move(first.connection), true);
    f.accepted[0].close();
    std::this_thread::sleep_for(20ms);  // the FIN reaches our end
    auto second = f.acquire();
    ASSERT_TRUE(second.connection);
    EXPECT_FALSE(second.connection->reused) << "a new connection, not the closed one";
    EXPECT_EQ(f.pool->open(), 1u) << "the closed one no longer counts";
}

TEST(ConnectionPool, AConnectionWithBytesNobodyAskedForIsNotReused) {
    // However recently it went idle: those bytes would be the next request's "response".
    Fixture f;
    auto first = f.acquire();
    f.pool->release(std::move(first.connection), true);
    net::write(f.accepted[0], net::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON")));
    std::this_thread::sleep_for(20ms);
    auto second = f.acquire();
    ASSERT_TRUE(second.connection);
    EXPECT_FALSE(second.connection->reused);
    EXPECT_EQ(f.accepted.size(), 2u);
}

TEST(ConnectionPool, AConnectionWithUnreadBytesNeverGoesBackToThePool) {
    Fixture f;
    auto first = f.acquire();
    auto bytes = first.connection->buffer.prepare(3);
    std::memcpy(bytes.data(), "abc", 3);
    first.connection->buffer.commit(3);
    f.pool->release(std::move(first.connection), true);
    EXPECT_EQ(f.pool->open(), 0u) << "closed, though the exchange called it reusable";
}

TEST(ConnectionPool, AtTheLimitAnAcquirerWaitsForARelease) {
    Fixture f(1);
    auto first = f.acquire();
    ASSERT_TRUE(first.connection);
    std::optional<ConnectionPool::Acquired> waiting;
    f.acquire_later(waiting);
    for (int i = 0; i < 5; ++i) f.ioc.run_one_for(10ms);
    EXPECT_FALSE(waiting) << "no second connection past max_open";
    f.pool->release(std::move(first.connection), true);
    f.run_until([&] { return waiting.has_value(); });
    ASSERT_TRUE(waiting->connection);
    EXPECT_TRUE(waiting->connection->reused);

    std::optional<ConnectionPool::Acquired> starved;
    f.acquire_later(starved);
    f.run_until([&] { return starved.has_value(); });  // the 300 ms first-byte timeout
    EXPECT_TRUE(starved->pool_exhausted);
    EXPECT_FALSE(starved->connection);
}

TEST(ConnectionPool, NewTimeoutsKeepTheIdleConnectionsAndANewAddressRetiresThem) {
    Fixture f;
    auto first = f.acquire();
    auto* raw = first.connection.get();
    f.pool->release(std::move(first.connection), true);
    auto cfg = f.pool->config();
    EXPECT_FALSE(f.pool->differs(cfg, 4, nullptr));
    cfg.first_byte_timeout = 7'000'000'000;
    ASSERT_TRUE(f.pool->differs(cfg, 4, nullptr)) << "a reloaded timeout must reach the pool";
    f.pool->update_config(cfg, 4, nullptr);
    EXPECT_EQ(f.pool->config().first_byte_timeout, 7'000'000'000);
    auto second = f.acquire();
    ASSERT_TRUE(second.connection);
    EXPECT_EQ(second.connection.get(), raw) << "the same upstream: its idle connection is still good";
    f.pool->release(std::move(second.connection), true);

    cfg.url = "http://127.0.0.1:1";
    EXPECT_TRUE(f.pool->differs(cfg, 4, nullptr));
    f.pool->update_config(cfg, 4, nullptr);
    EXPECT_EQ(f.pool->open(), 0u) << "a connection to the old address is not reused";
    EXPECT_TRUE(f.pool->differs(cfg, 2, nullptr)) << "a new connection limit applies too";
}

TEST(ConnectionPool, ARaisedLimitLetsAWaitingAcquirerConnect) {
    Fixture f(1);
    auto first = f.acquire();
    ASSERT_TRUE(first.connection);
    std::optional<ConnectionPool::Acquired> waiting;
    f.acquire_later(waiting);
    for (int i = 0; i < 5; ++i) f.ioc.run_one_for(10ms);
    ASSERT_FALSE(waiting);
    // Left waiting, it would give up after its 300 ms as pool_exhausted.
    f.pool->update_config(f.pool->config(), 2, nullptr);
    f.run_until([&] { return waiting.has_value(); });
    ASSERT_TRUE(waiting->connection) << waiting->ec.message();
    EXPECT_FALSE(waiting->connection->reused);
    EXPECT_EQ(f.pool->open(), 2u);
}

}  // namespace
}  // namespace tokengate::proxy
