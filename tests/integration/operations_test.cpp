// Operating the gateway: metrics, health, the admin API, explain, hot reload.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <thread>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

std::string config(double capacity, bool with_second_tenant = true) {
    std::string c =
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "tiers:\n  t:\n    limits:\n"
        "      - { name: requests, algorithm: token_bucket, capacity: " +
        std::to_string(capacity) +
        ", rate: 0.01/s }\n"
        "      - { name: tokens, algorithm: token_bucket, capacity: 1000, rate: 1/s, unit: cost }\n"
        "global_limits:\n"
        "  - { name: shadow-gpu, algorithm: token_bucket, capacity: 1, rate: 0.01/s, enforce: false }\n"
        "tenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n";
    if (with_second_tenant) c += "  - { id: beta, tier: t, keys: [\"k2\"] }\n";
    return c;
}

Request chat(const std::string& key) {
    return Request{
        "POST", "/v1/chat/completions", {{"Authorization", "Bearer " + key}}, chat_body("llama3-8b", "hi", 100, false)};
}

TEST(Operations, MetricsCountRequestsRejectionsCostAndLatency) {
    GatewayUnderTest gw(config(2));
    EXPECT_EQ(gw.request(chat("k1")).status, 200);
    EXPECT_EQ(gw.request(chat("k1")).status, 200);
    EXPECT_EQ(gw.request(chat("k1")).status, 429);
    auto m = send_request(gw.admin_port(), Request{"GET", "/metrics", {}, ""});
    ASSERT_EQ(m.status, 200);
    EXPECT_NE(m.header("content-type").find("text/plain"), std::string::npos);
    auto t = gw.metrics_after(3);
    EXPECT_NE(t.find("tokengate_requests_total{tenant=\"acme\",route=\"/v1/chat/completions\",status=\"200\"} 2"),
              std::string::npos)
        << t;
    EXPECT_NE(t.find("tokengate_requests_total{tenant=\"acme\",route=\"/v1/chat/completions\",status=\"429\"} 1"),
              std::string::npos);
    EXPECT_NE(t.find("tokengate_rejections_total{level=\"tenant\",limit=\"requests\",tenant=\"acme\"} 1"),
              std::string::npos);
    EXPECT_NE(t.find("tokengate_shadow_rejections_total{level=\"global\",limit=\"shadow-gpu\",tenant=\"acme\"}"),
              std::string::npos)
        << "the shadow limit would have refused the second request";
    EXPECT_NE(t.find("tokengate_cost_reserved_total{tenant=\"acme\"} 6"), std::string::npos) << "(1 + 2) x 2";
    EXPECT_NE(t.find("tokengate_cost_settled_total{tenant=\"acme\"} 4"), std::string::npos)
        << "input 1 + 64 tokens = 1 unit, x 2";
    EXPECT_NE(t.find("tokengate_tokens_total{tenant=\"acme\",model=\"llama3-8b\",kind=\"completion\"} 128"),
              std::string::npos);
    EXPECT_NE(t.find("tokengate_upstream_ttfb_seconds_count{upstream=\"mock\"} 2"), std::string::npos);
    EXPECT_NE(t.find("tokengate_upstream_duration_seconds_bucket{upstream=\"mock\",le=\"+Inf\"} 2"), std::string::npos);
    EXPECT_NE(t.find("tokengate_limit_remaining_ratio{tenant=\"acme\",limit=\"requests\"} 0"), std::string::npos);
    EXPECT_NE(t.find("tokengate_inflight{upstream=\"mock\"} 0"), std::string::npos);
}

TEST(Operations, HealthAndReadiness) {
    GatewayUnderTest gw(config(5));
    EXPECT_EQ(send_request(gw.admin_port(), Request{"GET", "/healthz", {}, ""}).status, 200);
    auto ready = send_request(gw.admin_port(), Request{"GET", "/readyz", {}, ""});
    EXPECT_EQ(ready.status, 200);
    EXPECT_EQ(json::parse(ready.body)["status"], "ready");
}

TEST(Operations, AdminApiNeedsTheToken) {
    GatewayUnderTest gw(config(5));
    EXPECT_EQ(send_request(gw.admin_port(), Request{"GET", "/admin/tenants/acme", {}, ""}).status, 401);
    EXPECT_EQ(
        send_request(gw.admin_port(), Request{"GET", "/admin/tenants/acme", {{"Authorization", "Bearer wrong"}}, ""})
            .status,
        401);
    EXPECT_EQ(
        send_request(gw.admin_port(), Request{"POST", "/admin/reload", {{"Authorization", "Bearer wrong"}}, ""}).status,
        401);
    EXPECT_EQ(gw.admin(Request{"GET", "/admin/tenants/nobody", {}, ""}).status, 404);
}

TEST(Operations, TenantStateShowsEveryLimit) {
    GatewayUnderTest gw(config(5));
    EXPECT_EQ(gw.request(chat("k1")).status, 200);
    auto r = gw.admin(Request{"GET", "/admin/tenants/acme", {}, ""});
    ASSERT_EQ(r.status, 200) << r.body;
    auto body = json::parse(r.body);
    EXPECT_EQ(body["tenant"], "acme");
    ASSERT_EQ(body["limits"].size(), 2u);
    auto requests = body["limits"][0];
    EXPECT_EQ(requests["name"], "requests");
    EXPECT_EQ(requests["level"], "tenant");
    EXPECT_EQ(requests["algorithm"], "token_bucket");
    EXPECT_EQ(requests["unit"], "requests");
    EXPECT_DOUBLE_EQ(requests["capacity"].get<double>(), 5);
    EXPECT_NEAR(requests["remaining"].get<double>(), 4, 0.01);
    EXPECT_GT(requests["reset_s"].get<double>(), 90);
}

