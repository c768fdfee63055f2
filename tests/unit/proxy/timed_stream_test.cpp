#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>

#include <optional>

#include "tokengate/proxy/timed_stream.hpp"

namespace tokengate::proxy {
namespace {

using namespace std::chrono_literals;
using tcp = net::ip::tcp;

/// A connected pair on loopback: `stream` under test, `peer` the other end.
struct Pair {
    net::io_context ioc;
    tcp::acceptor acceptor{ioc, {net::ip::make_address("127.0.0.1"), 0}};
    std::optional<TimedStream> stream;
    tcp::socket peer{ioc};

    Pair() {
        stream.emplace(ioc.get_executor());
        stream->socket().connect(acceptor.local_endpoint());
        acceptor.accept(peer);
    }
    /// Runs until `done`, or fails after a generous bound.
    void run_until(const bool& done) {
        auto give_up = std::chrono::steady_clock::now() + 10s;
        while (!done && std::chrono::steady_clock::now() < give_up) {
            if (ioc.stopped()) ioc.restart();  // it stops whenever it runs out of work
            ioc.run_one_for(100ms);
        }
        ASSERT_TRUE(done) << "the operation never completed";
    }
};

TEST(TimedStream, AReadPastItsDeadlineFailsWithTimeoutAndClosesTheSocket) {
    Pair p;
    char byte;
    beast::error_code result;
    bool done = false;
    auto started = std::chrono::steady_clock::now();
    p.stream->expires_after(50ms);
    p.stream->async_read_some(net::buffer(&byte, 1), [&](beast::error_code ec, std::size_t) {
        result = ec;
        done = true;
    });
    p.run_until(done);
    EXPECT_EQ(result, beast::error::timeout);
    EXPECT_GE(std::chrono::steady_clock::now() - started, 50ms);
    EXPECT_FALSE(p.stream->socket().is_open());
}

TEST(TimedStream, AMovedDeadlineGovernsAndDataBeforeItIsRead) {
    Pair p;
    char byte = 0;
    beast::error_code result = net::error::fault;
    bool done = false;
    // The timer first wakes at 50 ms, finds the deadline moved to 10 s, and waits on; the byte
    // sent at ~150 ms completes the read.
    p.stream->expires_after(50ms);
    p.stream->expires_after(10s);
    p.stream->async_read_some(net::buffer(&byte, 1), [&](beast::error_code ec, std::size_t) {
        result = ec;
        done = true;
    });
    net::steady_timer later(p.ioc, 150ms);
    later.async_wait([&](beast::error_code) { net::write(p.peer, net::buffer("x", 1)); });
    p.run_until(done);
    EXPECT_FALSE(result) << result.message();
    EXPECT_EQ(byte, 'x');
}

TEST(TimedStream, AnEarlierDeadlineMovesTheTimer) {
    Pair p;
    char byte;
    beast::error_code result;
    bool done = false;
    p.stream->expires_after(60s);
    p.stream->expires_after(50ms);
    p.stream->async_read_some(net::buffer(&byte, 1), [&](beast::error_code ec, std::size_t) {
        result = ec;
        done = true;
    });
    p.run_until(done);
    EXPECT_EQ(result, beast::error::timeout);
}

TEST(TimedStream, ADeadlinePassedWhileIdleFailsTheNextOperation) {
    Pair p;
    p.stream->expires_after(20ms);
    net::steady_timer wait(p.ioc, 200ms);
    bool waited = false;
    wait.async_wait([&](beast::error_code) { waited = true; });
    p.run_until(waited);
    beast::error_code result;
    bool done = false;
    p.stream->async_write_some(net::buffer("x", 1), [&](beast::error_code ec, std::size_t) {
        result = ec;
        done = true;
    });
    p.run_until(done);
    EXPECT_EQ(result, beast::error::timeout);
    EXPECT_FALSE(p.stream->socket().is_open());
}

TEST(TimedStream, NoDeadlineAfterExpiresNeverAndCancelAborts) {
    Pair p;
    char byte;
    beast::error_code result;
    bool done = false;
    p.stream->expires_after(30ms);
    p.stream->expires_never();
    p.stream->async_read_some(net::buffer(&byte, 1), [&](beast::error_code ec, std::size_t) {
        result = ec;
        done = true;
    });
    net::steady_timer later(p.ioc, 200ms);  // well past the first deadline
    later.async_wait([&](beast::error_code) { p.stream->cancel(); });
    p.run_until(done);
    EXPECT_EQ(result, net::error::operation_aborted);
    EXPECT_TRUE(p.stream->socket().is_open());
}

TEST(TimedStream, DestroyedWithItsTimerPendingIsSafe) {
    Pair p;
    p.stream->expires_after(20ms);
    p.stream.reset();
    net::steady_timer wait(p.ioc, 100ms);
    bool waited = false;
    wait.async_wait([&](beast::error_code) { waited = true; });
    p.run_until(waited);  // the stale timer handler ran without touching the stream (ASan's build checks)
}

}  // namespace
}  // namespace tokengate::proxy
