// The relay, byte for byte, on in-memory streams (beast::test::stream): what the client gets
// for each upstream framing, and how it ends when either side fails mid-body.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/http/read.hpp>

#include <array>
#include <memory>
#include <optional>

#include "tokengate/proxy/relay.hpp"

namespace tokengate::proxy {
namespace {

using namespace std::chrono_literals;
namespace test = beast::test;

struct Relay {
    net::io_context ioc;
    test::fail_count never{1'000'000};
    test::stream upstream;                      // the gateway's end of the upstream connection
    test::stream upstream_peer;                 // the upstream: the test writes its bytes here
    test::stream client;                        // the gateway's end of the client connection
    std::unique_ptr<test::stream> client_peer;  // the client: what it received
    beast::flat_buffer buffer;
    UpstreamResponseParser parser;
    std::array<char, 64> chunk{};  // small, so that a body takes several pieces
    std::optional<Relayed> result;
    ForwardHooks hooks;

    explicit Relay(test::fail_count* client_fails = nullptr, test::fail_count* upstream_fails = nullptr)
        : upstream(ioc, upstream_fails ? *upstream_fails : never),
          upstream_peer(ioc),
          client(ioc, client_fails ? *client_fails : never),
          client_peer(std::make_unique<test::stream>(ioc)) {
        upstream.connect(upstream_peer);
        client.connect(*client_peer);
        parser.body_limit(boost::none);
    }
    void upstream_sends(std::string_view bytes) { net::write(upstream_peer, net::buffer(bytes)); }
    /// Reads the head the upstream sent, then starts relaying.
    void start(RelayOptions options = {}) {
        http::read_header(upstream, buffer, parser);
        net::co_spawn(ioc, relay(upstream, buffer, parser, std::span<char>(chunk), client, options, hooks),
                      [this](std::exception_ptr e, Relayed r) {
                          if (e) std::rethrow_exception(e);
                          result = r;
                      });
        settle();
    }
    /// Runs every handler that is ready.
    void settle() {
        ioc.restart();
        ioc.poll();
    }
    std::string received() const { return std::string(client_peer->str()); }
};

constexpr std::string_view k_json_head =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n";

TEST(Relay, LengthFramedBodyPassesUnchangedWithTheHooksFields) {
    Relay r;
    auto decorate = [](const UpstreamResponseHead&, core::RecycledString& head) { head += "X-Gate: 1\r\n"; };
    r.hooks.decorate = decorate;
    r.upstream_sends(k_json_head);  // head and body arrive in one read, as a JSON completion usually does
    r.upstream_sends("{\"ok\":true}");
    r.start();
    ASSERT_TRUE(r.result);
    EXPECT_FALSE(r.result->upstream_failed);
    EXPECT_FALSE(r.result->client_failed);
    EXPECT_EQ(r.result->body_bytes, 11u);
    EXPECT_EQ(r.received(),
              "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nX-Gate: 1\r\n\r\n"
              "{\"ok\":true}");
}

TEST(Relay, ChunkedSseIsReframedAndEndsWithTheLastChunk) {
    Relay r;
    r.upstream_sends("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
    r.start();
    // The head leaves before any event: the client sees the stream begin.
    EXPECT_EQ(r.received(), "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
    EXPECT_FALSE(r.result);
    r.upstream_sends("b\r\ndata: one\n\n\r\n");
    r.settle();
    r.upstream_sends("b\r\ndata: two\n\n\r\n0\r\n\r\n");
    r.settle();
    ASSERT_TRUE(r.result);
    EXPECT_FALSE(r.result->upstream_failed);
    EXPECT_EQ(r.received(),
              "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
              "b\r\ndata: one\n\n\r\nb\r\ndata: two\n\n\r\n0\r\n\r\n");
}

TEST(Relay, ABodyEndedByCloseReachesAnHttp10ClientUnframedAndClosesIt) {
    Relay r;
    r.upstream_sends("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nabc");
    r.start({10, true, false, 0});
    r.upstream_sends("def");
    r.upstream_peer.close();
    r.settle();
    ASSERT_TRUE(r.result);
    EXPECT_FALSE(r.result->upstream_failed);
    EXPECT_EQ(r.received(), "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nabcdef");
}

TEST(Relay, TheHookMayHoldBackAndDropBytes) {
    Relay r;
    std::string kept;
    auto on_chunk = [&](std::string_view data, bool last) -> std::string_view {
        kept.assign(data);
        if (auto usage = kept.find("data: usage"); usage != std::string::npos) kept.erase(usage);
        return last || !kept.empty() ? std::string_view(kept) : std::string_view{};
    };
    r.hooks.on_chunk = on_chunk;
    r.upstream_sends("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    r.start();
    r.upstream_sends("b\r\ndata: one\n\n\r\n");
    r.settle();
    r.upstream_sends("d\r\ndata: usage\n\n\r\n0\r\n\r\n");
    r.settle();
    ASSERT_TRUE(r.result);
    EXPECT_EQ(r.received(), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nb\r\ndata: one\n\n\r\n0\r\n\r\n");
}

TEST(Relay, AWriteFailureMidBodyEndsTheRelayAsTheClients) {
    test::fail_count second_write{2};  // the head goes out; the first body piece fails
    Relay r(&second_write);
    r.upstream_sends("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    r.start();
    r.upstream_sends("b\r\ndata: one\n\n\r\n");
    r.settle();
    ASSERT_TRUE(r.result);
    EXPECT_TRUE(r.result->client_failed);
    EXPECT_FALSE(r.result->upstream_failed);
    EXPECT_EQ(r.received(), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
}

TEST(Relay, AReadFailureMidSseKeepsWhatCameAndSendsNoLastChunk) {
    Relay r;
    r.upstream_sends("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
    r.start();
    r.upstream_sends("b\r\ndata: one\n\n\r\n");
    r.settle();
    r.upstream_peer.close();  // the upstream dies between events
    r.settle();
    ASSERT_TRUE(r.result);
    EXPECT_TRUE(r.result->upstream_failed);
    EXPECT_TRUE(r.result->head_sent);
    // A client must see the stream cut short, not a clean end.
    EXPECT_EQ(r.received(),
              "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
              "b\r\ndata: one\n\n\r\n");
}

TEST(Relay, GarbageInAChunkedBodyIsAnUpstreamFailureAfterTheGoodBytes) {
    Relay r;
    r.upstream_sends("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    r.start();
    r.upstream_sends("3\r\nabc\r\nzz\r\n");
    r.settle();
    ASSERT_TRUE(r.result);
    EXPECT_TRUE(r.result->upstream_failed);
    EXPECT_EQ(r.received(), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n");
}

TEST(Relay, AClientThatLeavesMidStreamIsNoticedAtTheNextWrite) {
    Relay r;
    r.upstream_sends("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    r.start();
    ASSERT_FALSE(r.received().empty());
    r.client_peer.reset();  // the client's socket is gone
    r.upstream_sends("b\r\ndata: one\n\n\r\n");
    r.settle();
    ASSERT_TRUE(r.result);
    EXPECT_TRUE(r.result->client_failed);
    EXPECT_FALSE(r.result->upstream_failed);
}

TEST(Relay, AChunkLineThatNeverEndsIsBounded) {
    Relay r;
    r.upstream_sends("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
    RelayOptions options;
    options.max_unparsed = 256;
    r.start(options);
    r.upstream_sends("1;" + std::string(300, 'x'));
    r.settle();
    ASSERT_TRUE(r.result);
    EXPECT_TRUE(r.result->upstream_failed);
}

TEST(Relay, AHeadRequestGetsTheHeadOnly) {
    Relay r;
    r.parser.skip(true);
    r.upstream_sends(std::string(k_json_head));
    r.start({11, true, true, 0});
    ASSERT_TRUE(r.result);
    EXPECT_EQ(r.received(), k_json_head);
}

}  // namespace
}  // namespace tokengate::proxy
