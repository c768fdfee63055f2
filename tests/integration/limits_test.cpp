// Shaping and concurrency limits through the real binary and the mock upstream.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <future>
#include <thread>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using steady = std::chrono::steady_clock;

std::string config_with(const std::string& tier_limits, const std::string& global_limits = "") {
    return "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
           "tiers:\n  t:\n    limits:\n" +
           tier_limits +
           "tenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n  - { id: other, tier: t, keys: [\"k2\"] }\n" +
           (global_limits.empty() ? "" : "global_limits:\n" + global_limits);
}

Request chat_request(const std::string& key, std::vector<std::pair<std::string, std::string>> extra = {}) {
    extra.push_back({"Authorization", "Bearer " + key});
    return Request{"POST", "/v1/chat/completions", extra, chat_body("m", "hi", 1, false)};
}

TEST(Shaping, ReleasesABurstAtTheConfiguredRate) {
    GatewayUnderTest gw(config_with(
        "      - { name: requests, algorithm: token_bucket, capacity: 100, rate: 100/s }\n",
        "  - { name: gpu, algorithm: leaky_bucket, mode: shape, capacity: 10, rate: 5/s, max_wait: 5s }\n"));
    auto start = steady::now();
    std::vector<std::future<std::pair<int, steady::duration>>> calls;
    for (int i = 0; i < 6; ++i)
        calls.push_back(std::async(std::launch::async, [&] {
            auto r = gw.request(chat_request("k1"));
            return std::pair{r.status, steady::now() - start};
        }));
    std::vector<steady::duration> done;
    for (auto& c : calls) {
        auto [status, at] = c.get();
        EXPECT_EQ(status, 200);
        done.push_back(at);
    }
    std::sort(done.begin(), done.end());
    auto metrics = gw.metrics_after(6);
    EXPECT_NE(metrics.find("tokengate_queue_wait_seconds_count{limit=\"gpu\"} 5"), std::string::npos)
        << "five of six waited: " << metrics;
    // Starts are 200 ms apart: the sixth cannot finish before 1 s, and only the first can finish
    // within the first 200 ms (one more if the first was late); the burst is spread, not passed.
    EXPECT_GE(done.back(), 950ms);
    EXPECT_LT(done.back(), 6s);
    EXPECT_LE(std::count_if(done.begin(), done.end(), [&](auto d) { return d < done.front() + 150ms; }), 2);
}

TEST(Shaping, AFullQueueRefusesWith429) {
    GatewayUnderTest gw(config_with(
        "      - { name: requests, algorithm: token_bucket, capacity: 100, rate: 100/s }\n",
        "  - { name: gpu, algorithm: leaky_bucket, mode: shape, capacity: 2, rate: 1/s, max_wait: 10s }\n"));
    std::vector<std::future<Response>> calls;
    for (int i = 0; i < 5; ++i) {
        calls.push_back(std::async(std::launch::async, [&] { return gw.request(chat_request("k1")); }));
        std::this_thread::sleep_for(30ms);  // arrive in order
    }
    int ok = 0, refused = 0;
    for (auto& c : calls) {
        auto r = c.get();
        if (r.status == 200) ++ok;
        if (r.status == 429) {
            ++refused;
            EXPECT_EQ(json::parse(r.body)["error"]["code"], "rate_limit_exceeded");
            EXPECT_FALSE(r.header("retry-after").empty());
        }
    }
    EXPECT_EQ(ok, 3) << "one starts at once, two wait";
    EXPECT_EQ(refused, 2);
}

TEST(Shaping, AClientThatLeavesTheQueueGivesItsPlaceBack) {
    GatewayUnderTest gw(config_with(
        "      - { name: requests, algorithm: token_bucket, capacity: 100, rate: 100/s }\n",
        "  - { name: gpu, algorithm: leaky_bucket, mode: shape, capacity: 1, rate: 0.5/s, max_wait: 10s }\n"));
    EXPECT_EQ(gw.request(chat_request("k1")).status, 200);  // the next slot is 2 s away
    {
        RawClient leaver(gw.port());
        auto body = chat_body("m", "hi", 1, false);
        leaver.send_all(raw_post("/v1/chat/completions", "k1", body));
        std::this_thread::sleep_for(300ms);  // queued, holding the only waiting place
    }
    ASSERT_TRUE(gw.wait_settled(2)) << "the leaver left the queue and was settled";
    auto r = gw.request(chat_request("k1"));
    EXPECT_EQ(r.status, 200) << "the place the leaver held is free again: " << r.body;
}

