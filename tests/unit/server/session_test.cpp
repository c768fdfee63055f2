// serve_connection in-process: a Worker on this thread, a loopback socket pair, no binary
// forked. The pipeline's answers as a client reads them, byte for byte where they are fixed.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/write.hpp>

#include "config_text.hpp"
#include "server/services.hpp"
#include "tokengate/config/loader.hpp"
#include "tokengate/store/local_store.hpp"

namespace tokengate::server {
namespace {

using namespace std::chrono_literals;
using tcp = net::ip::tcp;

const std::string k_config =
    testing::config_text("      - { name: requests, algorithm: token_bucket, capacity: 1, rate: 0.001/s }\n");

struct Connection {
    core::ManualClock clock;
    Services services{std::make_shared<const Runtime>(config::load_config_text(k_config, "t.yaml")), nullptr, clock};
    Worker worker{services};
    tcp::socket client{worker.ioc};

    Connection() {
        services.store = std::make_unique<store::LocalStore>(clock);
        tcp::acceptor front(worker.ioc, {net::ip::make_address("127.0.0.1"), 0});
        client.connect(front.local_endpoint());
        net::co_spawn(
            worker.ioc,
            serve_connection(front.accept(), worker, false, *ConnectionSlot::take(services.open_connections, 1)),
            net::detached);
    }
    /// Sends `bytes`, then runs the worker until the gateway has answered `answers` times or
    /// closed the connection; returns everything received.
    std::string exchange(std::string_view bytes, int answers = 1) {
        net::write(client, net::buffer(bytes));
        client.non_blocking(true);
        std::string got;
        char buf[8192];
        for (auto give_up = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < give_up;) {
            worker.ioc.run_one_for(20ms);
            beast::error_code ec;
            auto n = client.read_some(net::buffer(buf), ec);
            if (ec == net::error::eof) break;
            if (!ec) got.append(buf, n);
            int seen = 0;
            for (auto at = got.find("HTTP/1.1 "); at != std::string::npos; at = got.find("HTTP/1.1 ", at + 1)) ++seen;
            if (seen >= answers && got.find("}}") != std::string::npos && got.rfind("}}") + 2 == got.size()) break;
        }
        return got;
    }
};

std::string chat(std::string_view key, std::string_view extra = "") {
    std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
    return "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-Request-Id: r1\r\nAuthorization: Bearer " +
           std::string(key) + "\r\n" + std::string(extra) + "Content-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
}

TEST(Session, AnUnknownKeyIs401WithTheOpenAiBody) {
    Connection c;
    auto got = c.exchange(chat("nope"));
    EXPECT_EQ(got.substr(0, got.find("\r\n")), "HTTP/1.1 401 Unauthorized");
    EXPECT_NE(got.find("X-Request-Id: r1\r\n"), std::string::npos);
    EXPECT_NE(got.find(R"("code":"invalid_api_key")"), std::string::npos);
}

TEST(Session, PipelinedRequestsAreAnsweredInOrderAndTheSecondIsRateLimited) {
    Connection c;
    // The first is admitted and fails upstream (nothing listens on port 9): 502 with the
    // rate-limit headers; the second finds the bucket empty: 429.
    auto got = c.exchange(chat("k1") + chat("k1"), 2);
    auto second = got.find("HTTP/1.1 ", 1);
    ASSERT_NE(second, std::string::npos) << got;
    EXPECT_EQ(got.substr(0, got.find("\r\n")), "HTTP/1.1 502 Bad Gateway");
    EXPECT_NE(got.find("x-ratelimit-remaining-requests: 0"), std::string::npos) << got;
    EXPECT_EQ(got.substr(second, got.find("\r\n", second) - second), "HTTP/1.1 429 Too Many Requests");
    EXPECT_NE(got.find(R"("code":"rate_limit_exceeded")", second), std::string::npos);
    EXPECT_EQ(c.services.store->save().buckets.size(), 1u) << "one bucket, emptied";
}

TEST(Session, BrokenFramingIs400AndTheConnectionCloses) {
    Connection c;
    auto got =
        c.exchange("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n");
    EXPECT_EQ(got.substr(0, got.find("\r\n")), "HTTP/1.1 400 Bad Request");
    EXPECT_NE(got.find("Connection: close"), std::string::npos);
}

}  // namespace
}  // namespace tokengate::server
