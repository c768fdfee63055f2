// Arbitrary upstream bytes answer request A, through the real ConnectionPool and forward() on
// loopback sockets; request B follows on the same pool and is answered correctly. Whatever A's
// bytes were (a second response after the first, interim responses, a cut-off body, garbage),
// B's client must receive B's own answer: nothing is delivered to a request it does not answer.
// Input: [flags][tail length][bytes]. The tail is written only once A's exchange has ended,
// and before B's starts (an upstream's late bytes, in the pooled connection's kernel buffer);
// flags bit 0 keeps the connection open after A's bytes.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "tokengate/core/clock.hpp"
#include "tokengate/proxy/forward.hpp"

namespace net = boost::asio;
namespace http = boost::beast::http;
using net::ip::tcp;
using namespace tokengate;

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);
constexpr std::string_view k_answer_b = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfor:/b";

// Names the broken expectation, so that a crash in CI's log says which.
void require(bool ok, const char* what) {
    if (ok) return;
    std::fprintf(stderr, "fuzz_upstream_response: %s\n", what);
    std::abort();
}

struct World {
    net::io_context io{1};
    tcp::acceptor upstream{io, {net::ip::make_address("127.0.0.1"), 0}};
    tcp::acceptor clients{io, {net::ip::make_address("127.0.0.1"), 0}};
    std::string answer_a;             // this input's bytes for request A, at once
    std::string late_a;               // and these once A's exchange has ended
    bool keep_open = false;           // after A's bytes, keep the connection (else close it)
    net::steady_timer a_ended{io};    // cancelled when A's exchange has ended
    net::steady_timer late_sent{io};  // cancelled when the late bytes are written
    core::SteadyClock clock;
};

World& world() {
    static World* w = [] {
        auto* created = new World;
        // The upstream: answers each request on a connection by its target.
        net::co_spawn(
            created->io,
            [created]() -> net::awaitable<void> {
                for (;;) {
                    auto [ec, socket] = co_await created->upstream.async_accept(k_use);
                    if (ec) co_return;
                    auto s = std::make_shared<tcp::socket>(std::move(socket));
                    net::co_spawn(
                        created->io,
                        [created, s]() -> net::awaitable<void> {
                            std::string in;
                            for (;;) {
                                auto [rec, n] =
                                    co_await net::async_read_until(*s, net::dynamic_buffer(in), "\r\n\r\n", k_use);
                                if (rec) co_return;
                                bool is_a = in.find(" /a ") != std::string::npos;
                                in.erase(0, n);
                                std::string reply = is_a ? created->answer_a : std::string(k_answer_b);
                                auto [wec, wn] = co_await net::async_write(*s, net::buffer(reply), k_use);
                                if (wec) co_return;
                                if (is_a && !created->late_a.empty()) {
                                    co_await created->a_ended.async_wait(k_use);
                                    co_await net::async_write(*s, net::buffer(created->late_a), k_use);
                                    created->late_sent.cancel();
                                }
                                if (is_a && !created->keep_open) {
                                    boost::system::error_code ignored;
                                    s->shutdown(tcp::socket::shutdown_send, ignored);
                                }
                            }
                        },
                        net::detached);
                }
            },
            net::detached);
        return created;
    }();
    return *w;
}

struct Exchange {
    proxy::ForwardResult result;
    std::string client_got;
};

net::awaitable<Exchange> exchange(World& w, proxy::ConnectionPool& pool, proxy::UpstreamHealth& health,
                                  std::string_view path) {
    tcp::socket client(w.io);
    co_await client.async_connect(w.clients.local_endpoint(), k_use);
    auto [aec, accepted] = co_await w.clients.async_accept(k_use);
    require(!aec, "the client connects");
    Exchange out;
    {
        proxy::TimedStream gateway_side(std::move(accepted));
        proxy::UpstreamRequest request;
        request.head.append("GET ").append(path).append(" HTTP/1.1\r\nHost: u\r\n\r\n");
        proxy::ExchangeWatch watch;
        proxy::ForwardHooks hooks;
        out.result = co_await proxy::forward(pool, health, request, proxy::ClientSide{gateway_side, true, 11, false},
                                             watch, hooks, w.clock);
    }  // the gateway side closes: the client reads to its end
    auto [rec, n] = co_await net::async_read(client, net::dynamic_buffer(out.client_got), k_use);
    (void)rec;
    co_return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2 || size > 16384) return 0;
    auto& w = world();
    w.keep_open = data[0] & 1;
    std::string_view bytes(reinterpret_cast<const char*>(data + 2), size - 2);
    auto tail = std::min<std::size_t>(data[1], bytes.size());
    w.answer_a = bytes.substr(0, bytes.size() - tail);
    w.late_a = bytes.substr(bytes.size() - tail);
    w.a_ended.expires_at(net::steady_timer::time_point::max());
    w.late_sent.expires_at(net::steady_timer::time_point::max());
    config::UpstreamConfig cfg;
    cfg.host = "127.0.0.1";
    cfg.port = w.upstream.local_endpoint().port();
    cfg.connect_timeout = 200'000'000;
    cfg.first_byte_timeout = 20'000'000;  // an answer that never completes costs 20 ms, not minutes
    cfg.stream_idle_timeout = 20'000'000;
    bool done = false;
    net::co_spawn(
        w.io,
        [&]() -> net::awaitable<void> {
            proxy::ConnectionPool pool(w.io.get_executor(), cfg, 4);
            proxy::UpstreamHealth health;
            co_await exchange(w, pool, health, "/a");
            if (!w.late_a.empty()) {  // the late bytes arrive while the connection sits in the pool
                w.a_ended.cancel();
                w.late_sent.expires_after(std::chrono::milliseconds(200));  // unless A's connection is gone
                co_await w.late_sent.async_wait(k_use);
            }
            // B's answer is whole and at once: only a stalled process (CI's load) could time it
            // out in 20 ms. New timeouts keep the pooled connections, A's leftovers included.
            auto patient = cfg;
            patient.first_byte_timeout = patient.stream_idle_timeout = 5'000'000'000;
            pool.update_config(patient, 4, nullptr);
            auto b = co_await exchange(w, pool, health, "/b");
            require(b.result.outcome == proxy::ForwardOutcome::completed, "B's exchange completes");
            http::response_parser<http::string_body> parser;
            parser.eager(true);
            boost::beast::error_code ec;
            auto used = parser.put(net::buffer(b.client_got), ec);
            require(!ec && parser.is_done() && used == b.client_got.size(), "B's client gets one whole response");
            require(parser.get().result_int() == 200 && parser.get().body() == "for:/b", "B's client gets B's answer");
            done = true;
        },
        net::detached);
    while (!done) w.io.run_one();
    return 0;
}
