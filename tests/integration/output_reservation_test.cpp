// SPEC §12 through the binary, against the mock upstream: learned output estimates, capped
// output fields, and streams stopped at the tenant's budget.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <latch>
#include <memory>
#include <thread>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const std::pair<std::string, std::string> k_auth = {"Authorization", "Bearer k1"};

std::string config(const std::string& cost, const std::string& bucket) {
    return "routes:\n  - { path_prefix: /, upstreams: [mock] }\n"
           "cost:\n  input: { per: 1, min: 1 }\n  output: { per: 1, min: 1 }\n  stream_surcharge: 0\n" +
           cost + "tiers:\n  t:\n    limits:\n      - " + bucket +
           "\ntenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n";
}

double remaining(const GatewayUnderTest& gw) {
    auto r = gw.admin(Request{"GET", "/admin/tenants/acme", {}, ""});
    auto doc = json::parse(r.body, nullptr, false);
    for (const auto& l : doc["limits"])
        if (l["name"] == "tokens") return l["remaining"].get<double>();
    return 1e18;
}

Request post(const std::string& path, const json& body, std::vector<std::pair<std::string, std::string>> extra = {}) {
    extra.push_back(k_auth);
    extra.emplace_back("Content-Type", "application/json");
    return {"POST", path, extra, body.dump()};
}

TEST(CapOutput, TheUpstreamReceivesTheLoweredFieldForEachOfTheFourNames) {
    GatewayUnderTest gw(config("  cap_output: true\n  min_output: 16\n",
                               "{ name: tokens, algorithm: token_bucket, capacity: 1000, rate: 1/s, unit: cost }"),
                        "", 0);
    const std::vector<std::tuple<std::string, json, std::string>> cases = {
        {"/v1/chat/completions",
         {{"model", "m"}, {"max_completion_tokens", 5000}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}},
         "max_completion_tokens"},
        {"/v1/completions", {{"model", "m"}, {"max_tokens", 5000}, {"prompt", "hi"}}, "max_tokens"},
        {"/v1/responses", {{"model", "m"}, {"max_output_tokens", 5000}, {"input", "hi"}}, "max_output_tokens"},
        {"/generate", {{"inputs", "hi"}, {"parameters", {{"max_new_tokens", 5000}}}}, "parameters.max_new_tokens"},
    };
    double answered = 0;
    for (const auto& [path, body, field] : cases) {
        SCOPED_TRACE(path);
        // The previous answer's refund lands when its exchange is settled, just after its
        // last byte: wait for it, or this request would see the whole budget still held.
        ASSERT_TRUE(gw.wait_settled(answered));
        auto r = gw.request(post(path, body, {{"x-mock-completion-tokens", "10"}}));
        ++answered;
        ASSERT_EQ(r.status, 200) << r.body << gw.log();
        auto capped = r.header("x-tokengate-output-capped");
        ASSERT_FALSE(capped.empty()) << "a shorter answer instead of a 429";
        EXPECT_LT(std::stoul(capped), 1000u);
        EXPECT_GE(std::stoul(capped), 16u);
        EXPECT_EQ(r.header("x-mock-output-limit"), field + "=" + capped) << "what the upstream read from the body";
    }
    EXPECT_NE(gw.metrics_after(4).find("tokengate_output_capped_total{tenant=\"acme\"} 4"), std::string::npos);
    // Without cap_output the same request is a 429.
    GatewayUnderTest plain(
        config("", "{ name: tokens, algorithm: token_bucket, capacity: 1000, rate: 1/s, unit: cost }"), "", 0);
    EXPECT_EQ(plain.request(post("/v1/completions", {{"max_tokens", 5000}, {"prompt", "hi"}})).status, 429);
}

/// SPEC §17: the bound goes upstream, so only a learned reservation (smaller than the bound)
/// leaves a stream room to run past what it reserved.
const std::string k_learned_5000 =
    "  stop_at_budget: true\n  default_max_tokens: 5000\n  output_estimate: learned\n  learned: { min_samples: 1 }\n";