TEST(Operations, ExplainChargesNothing) {
    GatewayUnderTest gw(config(1));
    json in = {
        {"key", "k1"},
        {"body", {{"model", "llama3-8b"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 100}}}};
    for (int i = 0; i < 3; ++i) {
        auto r = gw.admin(Request{"POST", "/admin/explain", {}, in.dump()});
        ASSERT_EQ(r.status, 200) << r.body;
        auto e = json::parse(r.body);
        EXPECT_EQ(e["tenant"], "acme");
        EXPECT_DOUBLE_EQ(e["cost"].get<double>(), 3);
        EXPECT_TRUE(e["allowed"].get<bool>());
        EXPECT_EQ(e["headers"]["x-ratelimit-remaining-requests"], "0");
        EXPECT_EQ(e["limits"].size(), 3u);
    }
    EXPECT_EQ(gw.request(chat("k1")).status, 200) << "explaining spent nothing";
    auto after = json::parse(gw.admin(Request{"POST", "/admin/explain", {}, in.dump()}).body);
    EXPECT_FALSE(after["allowed"].get<bool>());
    EXPECT_EQ(after["rejection"]["code"], "rate_limit_exceeded");
    auto bad = gw.admin(Request{"POST", "/admin/explain", {}, R"({"key":"nope","body":{}})"});
    EXPECT_EQ(bad.status, 400);
    EXPECT_EQ(gw.admin(Request{"POST", "/admin/explain", {}, R"({"key":"k1","path":5})"}).status, 400);
    EXPECT_EQ(gw.admin(Request{"POST", "/admin/explain", {}, "not json"}).status, 400);
}

TEST(Operations, ReloadKeepsBucketStateAndAppliesChanges) {
    GatewayUnderTest gw(config(3));
    EXPECT_EQ(gw.request(chat("k1")).status, 200);
    EXPECT_EQ(gw.request(chat("k1")).status, 200);
    // Raising the capacity to 10 keeps the level in absolute units: 1 token left, not 10.
    gw.rewrite_config(config(10, /*with_second_tenant=*/false));
    ::kill(gw.gateway().pid(), SIGHUP);
    bool reloaded = false;
    for (int i = 0; i < 100 && !reloaded; ++i) {
        reloaded = gw.request(chat("k2")).status == 401;  // the removed tenant stops authenticating
        if (!reloaded) std::this_thread::sleep_for(50ms);
    }
    ASSERT_TRUE(reloaded) << gw.log();
    auto r = gw.request(chat("k1"));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.header("x-ratelimit-limit-requests"), "10") << "the new capacity applies";
    EXPECT_EQ(r.header("x-ratelimit-remaining-requests"), "0") << "a tenant mid-burst is not refilled by a reload";

    // An invalid config is refused, the previous one keeps serving, and the failure is counted.
    gw.rewrite_config("routes: [ { path: /v1/chat/completions, upstreams: [nowhere] } ]\ntenants: []\n");
    auto refused = gw.admin(Request{"POST", "/admin/reload", {}, ""});
    EXPECT_EQ(refused.status, 422);
    EXPECT_NE(json::parse(refused.body)["error"].get<std::string>().find("unknown upstream 'nowhere'"),
              std::string::npos);
    auto still = gw.request(chat("k1"));
    EXPECT_EQ(still.status, 429);
    EXPECT_EQ(still.header("x-ratelimit-limit-requests"), "10") << "still the last valid config";
    auto m = send_request(gw.admin_port(), Request{"GET", "/metrics", {}, ""}).body;
    EXPECT_NE(m.find("tokengate_config_reloads_total{result=\"success\"} 1"), std::string::npos) << m;
    EXPECT_NE(m.find("tokengate_config_reloads_total{result=\"failure\"} 1"), std::string::npos);

    gw.rewrite_config(config(10));
    EXPECT_EQ(gw.admin(Request{"POST", "/admin/reload", {}, ""}).status, 200);
    EXPECT_EQ(gw.request(chat("k2")).status, 200) << "the tenant is back";
}

TEST(Operations, ReadinessFailsWhileDraining) {
    GatewayUnderTest gw(config(5), "  drain_timeout: 5s\n", /*tokens/s*/ 10);
    RawClient streaming(gw.port());
    auto body = chat_body("m", "hi", 30, true);
    streaming.send_all(raw_post("/v1/chat/completions", "k1", body));
    ASSERT_NE(streaming.read_some(5s, "\"The\"").find("\"The\""), std::string::npos);
    ::kill(gw.gateway().pid(), SIGTERM);
    std::this_thread::sleep_for(200ms);
    auto ready = send_request(gw.admin_port(), Request{"GET", "/readyz", {}, ""});
    EXPECT_EQ(ready.status, 503);
    EXPECT_EQ(gw.gateway().wait(15s), 0);
}

}  // namespace
}  // namespace tokengate::testing
