// Misbehaving clients and upstreams: the gateway answers correctly, settles, and keeps serving.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <future>
#include <thread>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using steady = std::chrono::steady_clock;

const std::string k_routes =
    "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n  - { path: /fault/v1/chat/completions, "
    "upstreams: [fault] }\n"
    "tiers:\n  t:\n    limits:\n"
    "      - { name: tokens, algorithm: token_bucket, capacity: 100, rate: 0.001/s, unit: cost }\n"
    "      - { name: inflight, algorithm: concurrency, max: 1 }\n"
    "tenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n";

const std::string k_plain_routes =
    "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
    "tenants:\n  - { id: acme, keys: [\"k1\"] }\n";

/// An upstream that answers every connection with a scripted byte sequence, then closes
/// (or resets, or stalls).
class FaultyUpstream {
public:
    enum class End { close, reset, stall };
    FaultyUpstream(std::string reply, End end) : port_(free_port()), reply_(std::move(reply)), end_(end) {
        fd_ = listen_loopback(port_, 16);
        thread_ = std::thread([this] {
            while (!stop_) {
                int c = ::accept(fd_, nullptr, nullptr);
                if (c < 0) return;
                char buf[65536];
                ::recv(c, buf, sizeof buf, 0);
                ::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
                if (end_ == End::stall) {
                    std::this_thread::sleep_for(3s);
                } else if (end_ == End::reset) {
                    linger l{1, 0};
                    ::setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof l);
                }
                ::close(c);
            }
        });
    }
    ~FaultyUpstream() {
        stop_ = true;
        ::shutdown(fd_, SHUT_RDWR);
        ::close(fd_);
        thread_.join();
    }
    std::string upstream_yaml() const {
        return "  - name: fault\n    url: http://127.0.0.1:" + std::to_string(port_) +
               "\n    timeouts: { first_byte: 1s, stream_idle: 1s }\n";
    }

private:
    unsigned short port_;
    std::string reply_;
    End end_;
    int fd_ = -1;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

Request fault_chat(bool stream = false) {
    return Request{
        "POST", "/fault/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 500, stream)};
}

/// After each fault: the concurrency slot is free again and the refund came back.
void expect_settled(const GatewayUnderTest& gw, const std::string& remaining_tokens) {
    EXPECT_TRUE(gw.wait_settled(1)) << "every admitted request settled";
    auto next = gw.request(
        Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 1, false)});
    EXPECT_EQ(next.status, 200) << "the concurrency slot was released: " << next.body;
    EXPECT_EQ(next.header("x-ratelimit-remaining-tokens"), remaining_tokens);
}

TEST(UpstreamFaults, MalformedHttpIs502AndRefunds) {
    FaultyUpstream up("SMTP ready\r\n\r\n", FaultyUpstream::End::close);
    GatewayUnderTest gw(k_routes, "", 1000, up.upstream_yaml());
    auto r = gw.request(fault_chat());
    EXPECT_EQ(r.status, 502);
    EXPECT_EQ(json::parse(r.body)["error"]["code"], "upstream_unavailable");
    expect_settled(gw, "98");  // only the follow-up's 1 + 1
}

TEST(UpstreamFaults, ResetBeforeTheResponseIs502) {
    FaultyUpstream up("", FaultyUpstream::End::reset);
    GatewayUnderTest gw(k_routes, "", 1000, up.upstream_yaml());
    EXPECT_EQ(gw.request(fault_chat()).status, 502);
    expect_settled(gw, "98");
}

TEST(UpstreamFaults, HeadersNeverSentIs504) {
    FaultyUpstream up("", FaultyUpstream::End::stall);
    GatewayUnderTest gw(k_routes, "", 1000, up.upstream_yaml());
    auto start = steady::now();
    auto r = gw.request(fault_chat());
    EXPECT_EQ(r.status, 504);
    EXPECT_LT(steady::now() - start, 2900ms) << "the first-byte timeout (1 s), not the upstream, ends it";
    expect_settled(gw, "98");
}