TEST(StopAtBudget, AStreamWithoutMaxTokensStopsWithinOneBlockOfTheBudget) {
    // 400 cost units, refilling 1 a second; once one answer of 16 tokens taught the estimate,
    // a request without max_tokens reserves 16 output tokens, and the mock would generate 5000.
    GatewayUnderTest gw(
        config(k_learned_5000, "{ name: tokens, algorithm: token_bucket, capacity: 400, rate: 1/s, unit: cost }"), "",
        2000);
    ASSERT_EQ(
        gw.request(post("/v1/chat/completions",
                        {{"model", "m"}, {"max_tokens", 16}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}))
            .status,
        200);
    ASSERT_TRUE(gw.wait_settled(1));
    json body = {{"model", "m"},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}},
                 {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    auto before = remaining(gw);
    auto r = gw.request(post("/v1/chat/completions", body, {{"x-mock-completion-tokens", "5000"}}));
    ASSERT_EQ(r.status, 200) << gw.log();
    // Each token event of the mock is one word, one token: count what reached the client.
    std::size_t tokens = 0;
    const std::string word = "\"delta\":{\"content\":";
    for (auto at = r.body.find(word); at != std::string::npos; at = r.body.find(word, at + 1)) ++tokens;
    const double input = 4 + 1 + 1 + 3;  // one message "hi" with its role, framing and the reply's
    // Charged a block of stream_charge_every (64) tokens at a time as it relays (SPEC §17).
    EXPECT_GE(tokens, before - input - 64 - 2) << "it ran up to the budget";
    EXPECT_LE(tokens, before - input + 64 + 2) << "and stopped within a block of it";
    auto last_chunk = r.body.rfind("\"finish_reason\":\"length\"");
    ASSERT_NE(last_chunk, std::string::npos) << r.body.substr(r.body.size() > 600 ? r.body.size() - 600 : 0);
    auto usage_at = r.body.find("\"usage\":{", last_chunk);
    ASSERT_NE(usage_at, std::string::npos) << "the client asked for usage: it gets the relayed count";
    auto usage = json::parse(r.body.substr(r.body.rfind("data: ", usage_at) + 6,
                                           r.body.find("\n\n", usage_at) - r.body.rfind("data: ", usage_at) - 6));
    // The gateway's count of what it relayed (its estimator's, word by word).
    EXPECT_NEAR(static_cast<double>(usage["usage"]["completion_tokens"].get<std::size_t>()),
                static_cast<double>(tokens), 3);
    EXPECT_EQ(r.body.substr(r.body.size() - 14), "data: [DONE]\n\n");
    ASSERT_TRUE(gw.wait_settled(2));
    // The debt stays bounded: at most a block or so below zero (plus a second of refill).
    EXPECT_GT(remaining(gw), -64.0 - 4.0);
    // The upstream request was cut off, not left generating 5000 tokens.
    Response metrics;
    for (int i = 0; i < 100; ++i) {
        metrics = send_request(gw.mock_port(), {"GET", "/metrics", {}, ""});
        if (metrics.body.find("mock_cancelled_total 1") != std::string::npos) break;
        std::this_thread::sleep_for(20ms);
    }
    EXPECT_NE(metrics.body.find("mock_cancelled_total 1"), std::string::npos) << metrics.body;
    EXPECT_NE(gw.metrics_after(1).find("tokengate_streams_stopped_total{tenant=\"acme\"} 1"), std::string::npos);
}

