#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <optional>
#include <string>
#include <thread>
#include <tuple>

#include "tokengate/proxy/relay.hpp"
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
    /// Lets the loop run for `duration`: the stream's timer fires meanwhile if it is due.
    void run_for(std::chrono::milliseconds duration) {
        net::steady_timer wait(ioc, duration);
        bool waited = false;
        wait.async_wait([&](beast::error_code) { waited = true; });
        run_until(waited);
    }
    /// Runs `operation` (a read or write of one byte) to its end; the error it ended with.
    template <class Operation>
    beast::error_code complete(Operation operation) {
        beast::error_code result = net::error::fault;
        bool done = false;
        operation([&](beast::error_code ec, std::size_t) {
            result = ec;
            done = true;
        });
        run_until(done);
        return result;
    }
    beast::error_code read_byte(char& byte) {
        return complete([&](auto handler) { stream->async_read_some(net::buffer(&byte, 1), handler); });
    }
};

TEST(TimedStream, AReadPastItsDeadlineFailsWithTimeoutAndClosesTheSocket) {
    Pair p;
    char byte;
    auto started = std::chrono::steady_clock::now();
    p.stream->expires_after(50ms);
    EXPECT_EQ(p.read_byte(byte), beast::error::timeout);
    EXPECT_GE(std::chrono::steady_clock::now() - started, 50ms);
    EXPECT_FALSE(p.stream->socket().is_open());
}

TEST(TimedStream, AMovedDeadlineGovernsAndDataBeforeItIsRead) {
    Pair p;
    char byte = 0;
    // The timer first wakes at 50 ms, finds the deadline moved to 10 s, and waits on; the byte
    // sent at ~150 ms completes the read.
    p.stream->expires_after(50ms);
    p.stream->expires_after(10s);
    net::steady_timer later(p.ioc, 150ms);
    later.async_wait([&](beast::error_code) { net::write(p.peer, net::buffer("x", 1)); });
    auto result = p.read_byte(byte);
    EXPECT_FALSE(result) << result.message();
    EXPECT_EQ(byte, 'x');
}

TEST(TimedStream, AnEarlierDeadlineMovesTheTimer) {
    Pair p;
    char byte;
    p.stream->expires_after(60s);
    p.stream->expires_after(50ms);
    EXPECT_EQ(p.read_byte(byte), beast::error::timeout);
}

TEST(TimedStream, ADeadlinePassedWhileIdleFailsTheNextOperation) {
    Pair p;
    p.stream->expires_after(20ms);
    p.run_for(200ms);
    auto result = p.complete([&](auto handler) { p.stream->async_write_some(net::buffer("x", 1), handler); });
    EXPECT_EQ(result, beast::error::timeout);
    EXPECT_FALSE(p.stream->socket().is_open());
}

TEST(TimedStream, NoDeadlineAfterExpiresNeverAndCancelAborts) {
    Pair p;
    char byte;
    p.stream->expires_after(30ms);
    p.stream->expires_never();
    net::steady_timer later(p.ioc, 200ms);  // well past the first deadline
    later.async_wait([&](beast::error_code) { p.stream->cancel(); });
    EXPECT_EQ(p.read_byte(byte), net::error::operation_aborted);
    EXPECT_TRUE(p.stream->socket().is_open());
}

TEST(TimedStream, DestroyedWithItsTimerPendingIsSafe) {
    Pair p;
    p.stream->expires_after(20ms);
    p.stream.reset();
    p.run_for(100ms);  // the stale timer handler runs without touching the stream (ASan's build checks)
}

// What fits the socket's buffer leaves at once; what does not goes on asynchronously; a
// connection the peer reset is an error, not a SIGPIPE.
TEST(TimedStream, WriteAllSendsAtOnceWhatFitsAndTheRestAfter) {
    Pair pair;
    pair.stream->expires_after(10s);
    std::string small = "HTTP/1.1 200 OK\r\n\r\n";
    beast::error_code ec;
    std::array<net::const_buffer, 2> pieces{net::buffer(small), net::const_buffer()};
    EXPECT_EQ(pair.stream->write_now(pieces, ec), small.size()) << "a small reply needs no wait";
    EXPECT_FALSE(ec);
    std::string got(small.size(), '\0');
    net::read(pair.peer, net::buffer(got));
    EXPECT_EQ(got, small);

    // 16 MB: more than loopback's buffers hold, so the peer must read while it is written.
    std::string big(16 << 20, 'x');
    big.back() = 'y';
    std::optional<std::tuple<beast::error_code, std::size_t>> result;
    net::co_spawn(
        pair.ioc,
        [&]() -> net::awaitable<void> {
            std::array<net::const_buffer, 2> both{net::buffer(big), net::buffer(small)};
            result = co_await write_all(*pair.stream, both);
        },
        net::detached);
    std::string received;
    pair.peer.non_blocking(true);
    auto give_up = std::chrono::steady_clock::now() + 30s;
    while (received.size() < big.size() + small.size() && std::chrono::steady_clock::now() < give_up) {
        pair.ioc.poll();
        if (pair.ioc.stopped()) pair.ioc.restart();
        char chunk[65536];
        beast::error_code rec;
        auto n = pair.peer.read_some(net::buffer(chunk), rec);
        received.append(chunk, rec ? 0 : n);
    }
    while (!result && std::chrono::steady_clock::now() < give_up) pair.ioc.run_one_for(100ms);
    ASSERT_TRUE(result);
    EXPECT_FALSE(std::get<0>(*result));
    EXPECT_EQ(std::get<1>(*result), big.size() + small.size());
    ASSERT_EQ(received.size(), big.size() + small.size());
    EXPECT_EQ(received.substr(big.size() - 1, 2), "yH") << "every byte, in order";

    pair.peer.set_option(net::socket_base::linger(true, 0));
    pair.peer.close();  // a reset
    std::this_thread::sleep_for(50ms);
    std::size_t sent = 0;
    for (int i = 0; i < 3 && !ec; ++i) sent += pair.stream->write_now(pieces, ec);
    EXPECT_TRUE(ec) << "wrote " << sent << " bytes to a reset connection";
}

}  // namespace
}  // namespace tokengate::proxy
