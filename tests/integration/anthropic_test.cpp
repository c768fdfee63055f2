// SPEC §20 through the binary: Anthropic's Messages API, with the official Anthropic SDK from
// npm as a user runs it, and byte-level checks of what the SDK does not show.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* k_sdk = "@anthropic-ai/sdk@1.16.0";

/// Runs one scenario of tests/sdk/anthropic.mjs against the gateway; its JSON, or why not.
json run_sdk(const GatewayUnderTest& gw, const std::string& scenario, const std::string& key, std::string& skip) {
    auto shared = fs::path(TOKENGATE_BUILD_DIR) / "anthropic-sdk";
    skip = npm_install_once(shared.string(), k_sdk, "@anthropic-ai/sdk/package.json");
    if (!skip.empty()) return {};
    auto script = fs::path(TOKENGATE_SOURCE_DIR) / "tests/sdk/anthropic.mjs";
    auto out = capture("node '" + script.string() + "' '" + (shared / "node_modules/@anthropic-ai/sdk").string() +
                       "' http://127.0.0.1:" + std::to_string(gw.port()) + " " + scenario + " " + key + " 2>&1");
    auto parsed = json::parse(out, nullptr, false);
    if (parsed.is_discarded()) return {{"failed", out}};
    return parsed;
}

#define RUN_SDK(result, gw, scenario, key)                                                            \
    std::string skip;                                                                                 \
    auto result = run_sdk(gw, scenario, key, skip);                                                   \
    if (!skip.empty()) {                                                                              \
        if (std::getenv("TOKENGATE_REQUIRE_NPM")) FAIL() << "the Anthropic SDK is missing: " << skip; \
        GTEST_SKIP() << "Anthropic SDK test skipped: " << skip;                                       \
    }                                                                                                 \
    ASSERT_FALSE(result.contains("failed")) << result.dump(2) << gw.log()

/// The access lines of requests to `path`, parsed.
std::vector<json> access_lines(const GatewayUnderTest& gw, const std::string& path, std::size_t expected) {
    std::vector<json> out;
    for (const auto& line : gw.access_lines(path, expected)) out.push_back(json::parse(line));
    return out;
}

double requests_with_status(const std::string& metrics, const std::string& tenant, int status) {
    auto series = "tokengate_requests_total{tenant=\"" + tenant + "\",route=\"/v1/messages\",status=\"" +
                  std::to_string(status) + "\"} ";
    auto at = metrics.find(series);
    return at == std::string::npos ? 0 : std::stod(metrics.substr(at + series.size()));
}

const std::string k_routes =
    "routes:\n  - { path_prefix: /v1/messages, upstreams: [mock] }\n"
    "  - { path: /v1/chat/completions, upstreams: [mock] }\n";