TEST(StopAtBudget, EachDialectEndsInItsOwnFinalEvent) {
    GatewayUnderTest gw(
        config(k_learned_5000, "{ name: tokens, algorithm: token_bucket, capacity: 100, rate: 1000/s, unit: cost }"),
        "", 0);
    // One short answer for each model teaches the estimate: then nothing but the budget stops them.
    ASSERT_EQ(gw.request(post("/v1/completions", {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 8}})).status, 200);
    ASSERT_EQ(gw.request(post("/generate", {{"inputs", "hi"}, {"parameters", {{"max_new_tokens", 8}}}})).status, 200);
    const std::vector<std::tuple<std::string, json, std::string>> cases = {
        {"/v1/completions", {{"model", "m"}, {"stream", true}, {"prompt", "hi"}}, "\"finish_reason\":\"length\""},
        {"/v1/responses", {{"model", "m"}, {"stream", true}, {"input", "hi"}}, "event: response.incomplete"},
        {"/generate_stream", {{"inputs", "hi"}}, "\"finish_reason\":\"length\",\"generated_tokens\":"},
    };
    double answered = 2;
    for (const auto& [path, body, ending] : cases) {
        SCOPED_TRACE(path);
        ASSERT_TRUE(gw.wait_settled(answered++));  // the previous stream is charged what it relayed
        std::this_thread::sleep_for(150ms);        // and the bucket refills
        auto r = gw.request(post(path, body, {{"x-mock-completion-tokens", "5000"}}));
        ASSERT_EQ(r.status, 200) << gw.log();
        EXPECT_NE(r.body.find(ending), std::string::npos)
            << r.body.substr(r.body.size() > 400 ? r.body.size() - 400 : 0);
        EXPECT_LT(r.body.size(), 100'000u) << "not 5000 tokens";
    }
}

