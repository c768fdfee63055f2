// Reserve up front, settle from the real usage: JSON, SSE, and streams cut short.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <thread>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// Cost defaults: input per 100 (min 1), output per 50 (min 1), floor, stream surcharge 1.
// A "hi" chat is ~8 input tokens → 1 unit; max_tokens 500 → 10 units; the mock writes
// min(max_tokens, 64) = 64 tokens → 1 unit.
const std::string k_config =
    "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
    "tiers:\n  t:\n    limits:\n"
    "      - { name: tokens, algorithm: token_bucket, capacity: 100, rate: 0.001/s, unit: cost }\n"
    "tenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n";

Request chat(int max_tokens, bool stream, bool include_usage = false) {
    return Request{"POST",
                   "/v1/chat/completions",
                   {{"Authorization", "Bearer k1"}},
                   chat_body("m", "hi", max_tokens, stream, include_usage)};
}

TEST(Settlement, JsonRefundShowsOnTheNextResponse) {
    GatewayUnderTest gw(k_config);
    auto first = gw.request(chat(500, false));
    ASSERT_EQ(first.status, 200) << first.body;
    EXPECT_EQ(first.header("x-ratelimit-remaining-tokens"), "89") << "reserved 1 + 10";
    EXPECT_EQ(json::parse(first.body)["usage"]["completion_tokens"], 64);
    ASSERT_TRUE(gw.wait_settled(1)) << "settlement follows the response's last byte";
    auto second = gw.request(chat(500, false));
    // Settled at 1 + 1 = 2: 9 came back, so 100 - 2 - 11.
    EXPECT_EQ(second.header("x-ratelimit-remaining-tokens"), "87");
    EXPECT_TRUE(gw.log_contains("\"cost_reserved\":11.0,\"cost_settled\":2.0")) << gw.log();
    EXPECT_TRUE(gw.log_contains("\"completion_tokens\":64"));
}

TEST(Settlement, StreamUsageIsHiddenFromAClientThatDidNotAskAndSettled) {
    GatewayUnderTest gw(k_config);
    auto plain = gw.request(chat(500, true));
    ASSERT_EQ(plain.status, 200);
    EXPECT_NE(plain.body.find("[DONE]"), std::string::npos);
    EXPECT_EQ(plain.body.find("usage"), std::string::npos) << plain.body;
    EXPECT_EQ(plain.header("x-ratelimit-remaining-tokens"), "88") << "reserved 1 + 10 + 1";
    ASSERT_TRUE(gw.wait_settled(1));

    auto asked = gw.request(chat(500, true, /*include_usage=*/true));
    ASSERT_EQ(asked.status, 200);
    EXPECT_NE(asked.body.find(R"("usage":{"completion_tokens":64)"), std::string::npos) << asked.body;
    // The first stream settled at 1 + 1 + 1 = 3.
    EXPECT_EQ(asked.header("x-ratelimit-remaining-tokens"), "85");
    EXPECT_TRUE(gw.log_contains("\"cost_reserved\":12.0,\"cost_settled\":3.0")) << gw.log();
}

TEST(Settlement, AClientThatLeavesMidStreamPaysForWhatItReceived) {
    GatewayUnderTest gw(k_config, "", /*tokens/s*/ 10);
    {
        RawClient c(gw.port());
        auto body = chat_body("m", "hi", 500, true);
        c.send_all(raw_post("/v1/chat/completions", "k1", body));
        auto got = c.read_some(5s, "\" brown\"");
        ASSERT_NE(got.find("x-ratelimit-remaining-tokens: 88"), std::string::npos) << got;
    }  // three of 64 tokens received
    ASSERT_TRUE(gw.wait_settled(1));
    auto next = gw.request(chat(1, false));  // reserves 1 + 1, generates at once
    // The cut stream settled at input 1 + output max(1, few/50) 1 + surcharge 1 = 3.
    EXPECT_EQ(next.header("x-ratelimit-remaining-tokens"), "95") << gw.log();
    EXPECT_TRUE(gw.log_contains("\"status\":499"));
}

TEST(Settlement, UpstreamFailureBeforeOutputRefundsInFull) {
    GatewayUnderTest gw(k_config);
    auto failed = gw.request(Request{"POST",
                                     "/v1/chat/completions",
                                     {{"Authorization", "Bearer k1"}, {"x-mock-status", "503"}},
                                     chat_body("m", "hi", 500, false)});
    EXPECT_EQ(failed.status, 503);
    ASSERT_TRUE(gw.wait_settled(1)) << "a relayed response settles after its last byte";
    auto next = gw.request(chat(50, false));
    EXPECT_EQ(next.header("x-ratelimit-remaining-tokens"), "98") << "only the new reservation";
}

}  // namespace
}  // namespace tokengate::testing
