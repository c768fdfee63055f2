// The exchange stage in-process, over loopback sockets: an upstream thread that answers with
// usage, and one that is not there. What comes back is what the session settles and logs.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>

#include <thread>

#include "server/pipeline/admit.hpp"
#include "server/pipeline/exchange.hpp"
#include "server/services.hpp"
#include "tokengate/config/loader.hpp"

namespace tokengate::server::pipeline {
namespace {

using namespace std::chrono_literals;
using tcp = net::ip::tcp;

const std::string k_body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
const std::string k_usage_body =
    R"({"id":"x","choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":10,"completion_tokens":100}})";

std::string config_for(unsigned short port) {
    return "upstreams:\n  - { name: gpu, url: \"http://127.0.0.1:" + std::to_string(port) +
           "\", timeouts: { connect: 2s, first_byte: 5s, stream_idle: 5s } }\n"
           "routes:\n  - { path: /v1/chat/completions, upstreams: [gpu] }\n"
           "tiers:\n  t:\n    limits:\n      - { name: tokens, algorithm: token_bucket, capacity: 100, rate: 1/s, "
           "unit: cost }\n"
           "tenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n"
           "cost:\n  input: { per: 100, min: 1 }\n  output: { per: 50, min: 1 }\n  default_max_tokens: 500\n";
}

struct Exchange {
    core::ManualClock clock;
    net::io_context upstream_ioc;
    tcp::acceptor upstream{upstream_ioc, {net::ip::make_address("127.0.0.1"), 0}};
    std::optional<Services> services;
    std::optional<Worker> worker;
    std::optional<tcp::socket> client;  // the client's end
    std::optional<proxy::TimedStream> gateway_end;
    std::string upstream_saw;

    explicit Exchange(bool upstream_listening = true) {
        auto port = upstream.local_endpoint().port();
        if (!upstream_listening) upstream.close();  // nothing listens there now: refused
        services.emplace(std::make_shared<const Runtime>(config::load_config_text(config_for(port), "t.yaml")), nullptr,
                         clock);
        worker.emplace(*services);
        tcp::acceptor front(worker->ioc, {net::ip::make_address("127.0.0.1"), 0});
        client.emplace(worker->ioc);
        client->connect(front.local_endpoint());
        gateway_end.emplace(front.accept());
    }
    /// The upstream: reads one request, answers `response`.
    std::thread serve(std::string response) {
        return std::thread([this, response] {
            auto s = upstream.accept();
            std::string in;
            auto head_end = net::read_until(s, net::dynamic_buffer(in), "\r\n\r\n");
            auto length_at = in.find("Content-Length: ");
            auto length = std::stoul(in.substr(length_at + 16));
            if (in.size() < head_end + length)
                net::read(s, net::dynamic_buffer(in), net::transfer_exactly(head_end + length - in.size()));
            upstream_saw = in;
            net::write(s, net::buffer(response));
            std::this_thread::sleep_for(200ms);  // the connection stays open a moment: keep-alive
        });
    }
    Exchanged run() {
        const auto& rt = *services->runtime.get();
        auto target = proxy::normalize_target("/v1/chat/completions");
        std::optional<auth::Principal> who;
        auto admitted =
            std::get<Admitted>(admit(rt, {"k1", target, "10.0.0.1", k_body}, services->output_history, who));
        proxy::ClientRequest req{http::verb::post, "/v1/chat/completions", 11};
        req.set(http::field::host, "gateway");
        req.set(http::field::authorization, "Bearer k1");
        req.body() = k_body;
        std::vector<limiter::HeaderField> headers = {{"X-RateLimit-Limit-Tokens", "100"}};
        proxy::ExchangeWatch watch;
        std::optional<Exchanged> out;
        auto go = [&]() -> net::awaitable<void> {
            out = co_await exchange(*worker, {rt,
                                              admitted,
                                              req,
                                              target,
                                              {"10.0.0.1", "10.0.0.1", false, "req-1"},
                                              headers,
                                              {*gateway_end, true, 11, false},
                                              watch,
                                              nullptr});
        };
        net::co_spawn(worker->ioc, go(), [](std::exception_ptr e) {
            if (e) std::rethrow_exception(e);
        });
        for (auto give_up = std::chrono::steady_clock::now() + 10s; !out && std::chrono::steady_clock::now() < give_up;)
            worker->ioc.run_one_for(50ms);
        EXPECT_TRUE(out);
        return out.value_or(Exchanged{});
    }
    std::string client_received() {
        std::string got;
        client->non_blocking(true);
        beast::error_code ec;
        char buf[4096];
        for (;;) {
            auto n = client->read_some(net::buffer(buf), ec);
            if (ec) break;
            got.append(buf, n);
        }
        return got;
    }
};

TEST(ExchangeStage, ForwardsRelaysAndPricesTheUpstreamsUsage) {
    Exchange x;
    auto upstream = x.serve(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-RateLimit-Limit-Tokens: 9\r\n"
        "Content-Length: " +
        std::to_string(k_usage_body.size()) + "\r\n\r\n" + k_usage_body);
    auto done = x.run();
    upstream.join();
    EXPECT_EQ(done.status, 200u);
    EXPECT_TRUE(done.keep_alive);
    EXPECT_FALSE(done.rejection);
    EXPECT_EQ(done.upstream, "gpu");
    EXPECT_EQ(done.settled.prompt_tokens, 10u);
    EXPECT_EQ(done.settled.completion_tokens, 100u);
    EXPECT_DOUBLE_EQ(done.settled.cost, 1 + 2) << "input 10/100 → min 1, output 100/50";
    EXPECT_NE(x.upstream_saw.find("X-Request-Id: req-1"), std::string::npos);
    EXPECT_EQ(x.upstream_saw.find("Bearer k1"), std::string::npos) << "the client's key stays here";
    auto got = x.client_received();
    EXPECT_NE(got.find("X-RateLimit-Limit-Tokens: 100\r\n"), std::string::npos) << "the gateway's own";
    EXPECT_EQ(got.find("X-RateLimit-Limit-Tokens: 9"), std::string::npos) << "the upstream's replaced";
    EXPECT_NE(got.find(k_usage_body), std::string::npos);
}

TEST(ExchangeStage, AnUpstreamThatRefusesIsA502ThatRefundsEverything) {
    Exchange x(false);
    auto done = x.run();
    ASSERT_TRUE(done.rejection);
    EXPECT_EQ(done.rejection->status, http::status::bad_gateway);
    EXPECT_EQ(done.rejection->code, "upstream_unavailable");
    EXPECT_DOUBLE_EQ(done.settled.cost, 0);
    ASSERT_EQ(done.rejection->headers.size(), 1u) << "the rate-limit headers go with the 502";
    EXPECT_TRUE(x.client_received().empty()) << "the session writes the 502, not the stage";
}

TEST(ExchangeStage, AnUpstreamErrorResponseIsRelayedAndChargedNothing) {
    Exchange x;
    auto upstream = x.serve("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\nno");
    auto done = x.run();
    upstream.join();
    EXPECT_EQ(done.status, 500u);
    EXPECT_FALSE(done.rejection);
    EXPECT_DOUBLE_EQ(done.settled.cost, 0) << "a complete non-2xx response generated nothing";
}

}  // namespace
}  // namespace tokengate::server::pipeline