TEST(StopAtBudget, AClientThatLeavesDuringACappedOrStoppedStreamSettlesOnce) {
    GatewayUnderTest gw(config("  stop_at_budget: true\n  cap_output: true\n",
                               "{ name: tokens, algorithm: token_bucket, capacity: 300, rate: 1/s, unit: cost }"),
                        "", 200);
    auto leave_early = [&](const json& body) {
        RawClient client(gw.port());
        client.send_all(raw_post("/v1/chat/completions", "k1", body.dump(), "x-mock-completion-tokens: 5000\r\n"));
        auto seen = client.read_some(5s, " quick");
        client.close();  // mid-stream: 300 units at 200 tokens/s would take 1.5 s to spend
        return seen;
    };
    json capped = {
        {"model", "m"}, {"stream", true}, {"max_tokens", 5000}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    auto first = leave_early(capped);
    EXPECT_NE(first.find("x-tokengate-output-capped:"), std::string::npos) << first.substr(0, 400);
    ASSERT_TRUE(gw.wait_settled(1));
    std::this_thread::sleep_for(2s);  // a little budget back
    json open_ended = {{"model", "m"}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    leave_early(open_ended);
    ASSERT_TRUE(gw.wait_settled(2));
    auto text = gw.metrics_after(2);
    EXPECT_NE(text.find("tokengate_settled_total{tenant=\"acme\"} 2"), std::string::npos) << "once each";
    EXPECT_NE(text.find("tokengate_admitted_total{tenant=\"acme\"} 2"), std::string::npos);
}

TEST(OutputReservation, CapAndStopWorkWithTheRedisStore) {
    REQUIRE_REDIS();
    RedisServer redis;
    GatewayUnderTest gw(config("  cap_output: true\n  stop_at_budget: true\n  default_max_tokens: 16\n",
                               "{ name: tokens, algorithm: token_bucket, capacity: 400, rate: 1/s, unit: cost }") +
                            "store:\n  backend: redis\n  redis: { url: \"" + redis.url() +
                            "\", prefix: \"tgtest:\", timeout: 1s, pool: 2, on_error: fail_closed }\n",
                        "", 2000);
    auto capped = gw.request(
        post("/v1/completions", {{"max_tokens", 5000}, {"prompt", "hi"}}, {{"x-mock-completion-tokens", "10"}}));
    ASSERT_EQ(capped.status, 200) << capped.body << gw.log();
    EXPECT_EQ(capped.header("x-mock-output-limit"), "max_tokens=" + capped.header("x-tokengate-output-capped"));
    ASSERT_TRUE(gw.wait_settled(1));
    json body = {{"model", "m"}, {"stream", true}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    auto stopped = gw.request(post("/v1/chat/completions", body, {{"x-mock-completion-tokens", "5000"}}));
    ASSERT_EQ(stopped.status, 200) << gw.log();
    EXPECT_NE(stopped.body.find("\"finish_reason\":\"length\""), std::string::npos);
    EXPECT_EQ(stopped.body.substr(stopped.body.size() - 14), "data: [DONE]\n\n");
    EXPECT_LT(stopped.body.size(), 200'000u) << "not 5000 tokens";
    ASSERT_TRUE(gw.wait_settled(2));
    EXPECT_GT(remaining(gw), -4.0) << "the debt stays bounded with the shared store too";
}

/// The must-show scenario: a tenant whose requests declare 2000 output tokens and use about
/// 40. With declared reservations, its budget holds a few requests in flight; learned, many.
struct Burst {
    std::size_t admitted = 0;
    std::size_t refused = 0;
    double settled = 0;  // cost units charged for the burst
    double seconds = 0;
};

Burst burst_of_60(const std::string& estimate) {
    GatewayUnderTest gw(
        config("  output_estimate: " + estimate + "\n  learned: { window: 50, quantile: 0.95, min_samples: 10 }\n",
               "{ name: tokens, algorithm: token_bucket, capacity: 20000, rate: 500/s, unit: cost }"),
        "", 200);  // 40 tokens at 200/s: 0.2 s in flight each
    json body = {{"model", "m"},
                 {"max_tokens", 2000},
                 {"messages", {{{"role", "user"}, {"content", "summarise this in a sentence"}}}}};
    auto one = [&] { return gw.request(post("/v1/chat/completions", body, {{"x-mock-completion-tokens", "40"}})); };
    for (int i = 0; i < 12; ++i) EXPECT_EQ(one().status, 200);  // the history learns
    std::this_thread::sleep_for(1s);                            // the bucket fills up again
    auto settled_before = metric_total(gw.metrics_after(12), "tokengate_cost_settled_total");
    // Connected first, sent together: the 60 must arrive within the 0.2 s the first ones stay in
    // flight, or early refunds let more in (CI's ASan build spread thread start-up over 0.5 s).
    std::vector<std::unique_ptr<RawClient>> connections;
    for (int c = 0; c < 60; ++c) connections.push_back(std::make_unique<RawClient>(gw.port()));
    const auto bytes =
        raw_post("/v1/chat/completions", "k1", body.dump(), "x-mock-completion-tokens: 40\r\nConnection: close\r\n");
    std::atomic<std::size_t> ok{0}, refused{0};
    std::latch go(60);
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> clients;
    for (auto& connection : connections)
        clients.emplace_back([&, client = connection.get()] {
            go.arrive_and_wait();
            client->send_all(bytes);
            std::string answer;
            auto give_up = std::chrono::steady_clock::now() + 20s;
            while (!client->peer_closed() && std::chrono::steady_clock::now() < give_up)
                answer += client->read_once(1s);
            (answer.starts_with("HTTP/1.1 200") ? ok : refused)++;
        });
    for (auto& t : clients) t.join();
    Burst out{ok, refused};
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(gw.wait_settled(12 + static_cast<double>(ok)));
    out.settled = metric_total(gw.metrics_after(72), "tokengate_cost_settled_total") - settled_before;
    return out;
}

TEST(LearnedEstimate, ManyMoreRequestsInFlightOnTheSameBudget) {
    auto declared = burst_of_60("declared");
    auto learned = burst_of_60("learned");
    std::printf("  60 concurrent requests declaring 2000, using 40, on a 20,000-unit budget refilling 500/s:\n");
    for (const auto& [name, b] : {std::pair{"declared", declared}, std::pair{"learned", learned}})
        std::printf("    %-8s %2zu admitted, %2zu refused; %.0f units settled in %.2f s\n", name, b.admitted, b.refused,
                    b.settled, b.seconds);
    EXPECT_LE(declared.admitted, 10u) << "20,000 / ~2010 a request";
    EXPECT_GE(learned.admitted, 3 * declared.admitted);
    // What was generated stays within what the budget allows over the window.
    for (const auto& b : {declared, learned}) EXPECT_LE(b.settled, 20000 + 500 * b.seconds);
}

}  // namespace
}  // namespace tokengate::testing