TEST(UpstreamFaults, BodyShorterThanContentLengthEndsTheClientConnection) {
    FaultyUpstream up("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":\"x\"",
                      FaultyUpstream::End::close);
    GatewayUnderTest gw(k_routes, "", 1000, up.upstream_yaml());
    RawClient c(gw.port());
    auto body = chat_body("m", "hi", 500, false);
    c.send_all(raw_post("/fault/v1/chat/completions", "k1", body));
    auto got = c.read_some(5s);
    EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos);
    EXPECT_NE(got.find("Content-Length: 100"), std::string::npos);
    EXPECT_TRUE(c.peer_closed() || c.wait_closed(3s)) << "a truncated body must not look complete";
    // Charged for the input only (nothing usable was delivered): 100 - (1 + 1) - (1 + 1) after the follow-up.
    expect_settled(gw, "96");
}

TEST(UpstreamFaults, ResetMidStreamEndsTheStreamAndChargesWhatWasSent) {
    std::string events = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    std::string event = "data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"},\"index\":0}]}\n\n";
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", event.size());
    events += size + event + "\r\n";
    FaultyUpstream up(events, FaultyUpstream::End::reset);
    GatewayUnderTest gw(k_routes, "", 1000, up.upstream_yaml());
    RawClient c(gw.port());
    auto body = chat_body("m", "hi", 500, true);
    c.send_all(raw_post("/fault/v1/chat/completions", "k1", body));
    auto got = c.read_some(5s, "Hello");
    EXPECT_NE(got.find("Hello"), std::string::npos) << got;
    EXPECT_TRUE(c.wait_closed(5s)) << "the client sees the stream end";
    // Look after the head only: a request id ending in 0 ends the head with "0\r\n\r\n" too.
    auto head_end = got.find("\r\n\r\n");
    ASSERT_NE(head_end, std::string::npos) << got;
    EXPECT_EQ(got.find("\r\n0\r\n\r\n", head_end + 2), std::string::npos)
        << "no clean terminating chunk for a broken stream: " << ::testing::PrintToString(got);
    // input 1 + output max(1, 1/50) + surcharge 1 = 3, then the follow-up's 2.
    expect_settled(gw, "95");
}

TEST(UpstreamFaults, AnExhaustedPoolIs504AndDoesNotEjectTheUpstream) {
    GatewayUnderTest gw(
        k_plain_routes, "", 1000,
        "    max_connections: 1\n    timeouts: { first_byte: 1s }\n    eject: { consecutive_failures: 1, for: 30s }\n");
    // Two workers share max_connections: 1 as one slot each, so hold both.
    auto slow = [&] {
        return gw.request(Request{"POST",
                                  "/v1/chat/completions",
                                  {{"Authorization", "Bearer k1"}, {"x-mock-delay-ms", "800"}},
                                  chat_body("m", "hi", 1, false)});
    };
    std::vector<std::future<Response>> calls;
    for (int i = 0; i < 6; ++i) calls.push_back(std::async(std::launch::async, slow));
    int ok = 0, timed_out = 0;
    for (auto& c : calls) {
        auto r = c.get();
        ok += r.status == 200;
        timed_out += r.status == 504;
    }
    EXPECT_GE(ok, 1);
    EXPECT_GE(timed_out, 1) << "some waited longer than first_byte for a pooled connection";
    auto after = gw.request(
        Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 1, false)});
    EXPECT_EQ(after.status, 200) << "waiting for our own pool is not an upstream failure: " << after.body;
}

TEST(Clients, SlowlorisHeadersAreCutAtTheHeaderTimeout) {
    GatewayUnderTest gw(k_plain_routes, "  timeouts: { header: 1s, idle: 30s }\n");
    RawClient slow(gw.port());
    auto start = steady::now();
    std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n";
    bool closed = false;
    for (char ch : head) {
        if (!slow.send_all(std::string(1, ch))) break;
        if (slow.wait_closed(300ms)) {
            closed = true;
            break;
        }
    }
    EXPECT_TRUE(closed || slow.wait_closed(3s));
    EXPECT_LT(steady::now() - start, 5s);
    EXPECT_EQ(gw.request(Request{"GET", "/v1/models", {{"Authorization", "Bearer k1"}}, ""}).status, 404)
        << "others are still served (no route for /v1/models here)";
}