TEST(AnthropicSdk, CreateStreamAndCountTokensAsAgainstAnthropic) {
    GatewayUnderTest gw(
        k_routes +
            "tiers:\n  t:\n    limits:\n"
            "      - { name: requests, algorithm: token_bucket, capacity: 100, rate: 1/s, unit: requests }\n"
            "      - { name: tokens, algorithm: token_bucket, capacity: 5000, rate: 100/s, unit: cost }\n"
            "tenants:\n  - { id: sdk, tier: t, keys: [\"k-sdk\"] }\n",
        "", 0);
    RUN_SDK(r, gw, "calls", "k-sdk");
    const auto& create = r["create"];
    EXPECT_EQ(create["type"], "message");
    EXPECT_EQ(create["stop_reason"], "max_tokens") << "the mock answered its max_tokens: 20";
    EXPECT_EQ(create["usage"]["cache_read_input_tokens"], 3);
    EXPECT_EQ(create["usage"]["output_tokens"], 20);
    EXPECT_EQ(create["headers"]["anthropic-ratelimit-requests-limit"], "100");
    EXPECT_EQ(create["headers"]["anthropic-ratelimit-requests-remaining"], "99");
    EXPECT_EQ(create["headers"]["anthropic-ratelimit-tokens-limit"], "5000");
    EXPECT_EQ(create["headers"]["anthropic-ratelimit-requests-reset"].get<std::string>().size(),
              std::string("2026-12-04T00:00:00Z").size());

    const auto& stream = r["stream"];
    EXPECT_EQ(stream["blocks"], json::array({"thinking", "text", "tool_use"}));
    EXPECT_FALSE(stream["thinking"].get<std::string>().empty());
    EXPECT_TRUE(stream["tool_input"].contains("query")) << "input_json_delta pieces parsed whole by the SDK";
    EXPECT_EQ(stream["events"].front(), "message_start");
    EXPECT_EQ(stream["events"].back(), "message_stop");
    EXPECT_EQ(stream["usage"]["output_tokens"], 16);

    // count_tokens is the gateway's own count (explain prices the same body the same way), and
    // it charges nothing: the next request still sees 99 requests left before its own.
    json counted_body = {{"model", "llama3-8b"},
                         {"system", "You are terse."},
                         {"messages", {{{"role", "user"}, {"content", "Hello there"}}}}};
    auto explained = gw.admin(Request{
        "POST", "/admin/explain", {}, json{{"key", "k-sdk"}, {"path", "/v1/messages"}, {"body", counted_body}}.dump()});
    ASSERT_EQ(explained.status, 200) << explained.body;
    EXPECT_EQ(r["count_tokens"]["input_tokens"], json::parse(explained.body)["input_tokens"]);
    auto counted = access_lines(gw, "/v1/messages/count_tokens", 1);
    ASSERT_EQ(counted.size(), 1u);
    EXPECT_EQ(counted[0]["status"], 200);
    EXPECT_EQ(counted[0]["cost_reserved"], 0.0);
    EXPECT_EQ(counted[0]["upstream"], "") << "never sent upstream";
    auto mock_requests =
        metric_total(send_request(gw.mock_port(), {"GET", "/metrics", {}, ""}).body, "mock_requests_total");
    EXPECT_EQ(mock_requests, 2) << "create and stream only";

    // Settled from the Messages usage: the prompt with its cached tokens, the output.
    ASSERT_TRUE(gw.wait_settled(2));
    auto lines = access_lines(gw, "/v1/messages", 2);
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[0]["cached_tokens"], 3);
    EXPECT_EQ(lines[0]["prompt_tokens"], create["usage"]["input_tokens"].get<int>() + 3);
    EXPECT_EQ(lines[0]["completion_tokens"], 20);
    EXPECT_EQ(lines[1]["completion_tokens"], 16) << "message_start + the last message_delta";
    EXPECT_EQ(lines[1]["prompt_tokens"], stream["usage"]["input_tokens"]);
}

TEST(AnthropicSdk, RateLimitErrorCarriesOurHeadersAndRetriesWaitForRetryAfter) {
    // One request a 2 s: the SDK's own backoff (0.5 s, then 1 s) would be refused again.
    GatewayUnderTest gw(
        k_routes +
        "tiers:\n  t:\n    limits:\n"
        "      - { name: requests, algorithm: token_bucket, capacity: 1, rate: 0.5/s, unit: requests }\n"
        "tenants:\n  - { id: tight, tier: t, keys: [\"k-tight\"] }\n");
    RUN_SDK(r, gw, "rate_limited", "k-tight");
    const auto& refused = r["refused"];
    ASSERT_TRUE(refused.is_object()) << r.dump(2);
    EXPECT_EQ(refused["class"], "RateLimitError");
    EXPECT_TRUE(refused["isRateLimitError"].get<bool>());
    EXPECT_EQ(refused["status"], 429);
    EXPECT_EQ(refused["body"]["type"], "error");
    EXPECT_EQ(refused["body"]["error"]["type"], "rate_limit_error");
    EXPECT_NE(refused["body"]["error"]["message"].get<std::string>().find("tenant limit 'requests'"),
              std::string::npos);
    EXPECT_EQ(refused["headers"]["anthropic-ratelimit-requests-limit"], "1");
    EXPECT_EQ(refused["headers"]["anthropic-ratelimit-requests-remaining"], "0");
    EXPECT_TRUE(refused["headers"].contains("retry-after"));
    EXPECT_FALSE(refused["headers"].contains("x-should-retry")) << "a rate is retried";
    EXPECT_EQ(r["retried"]["type"], "message");
    EXPECT_GE(r["retried"]["elapsed_ms"].get<double>(), 400) << "it waited for the bucket";
    // The retried call was refused once and then served: it waited as long as retry-after-ms said.
    auto metrics = gw.metrics_after(4);
    EXPECT_EQ(requests_with_status(metrics, "tight", 429), 2) << metrics;
    EXPECT_EQ(requests_with_status(metrics, "tight", 200), 2) << metrics;
}