TEST(Concurrency, LimitsInFlightAndReleasesOnEveryExit) {
    GatewayUnderTest gw(config_with("      - { name: inflight, algorithm: concurrency, max: 2 }\n"));
    auto slow = [&] { return gw.request(chat_request("k1", {{"x-mock-delay-ms", "3000"}})); };
    auto a = std::async(std::launch::async, slow);
    auto b = std::async(std::launch::async, slow);
    // Both are admitted (and hold their slots) before the third arrives.
    for (int i = 0; i < 200; ++i) {
        auto m = send_request(gw.admin_port(), Request{"GET", "/metrics", {}, ""}).body;
        if (m.find("tokengate_admitted_total{tenant=\"acme\"} 2") != std::string::npos) break;
        std::this_thread::sleep_for(20ms);
    }
    auto refused = gw.request(chat_request("k1"));
    ASSERT_EQ(refused.status, 429) << refused.body;
    auto err = json::parse(refused.body)["error"];
    EXPECT_EQ(err["type"], "concurrency");
    EXPECT_EQ(refused.header("retry-after"), "1");
    EXPECT_EQ(gw.request(chat_request("k2")).status, 200) << "another tenant has its own slots";
    EXPECT_EQ(a.get().status, 200);
    EXPECT_EQ(b.get().status, 200);
    EXPECT_EQ(gw.request(chat_request("k1")).status, 200) << "slots are released when responses end";

    // Clients that go away mid-request release their slots too.
    for (int i = 0; i < 2; ++i) {
        RawClient leaver(gw.port());
        auto body = chat_body("m", "hi", 1, false);
        leaver.send_all(raw_post("/v1/chat/completions", "k1", body, "x-mock-delay-ms: 5000\r\n"));
        std::this_thread::sleep_for(200ms);
    }
    ASSERT_TRUE(gw.wait_settled(6)) << "both leavers were settled";
    EXPECT_EQ(gw.request(chat_request("k1")).status, 200);
    // An upstream that fails releases the slot as well.
    EXPECT_EQ(gw.request(chat_request("k1", {{"x-mock-status", "500"}})).status, 500);
    EXPECT_EQ(gw.request(chat_request("k1", {{"x-mock-status", "500"}})).status, 500);
    EXPECT_EQ(gw.request(chat_request("k1")).status, 200);
}

TEST(IpLimits, ForwardedForCountsOnlyFromTrustedProxies) {
    std::string routes =
        config_with("      - { name: requests, algorithm: token_bucket, capacity: 100, rate: 100/s }\n") +
        "ip_limits: [ { name: per-ip, algorithm: token_bucket, capacity: 1, rate: 0.01/s } ]\n";
    auto from = [](const std::string& chain) { return chat_request("k1", {{"X-Forwarded-For", chain}}); };
    {
        GatewayUnderTest trusting(routes, "  trusted_proxies: [127.0.0.1/32, 10.0.0.0/8]\n");
        // The client is the rightmost address that is not a trusted proxy.
        EXPECT_EQ(trusting.request(from("203.0.113.5, 10.1.1.1")).status, 200);
        auto again = trusting.request(from("198.51.100.7, 203.0.113.5"));
        EXPECT_EQ(again.status, 429) << "203.0.113.5 already spent its one request";
        EXPECT_EQ(trusting.request(from("203.0.113.6")).status, 200) << "another client has its own bucket";
    }
    {
        GatewayUnderTest untrusting(routes);
        EXPECT_EQ(untrusting.request(from("203.0.113.5")).status, 200);
        EXPECT_EQ(untrusting.request(from("203.0.113.6")).status, 429)
            << "without trusted proxies X-Forwarded-For is ignored: both are 127.0.0.1";
    }
}

TEST(AllOrNothing, AGlobalRefusalChargesNoTenant) {
    GatewayUnderTest gw(config_with("      - { name: requests, algorithm: token_bucket, capacity: 5, rate: 0.01/s }\n",
                                    "  - { name: gpu, algorithm: token_bucket, capacity: 2, rate: 0.01/s }\n"));
    EXPECT_EQ(gw.request(chat_request("k1")).status, 200);
    EXPECT_EQ(gw.request(chat_request("k2")).status, 200);
    auto refused = gw.request(chat_request("k1"));
    ASSERT_EQ(refused.status, 429);
    EXPECT_NE(json::parse(refused.body)["error"]["message"].get<std::string>().find("global limit 'gpu'"),
              std::string::npos);
    EXPECT_EQ(refused.header("x-ratelimit-limit"), "2") << "the refusing limit is the one described";
    EXPECT_EQ(refused.header("x-ratelimit-remaining-requests"), "0") << "the tightest requests limit (gpu) is empty";
    EXPECT_TRUE(gw.log_contains("\"rejected_by\":\"global:gpu\""));
}

TEST(CostLimits, LargeMaxTokensIsRefusedWhileASmallRequestPasses) {
    GatewayUnderTest gw(
        config_with("      - { name: tokens, algorithm: token_bucket, capacity: 20, rate: 1/s, unit: cost }\n"));
    // default cost config: output 500 tokens / 50 = 10 units, input min 1 → 11 units.
    auto big =
        Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 5000, false)};
    auto refused = gw.request(big);
    ASSERT_EQ(refused.status, 429);
    auto err = json::parse(refused.body)["error"];
    EXPECT_EQ(err["code"], "request_too_large_for_limit");
    EXPECT_EQ(err["type"], "tokens");
    EXPECT_TRUE(refused.header("retry-after").empty());
    auto small =
        Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 500, false)};
    auto ok = gw.request(small);
    EXPECT_EQ(ok.status, 200) << ok.body;
    EXPECT_EQ(ok.header("x-ratelimit-limit-tokens"), "20");
    EXPECT_EQ(ok.header("x-ratelimit-remaining-tokens"), "9");
}

}  // namespace
}  // namespace tokengate::testing