TEST(Clients, SlowlorisBodiesAreCutAtTheIdleTimeout) {
    GatewayUnderTest gw(k_plain_routes, "  timeouts: { header: 10s, idle: 2s }\n");
    RawClient slow(gw.port());
    auto start = steady::now();
    slow.send_all(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n"
        "Content-Type: application/json\r\nContent-Length: 200\r\n\r\n{");
    std::string answer;
    bool closed = false;
    for (int i = 0; i < 40 && !closed; ++i) {  // a byte every 250 ms: 10 s if never cut
        if (!slow.send_all("\"")) break;
        answer += slow.read_some(250ms);
        closed = slow.peer_closed();
    }
    EXPECT_TRUE(closed || slow.wait_closed(3s)) << "the body read is bounded by timeouts.idle";
    auto took = steady::now() - start;
    EXPECT_GT(took, 1500ms) << "not before the idle timeout";
    EXPECT_LT(took, 6s);
    EXPECT_EQ(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
    EXPECT_EQ(gw.request(Request{"GET", "/v1/models", {{"Authorization", "Bearer k1"}}, ""}).status, 404)
        << "others are still served";
}

TEST(Clients, ConnectionsBeyondTheLimitAreRefusedCleanly) {
    GatewayUnderTest gw(k_plain_routes, "  max_connections: 3\n");
    std::vector<std::unique_ptr<RawClient>> held;
    for (int i = 0; i < 3; ++i) {
        held.push_back(std::make_unique<RawClient>(gw.port()));
        ASSERT_TRUE(held.back()->connected());
        // A full exchange proves the gateway has accepted and counted this connection.
        ASSERT_TRUE(held.back()->send_all("GET /nowhere HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n\r\n"));
        ASSERT_NE(held.back()->read_some(10s, "not_found").find("404"), std::string::npos);
    }
    RawClient extra(gw.port());
    auto reply = extra.read_some(3s);
    EXPECT_NE(reply.find("503"), std::string::npos) << reply;
    EXPECT_NE(reply.find("too_many_connections"), std::string::npos);
    held.clear();
    bool served = false;
    for (int i = 0; i < 50 && !served; ++i) {
        served =
            gw
                .request(Request{
                    "POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 1, false)})
                .status == 200;
        if (!served) std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(served) << "room again once the held connections closed";
}

TEST(Clients, ABurstOfConnectionsIsServedUpToTheLimitAcrossWorkers) {
    // Each worker accepts what its backlog holds at once: both workers' bursts together must
    // still stop at max_connections, and every connection past it get its 503.
    GatewayUnderTest gw(k_plain_routes, "  threads: 2\n  max_connections: 3\n");
    ASSERT_EQ(gw.request(Request{"GET", "/nowhere", {{"Authorization", "Bearer k1"}}, ""}).status, 404);
    // Stopped, the gateway accepts nothing: the kernel queues the connections and their requests
    // in the listen backlog, and it finds them all at once when it runs again.
    ::kill(gw.gateway().pid(), SIGSTOP);
    std::vector<std::unique_ptr<RawClient>> clients;
    for (int i = 0; i < 16; ++i) {
        clients.push_back(std::make_unique<RawClient>(gw.port()));
        ASSERT_TRUE(clients.back()->connected());
        ASSERT_TRUE(clients.back()->send_all("GET /nowhere HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n\r\n"));
    }
    ::kill(gw.gateway().pid(), SIGCONT);
    int served = 0, refused = 0;
    for (auto& c : clients) {
        auto reply = c->read_some(10s, "}");
        served += reply.find("404") != std::string::npos;
        refused += reply.find("too_many_connections") != std::string::npos;
    }
    EXPECT_GE(served, 1);
    EXPECT_LE(served, 3) << "at most max_connections served at once";
    EXPECT_EQ(served + refused, 16) << "every connection answered";
}

}  // namespace
}  // namespace tokengate::testing