TEST(AnthropicSdk, AnExhaustedQuotaIsNotRetried) {
    GatewayUnderTest gw(k_routes +
                        "tiers:\n  t:\n    limits:\n"
                        "      - { name: daily, algorithm: quota, period: day, limit: 1, unit: requests }\n"
                        "tenants:\n  - { id: capped, tier: t, keys: [\"k-capped\"] }\n");
    RUN_SDK(r, gw, "quota", "k-capped");
    const auto& refused = r["refused"];
    ASSERT_TRUE(refused.is_object()) << r.dump(2);
    EXPECT_TRUE(refused["isRateLimitError"].get<bool>());
    EXPECT_EQ(refused["body"]["error"]["type"], "rate_limit_error");
    EXPECT_EQ(refused["headers"]["x-should-retry"], "false");
    EXPECT_EQ(refused["headers"]["anthropic-ratelimit-requests-remaining"], "0");
    auto metrics = gw.metrics_after(2);
    EXPECT_EQ(requests_with_status(metrics, "capped", 429), 1) << "maxRetries: 2, yet one attempt" << metrics;
}

const std::pair<std::string, std::string> k_key = {"x-api-key", "k1"};

Request messages_post(const std::string& path, const json& body,
                      std::vector<std::pair<std::string, std::string>> headers = {}) {
    headers.push_back(k_key);
    headers.push_back({"anthropic-version", "2023-06-01"});
    return {"POST", path, std::move(headers), body.dump()};
}

json ask(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }

TEST(Messages, RefusalsComeInAnthropicsShape) {
    GatewayUnderTest gw(k_routes + "tenants:\n  - { id: acme, keys: [\"k1\"] }\n", "  max_body_bytes: 2KiB\n");
    auto error_type = [](const Response& r) {
        auto doc = json::parse(r.body, nullptr, false);
        return doc.is_object() && doc["type"] == "error" ? doc["error"]["type"].get<std::string>() : r.body;
    };
    auto unknown_key = gw.request({"POST", "/v1/messages", {{"x-api-key", "nope"}}, "{}"});
    EXPECT_EQ(unknown_key.status, 401);
    EXPECT_EQ(error_type(unknown_key), "authentication_error");
    auto no_key = gw.request({"POST", "/v1/messages", {}, "{}"});
    EXPECT_EQ(error_type(no_key), "authentication_error");
    EXPECT_NE(no_key.body.find("x-api-key"), std::string::npos) << no_key.body;
    auto bad = gw.request(messages_post("/v1/messages", {{"max_tokens", "ten"}, {"messages", ask("hi")}}));
    EXPECT_EQ(bad.status, 400);
    EXPECT_EQ(error_type(bad), "invalid_request_error");
    EXPECT_NE(bad.body.find("'max_tokens' must be a non-negative integer"), std::string::npos);
    auto huge =
        gw.request(messages_post("/v1/messages", {{"max_tokens", 5}, {"messages", ask(std::string(4096, 'a'))}}));
    EXPECT_EQ(huge.status, 413);
    EXPECT_EQ(error_type(huge), "request_too_large");
    // A request the SDK sends elsewhere still reads its errors in its own shape.
    auto elsewhere = gw.request(messages_post("/v1/other", {{"max_tokens", 5}}));
    EXPECT_EQ(elsewhere.status, 404);
    EXPECT_EQ(error_type(elsewhere), "not_found_error");
    // OpenAI clients keep OpenAI's shape.
    auto chat = gw.request({"POST", "/v1/chat/completions", {{"Authorization", "Bearer nope"}}, "{}"});
    EXPECT_EQ(json::parse(chat.body)["error"]["code"], "invalid_api_key");
}

TEST(Messages, TheKeyIsTakenFromXApiKeyAndAMissingMaxTokensIsWritten) {
    GatewayUnderTest gw(k_routes + "tenants:\n  - { id: acme, keys: [\"k1\"] }\n");
    auto r = gw.request(messages_post("/v1/messages", {{"model", "m"}, {"messages", ask("hi")}}));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["type"], "message");
    // No max_tokens (the API requires one): the default was reserved and written upstream.
    EXPECT_EQ(r.header("x-mock-output-limit"), "max_tokens=256");
    EXPECT_EQ(gw.log().find("k1\""), std::string::npos) << "the key is in no log line";
}

