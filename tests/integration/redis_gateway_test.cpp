// store.backend: redis through the real binary: replicas sharing one quota, skewed clocks,
// each on_error policy when Redis dies or hangs, and the breaker closing when it is back.

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// Six requests a minute per tenant, shared through Redis.
std::string shared_config(const RedisServer& redis, const std::string& on_error, const std::string& timeout = "50ms") {
    return "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
           "tiers:\n  t:\n    limits:\n"
           "      - { name: requests, algorithm: token_bucket, capacity: 6, rate: 6/min }\n"
           "tenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n"
           "store:\n  backend: redis\n  redis: { url: \"" +
           redis.url() + "\", prefix: \"tgtest:\", timeout: " + timeout + ", pool: 2, on_error: " + on_error + " }\n";
}

Response chat(const GatewayUnderTest& gw) {
    return gw.request(
        Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 1, false)});
}

double metric(const GatewayUnderTest& gw, const std::string& name) {
    return metric_total(gw.admin(Request{"GET", "/metrics", {}, ""}).body, name);
}

bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds timeout = 15s) {
    for (auto deadline = steady::now() + timeout; steady::now() < deadline; std::this_thread::sleep_for(50ms))
        if (done()) return true;
    return done();
}

TEST(RedisGateway, TwoGatewaysEnforceOneSharedQuota) {
    REQUIRE_REDIS();
    RedisServer redis;
    GatewayUnderTest a(shared_config(redis, "fail_closed")), b(shared_config(redis, "fail_closed"));
    int passed = 0, refused = 0;
    for (int i = 0; i < 12; ++i) {
        auto r = chat(i % 2 ? b : a);
        if (r.status == 200) ++passed;
        else if (r.status == 429) ++refused;
        else ADD_FAILURE() << "status " << r.status << ": " << r.body;
    }
    EXPECT_EQ(passed, 6);  // capacity 6 across both, not 6 each
    EXPECT_EQ(refused, 6);
    EXPECT_GE(metric(a, "tokengate_redis_calls_total"), 6);
    EXPECT_GE(metric(b, "tokengate_redis_calls_total"), 6);
    EXPECT_EQ(metric(a, "tokengate_redis_fallback_decisions_total"), 0);
    // The admin view reads the shared bucket too (peek: nothing charged), from either replica.
    for (const auto* gw : {&a, &b}) {
        auto state = gw->admin(Request{"GET", "/admin/tenants/acme", {}, ""});
        ASSERT_EQ(state.status, 200) << state.body;
        auto limits = nlohmann::json::parse(state.body)["limits"];
        ASSERT_EQ(limits.size(), 1u);
        EXPECT_LT(limits[0]["remaining"].get<double>(), 1.0) << state.body;
    }
    // The bucket's key expires when it would be full again: 6 taken at 6/min is a minute, plus
    // 1 s, rounded up to the end of a 10 s step (so that writes within one step keep it).
    auto ttl = redis.command({"PTTL", "tgtest:tenant:requests:acme"});
    ASSERT_EQ(ttl.substr(0, 1), ":") << ttl;
    auto ms = std::stol(ttl.substr(1));
    EXPECT_GT(ms, 50'000);
    EXPECT_LE(ms, 71'000);
}

TEST(RedisGateway, AuthenticatesWithThePasswordFromTheEnvironmentAndSelectsTheDatabase) {
    REQUIRE_REDIS();
    RedisServer redis({"--requirepass", "s3cret"});
    ::setenv("TOKENGATE_REDIS_PASSWORD", "s3cret", 1);
    auto config = shared_config(redis, "fail_closed");
    config.replace(config.find("/0\""), 3, "/3\"");
    GatewayUnderTest gw(config);
    ::unsetenv("TOKENGATE_REDIS_PASSWORD");
    EXPECT_EQ(chat(gw).status, 200);
    auto replies = redis.commands({{"AUTH", "s3cret"}, {"SELECT", "3"}, {"EXISTS", "tgtest:tenant:requests:acme"}});
    EXPECT_EQ(replies, "+OK\r\n+OK\r\n:1\r\n");

    // A wrong password is a refused handshake: logged, and on_error applies (here 503).
    ::setenv("TOKENGATE_REDIS_PASSWORD", "wrong", 1);
    GatewayUnderTest refused(shared_config(redis, "fail_closed"));
    ::unsetenv("TOKENGATE_REDIS_PASSWORD");
    EXPECT_EQ(chat(refused).status, 503);
    EXPECT_TRUE(refused.log_contains("handshake refused"));
    EXPECT_EQ(refused.log().find("wrong"), std::string::npos) << "the password is never logged";
}

TEST(RedisGateway, SkewedGatewayClocksDoNotMatter) {
    REQUIRE_REDIS();
    const std::string libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    if (::access(libfaketime.c_str(), R_OK) != 0) {
        if (std::getenv("TOKENGATE_REQUIRE_REDIS")) FAIL() << "libfaketime missing (apt-get install faketime)";
        GTEST_SKIP() << "libfaketime is not installed";
    }
    RedisServer redis;
    GatewayUnderTest normal(shared_config(redis, "fail_closed"));
    // Two hours ahead, wall clock and monotonic alike: a limiter on the gateway's own clock
    // would see the tenant's bucket as refilled long ago. libfaketime is preloaded through env
    // (which execs, so the test still owns the gateway's pid); under ASan its runtime must be
    // told that a preload is fine.
    const char* asan = std::getenv("ASAN_OPTIONS");
    GatewayUnderTest ahead(shared_config(redis, "fail_closed"), "", 1000, "",
                           {"/usr/bin/env", "LD_PRELOAD=" + libfaketime, "FAKETIME=+2h",
                            "ASAN_OPTIONS=" + std::string(asan ? asan : "") + ":verify_asan_link_order=0"});
    int passed = 0;
    std::string normal_reset, ahead_reset;
    for (int i = 0; i < 3; ++i) {
        auto r = chat(normal);
        passed += r.status == 200;
        normal_reset = r.header("x-ratelimit-reset");
    }
    EXPECT_EQ(passed, 3);
    int ahead_passed = 0;
    for (int i = 0; i < 6; ++i) {
        auto r = chat(ahead);
        ahead_passed += r.status == 200;
        if (ahead_reset.empty()) ahead_reset = r.header("x-ratelimit-reset");
    }
    EXPECT_EQ(ahead_passed, 3);
    // The skew is real: the skewed gateway's reset times (its own wall clock) are 2 h later.
    ASSERT_FALSE(normal_reset.empty());
    ASSERT_FALSE(ahead_reset.empty());
    EXPECT_GT(std::stoll(ahead_reset) - std::stoll(normal_reset), 7000);
    EXPECT_EQ(chat(normal).status, 429);
}

TEST(RedisGateway, LocalFallbackHoldsEachLimitDividedByLiveReplicas) {
    REQUIRE_REDIS();
    RedisServer redis;
    GatewayUnderTest a(shared_config(redis, "local")), b(shared_config(redis, "local"));
    ASSERT_TRUE(wait_for([&] { return metric(a, "tokengate_redis_live_replicas") == 2; }))
        << "both replicas announce themselves";
    redis.kill();
    int passed = 0;
    auto started = steady::now();
    for (int i = 0; i < 6; ++i) {
        auto r = chat(a);
        passed += r.status == 200;
        EXPECT_TRUE(r.status == 200 || r.status == 429) << r.status << " " << r.body;
    }
    EXPECT_EQ(passed, 3);  // 6 ÷ 2 live replicas, from a fresh (full) local bucket
    EXPECT_LT(steady::now() - started, 5s);
    EXPECT_GE(metric(a, "tokengate_redis_fallback_decisions_total"), 6);
    EXPECT_TRUE(a.log_contains("on_error local applies"));
}

TEST(RedisGateway, FailOpenAdmitsAndFailClosedRefusesWhileRedisIsDown) {
    REQUIRE_REDIS();
    RedisServer redis;
    GatewayUnderTest open(shared_config(redis, "fail_open")), closed(shared_config(redis, "fail_closed"));
    redis.kill();
    for (int i = 0; i < 8; ++i) EXPECT_EQ(chat(open).status, 200) << i;  // past the limit of 6: nothing counts
    for (int i = 0; i < 3; ++i) {
        auto r = chat(closed);
        EXPECT_EQ(r.status, 503);
        EXPECT_NE(r.body.find("rate_limiter_unavailable"), std::string::npos) << r.body;
        EXPECT_EQ(r.header("retry-after"), "1");
    }
    EXPECT_TRUE(open.wait_settled(8));
    // A fail_closed replica without Redis tells its load balancer it is not ready.
    EXPECT_EQ(send_request(closed.admin_port(), Request{"GET", "/readyz", {}, ""}).status, 503);
    EXPECT_EQ(send_request(open.admin_port(), Request{"GET", "/readyz", {}, ""}).status, 200);
}

TEST(RedisGateway, AHungRedisCostsARequestAtMostTheTimeout) {
    REQUIRE_REDIS();
    RedisServer redis;
    GatewayUnderTest gw(shared_config(redis, "local", "100ms"));
    ASSERT_EQ(chat(gw).status, 200);
    redis.pause();  // connections stay open; nothing is answered
    for (int i = 0; i < 5; ++i) {
        auto started = steady::now();
        auto r = chat(gw);
        auto took = steady::now() - started;
        EXPECT_TRUE(r.status == 200 || r.status == 429) << r.status;
        EXPECT_LT(took, 2s) << "request " << i << " waited on a hung Redis";  // timeout 100 ms, generous bound
    }
    EXPECT_EQ(metric(gw, "tokengate_redis_breaker_open"), 1);
    EXPECT_NE(gw.admin(Request{"GET", "/metrics", {}, ""}).body.find("tokengate_redis_calls_total{result=\"timeout\"}"),
              std::string::npos);
    redis.resume();
}

TEST(RedisGateway, WhenRedisReturnsTheBreakerClosesAndSharingResumes) {
    REQUIRE_REDIS();
    RedisServer redis;
    GatewayUnderTest gw(shared_config(redis, "local"));
    redis.kill();
    for (int i = 0; i < 2; ++i) EXPECT_EQ(chat(gw).status, 200);  // decided locally
    redis.start();                                                // back, and empty
    ASSERT_TRUE(wait_for([&] {
        auto m = gw.admin(Request{"GET", "/metrics", {}, ""}).body;
        return metric_total(m, "tokengate_redis_breaker_open") == 0 &&
               m.find("tokengate_redis_calls_total{result=\"ok\"}") != std::string::npos;
    }));
    // The local bucket has at most 3 left; Redis's fresh shared bucket decides again.
    redis.command({"FLUSHALL"});
    int passed = 0;
    for (int i = 0; i < 10; ++i) passed += chat(gw).status == 200;
    EXPECT_EQ(passed, 6);
    EXPECT_NE(redis.command({"EXISTS", "tgtest:tenant:requests:acme"}), ":0\r\n");
}

}  // namespace
}  // namespace tokengate::testing