TEST(Messages, StopAtBudgetEndsAStreamAsTheApiEndsOneAtMaxTokens) {
    GatewayUnderTest gw(
        k_routes +
            "cost:\n  input: { per: 1, min: 1 }\n  output: { per: 1, min: 1 }\n  stream_surcharge: 0\n"
            "  stop_at_budget: true\n  default_max_tokens: 5000\n  output_estimate: learned\n"
            "  learned: { min_samples: 1 }\n"
            "tiers:\n  t:\n    limits:\n"
            "      - { name: tokens, algorithm: token_bucket, capacity: 100, rate: 1000/s, unit: cost }\n"
            "tenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n",
        "", 0);
    // One short answer teaches the estimate: then nothing but the budget stops the stream.
    ASSERT_EQ(
        gw.request(messages_post("/v1/messages", {{"model", "m"}, {"max_tokens", 8}, {"messages", ask("hi")}})).status,
        200);
    ASSERT_TRUE(gw.wait_settled(1));
    std::this_thread::sleep_for(150ms);  // the bucket refills
    auto r = gw.request(messages_post("/v1/messages", {{"model", "m"}, {"stream", true}, {"messages", ask("hi")}},
                                      {{"x-mock-completion-tokens", "5000"}}));
    ASSERT_EQ(r.status, 200) << gw.log();
    EXPECT_LT(r.body.size(), 100'000u) << "not 5000 tokens";
    const std::string ending =
        "event: content_block_stop\ndata: {\"index\":0,\"type\":\"content_block_stop\"}\n\n"
        "event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},"
        "\"type\":\"message_delta\",\"usage\":{\"output_tokens\":";
    auto at = r.body.find(ending);
    ASSERT_NE(at, std::string::npos) << r.body.substr(r.body.size() > 600 ? r.body.size() - 600 : 0);
    EXPECT_EQ(r.body.find("content_block_stop"), at + 7) << "the open block is closed once";
    EXPECT_TRUE(r.body.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    EXPECT_EQ(r.body.find("\"stop_reason\":\"end_turn\""), std::string::npos) << "not the upstream's own ending";
}

TEST(Messages, CachedPromptTokensSettleAtTheirFactorInEveryDialect) {
    GatewayUnderTest gw(k_routes +
                        "cost:\n  input: { per: 1, min: 0 }\n  output: { per: 1, min: 1 }\n  stream_surcharge: 0\n"
                        "  cached_input_factor: 0.1\n"
                        "tenants:\n  - { id: acme, keys: [\"k1\"] }\n");
    std::string prompt;
    for (int i = 0; i < 1000; ++i) prompt += "word ";  // 1000 tokens by the heuristic
    auto messages =
        gw.request(messages_post("/v1/messages", {{"model", "m"}, {"max_tokens", 10}, {"messages", ask(prompt)}},
                                 {{"x-mock-cached-tokens", "800"}}));
    ASSERT_EQ(messages.status, 200) << messages.body;
    auto usage = json::parse(messages.body)["usage"];
    EXPECT_EQ(usage["cache_read_input_tokens"], 800);
    json chat_body = {{"model", "m"}, {"max_tokens", 10}, {"messages", ask(prompt)}};
    auto chat = gw.request({"POST",
                            "/v1/chat/completions",
                            {{"Authorization", "Bearer k1"}, {"x-mock-cached-tokens", "800"}},
                            chat_body.dump()});
    ASSERT_EQ(chat.status, 200) << chat.body;
    EXPECT_EQ(json::parse(chat.body)["usage"]["prompt_tokens_details"]["cached_tokens"], 800);
    ASSERT_TRUE(gw.wait_settled(2));
    auto lines = access_lines(gw, "/v1/messages", 1);
    auto chat_lines = access_lines(gw, "/v1/chat/completions", 1);
    ASSERT_EQ(lines.size(), 1u);
    ASSERT_EQ(chat_lines.size(), 1u);
    for (const auto& line : {lines[0], chat_lines[0]}) {
        SCOPED_TRACE(line.dump());
        auto prompt_tokens = line["prompt_tokens"].get<double>();
        EXPECT_EQ(line["cached_tokens"], 800);
        // The uncached part in full, the cached at a tenth (floor), the output.
        EXPECT_DOUBLE_EQ(line["cost_settled"].get<double>(), std::floor(prompt_tokens - 800 + 80) + 10);
        EXPECT_LT(line["cost_settled"].get<double>(), line["cost_reserved"].get<double>() - 600);
    }
}

}  // namespace
}  // namespace tokengate::testing
