// SPEC §11 through the binary: every body shape priced by POST /admin/explain, and settled
// from what each kind of upstream reports (a scripted upstream speaking each dialect).

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <mutex>

#include "harness.hpp"
#include "scripted_upstream.hpp"

namespace tokengate::testing {
namespace {

using nlohmann::json;

const std::pair<std::string, std::string> k_auth = {"Authorization", "Bearer k1"};

std::string words(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += "word ";
    return s;
}

const std::string k_every_route = R"(
routes:
  - { path_prefix: /, upstreams: [scripted] }
models:
  m: { cost_factor: 1.0, max_output_tokens: 1000 }
tiers:
  t:
    limits:
      - { name: tokens, algorithm: token_bucket, capacity: 1000000, rate: 1000/s, unit: cost }
tenants:
  - { id: acme, tier: t, keys: ["k1"] }
)";

struct Pricing : ::testing::Test {
    std::mutex mutex;
    std::vector<std::string> bodies;  // what the upstream received
    std::string reply = http_ok("{}", "application/json");
    ScriptedUpstream up{[this](const std::string&, const std::string& body) {
        std::lock_guard lock(mutex);
        bodies.push_back(body);
        return ScriptedUpstream::Reply{reply};
    }};
    GatewayUnderTest gw{k_every_route, "", 1000, up.yaml()};

    json explain(const std::string& path, const json& body) {
        json in = {{"key", "k1"}, {"path", path}, {"body", body}};
        auto r = gw.admin(Request{"POST", "/admin/explain", {}, in.dump()});
        EXPECT_EQ(r.status, 200) << r.body;
        return json::parse(r.body, nullptr, false);
    }
    /// The counter line of /metrics once `answered` requests are in it.
    std::string metric(const std::string& series, double answered) {
        auto text = gw.metrics_after(answered);
        auto at = text.find(series + " ");
        return at == std::string::npos
                   ? "absent"
                   : text.substr(at + series.size() + 1, text.find('\n', at) - at - series.size() - 1);
    }
};

TEST_F(Pricing, EveryShapeOfTheTableThroughExplain) {
    auto chat =
        explain("/v1/chat/completions",
                {{"model", "x"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 100}, {"n", 8}});
    EXPECT_EQ(chat["endpoint"], "chat");
    EXPECT_EQ(chat["sequences"], 8);
    EXPECT_EQ(chat["output_tokens"], 800) << chat.dump();

    auto best_of = explain("/v1/completions", {{"prompt", {"a", "b"}}, {"max_tokens", 10}, {"n", 2}, {"best_of", 8}});
    EXPECT_EQ(best_of["sequences"], 16);
    EXPECT_EQ(best_of["output_tokens"], 160);

    auto embeddings = explain("/v1/embeddings", {{"model", "e5"}, {"input", words(20000)}});
    EXPECT_EQ(embeddings["endpoint"], "embeddings");
    EXPECT_EQ(embeddings["input_tokens"], 20000) << "was 0 input, 256 output";
    EXPECT_EQ(embeddings["output_tokens"], 0);
    EXPECT_EQ(embeddings["cost"], 200 + 1);

    auto responses = explain("/v1/responses", {{"input", words(20000)}, {"max_output_tokens", 4000}});
    EXPECT_EQ(responses["endpoint"], "responses");
    EXPECT_EQ(responses["input_tokens"], 20000);
    EXPECT_EQ(responses["output_tokens"], 4000);
    EXPECT_EQ(responses["cost"], 200 + 80);

    auto tgi = explain("/generate", {{"inputs", words(20000)}, {"parameters", {{"max_new_tokens", 4000}}}});
    EXPECT_EQ(tgi["endpoint"], "tgi");
    EXPECT_EQ(tgi["input_tokens"], 20000);
    EXPECT_EQ(tgi["output_tokens"], 4000);

    auto rerank = explain("/v1/rerank", {{"query", "a b"}, {"documents", {"c d", "e f g"}}});
    EXPECT_EQ(rerank["input_tokens"], 7);
    EXPECT_EQ(rerank["output_tokens"], 0);

    auto model_default = explain("/v1/chat/completions", {{"model", "m"}, {"messages", json::array()}});
    EXPECT_EQ(model_default["output_tokens"], 1000) << "models.m.max_output_tokens, not cost.default_max_tokens";

    auto fallthrough = explain("/v1/chat/completions",
                               {{"messages", json::array()}, {"max_completion_tokens", 0}, {"max_tokens", 4000}});
    EXPECT_EQ(fallthrough["output_tokens"], 4000);
}

// A 640 × 480 PNG's signature and IHDR chunk, then 300 KB of (zero) pixel data.
const std::string k_png_640x480 =
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAoAAAAHgCAYAAAAAAAAA" + std::string(400 * 1024, 'A');

json chat_with_image(const std::string& url) {
    return {{"model", "x"},
            {"messages",
             {{{"role", "user"},
               {"content",
                {{{"type", "text"}, {"text", "what is this?"}},
                 {{"type", "image_url"}, {"image_url", {{"url", url}}}}}}}}}};
}

TEST_F(Pricing, AnImageIsPricedFromItsHeaderNotItsBase64) {
    auto priced = explain("/v1/chat/completions", chat_with_image(k_png_640x480));
    EXPECT_EQ(priced["images"], 1);
    EXPECT_GE(priced["input_tokens"], 425) << "85 + 2 tiles × 170";
    EXPECT_LT(priced["input_tokens"], 450) << "was ~140,000 text tokens of base64";
    auto by_url = explain("/v1/chat/completions", chat_with_image("https://example.com/cat.png"));
    EXPECT_GE(by_url["input_tokens"], 1000) << "image_default_tokens";
    // A header cut short is the client's error.
    auto r = gw.request(Request{
        "POST", "/v1/chat/completions", {k_auth}, chat_with_image("data:image/png;base64,iVBORw0KGgo=").dump()});
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(json::parse(r.body)["error"]["message"].get<std::string>().find("cut short"), std::string::npos)
        << r.body;
}

TEST_F(Pricing, BadCountsAre400sOnTheDataPlane) {
    for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
             {"/v1/chat/completions", R"({"messages":[],"n":0})"},
             {"/v1/completions", R"({"prompt":"a","n":4,"best_of":2})"},
             {"/v1/completions", R"({"prompt":"a","best_of":100000})"},
             {"/generate", R"({"inputs":"a","parameters":{"max_new_tokens":"many"}})"},
             {"/v1/responses", R"({"input":5})"}}) {
        auto r = gw.request(Request{"POST", path, {k_auth}, body});
        EXPECT_EQ(r.status, 400) << path << " " << body;
        EXPECT_EQ(json::parse(r.body)["error"]["code"], "invalid_body") << r.body;
    }
    EXPECT_TRUE(bodies.empty()) << "nothing was forwarded";
}

TEST_F(Pricing, ResponsesApiIsSettledFromItsUsageAndForwardedUntouched) {
    reply = http_ok(R"({"object":"response","usage":{"input_tokens":400,"output_tokens":100}})", "application/json");
    // 400 reported input tokens: a body of that size (a report past it would be clamped, SPEC §17).
    const std::string body = R"({"model":"m","input":")" + std::string(400, 'a') + R"(","max_output_tokens":4000})";
    auto r = gw.request(Request{"POST", "/v1/responses", {k_auth}, body});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(metric(R"(tokengate_tokens_total{tenant="acme",model="m",kind="completion"})", 1), "100");
    EXPECT_EQ(metric(R"(tokengate_tokens_total{tenant="acme",model="m",kind="prompt"})", 1), "400");
    EXPECT_EQ(metric(R"(tokengate_cost_settled_total{tenant="acme"})", 1), "6") << "400/100 + 100/50";
    std::lock_guard lock(mutex);
    ASSERT_EQ(bodies.size(), 1u);
    EXPECT_EQ(bodies[0], body);
}

TEST_F(Pricing, AResponsesStreamIsNotAskedForUsageAndSettlesFromResponseCompleted) {
    std::string events =
        "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n"
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n"
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":"
        "{\"input_tokens\":300,\"output_tokens\":250}}}\n\n";
    reply = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " + std::to_string(events.size()) +
            "\r\n\r\n" + events;
    const std::string body = R"({"model":"m","input":"hello","stream":true})";
    auto r = gw.request(Request{"POST", "/v1/responses", {k_auth}, body});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, events) << "relayed as the upstream sent it";
    EXPECT_EQ(metric(R"(tokengate_tokens_total{tenant="acme",model="m",kind="completion"})", 1), "250");
    std::lock_guard lock(mutex);
    ASSERT_EQ(bodies.size(), 1u);
    EXPECT_EQ(bodies[0].find("stream_options"), std::string::npos) << "no stream_options injected";
    EXPECT_EQ(bodies[0], R"({"max_output_tokens":1000,"model":"m","input":"hello","stream":true})")
        << "only the declared output bound written (SPEC §17)";
}

TEST_F(Pricing, TgiGenerateStreamSettlesFromItsDetails) {
    std::string events =
        "data: {\"token\":{\"id\":1,\"text\":\"a\",\"special\":false}}\n\n"
        "data: {\"token\":{\"id\":2,\"text\":\"</s>\",\"special\":true},\"generated_text\":\"a\","
        "\"details\":{\"finish_reason\":\"eos_token\",\"generated_tokens\":42}}\n\n";
    reply = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " + std::to_string(events.size()) +
            "\r\n\r\n" + events;
    auto r = gw.request(Request{"POST",
                                "/generate_stream",
                                {k_auth},
                                R"({"inputs":"hello","parameters":{"max_new_tokens":500,"details":true}})"});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(metric(R"(tokengate_tokens_total{tenant="acme",model="",kind="completion"})", 1), "42");
}

TEST_F(Pricing, EmbeddingsAreSettledFromPromptTokens) {
    reply =
        http_ok(R"({"object":"list","data":[],"usage":{"prompt_tokens":700,"total_tokens":700}})", "application/json");
    auto r = gw.request(
        Request{"POST", "/v1/embeddings", {k_auth}, R"({"model":"m","input":")" + std::string(700, 'a') + "\"}"});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(metric(R"(tokengate_tokens_total{tenant="acme",model="m",kind="prompt"})", 1), "700");
    EXPECT_EQ(metric(R"(tokengate_cost_settled_total{tenant="acme"})", 1), "8") << "700/100 + the output minimum";
}

}  // namespace
}  // namespace tokengate::testing

namespace tokengate::testing {
namespace {

// The same dialects end to end with tokengate's own mock upstream, which speaks them too.
TEST(PricingWithTheMock, EachDialectIsSettledFromWhatTheMockReports) {
    GatewayUnderTest gw(R"(
routes:
  - { path_prefix: /, upstreams: [mock] }
tenants:
  - { id: acme, keys: ["k1"] }
)");
    auto call = [&](const std::string& path, const std::string& body) {
        auto r = gw.request(Request{"POST", path, {{"Authorization", "Bearer k1"}}, body});
        EXPECT_EQ(r.status, 200) << path << " " << r.body;
        return r;
    };
    auto series = [&](const std::string& model, const std::string& kind, double answered) {
        auto text = gw.metrics_after(answered);
        auto name = R"(tokengate_tokens_total{tenant="acme",model=")" + model + R"(",kind=")" + kind + "\"} ";
        auto at = text.find(name);
        return at == std::string::npos ? std::string("absent")
                                       : text.substr(at + name.size(), text.find('\n', at) - at - name.size());
    };
    call("/v1/embeddings", R"({"model":"e5","input":"a b c"})");
    EXPECT_EQ(series("e5", "prompt", 1), "3");
    EXPECT_EQ(series("e5", "completion", 1), "absent");

    auto json_reply = call("/v1/responses", R"({"model":"r1","input":"hi","max_output_tokens":3})");
    EXPECT_NE(json_reply.body.find(R"("output_tokens":3)"), std::string::npos) << json_reply.body;
    EXPECT_EQ(series("r1", "completion", 2), "3");

    auto stream = call("/v1/responses", R"({"model":"r2","input":"hi","max_output_tokens":2,"stream":true})");
    EXPECT_NE(stream.body.find("event: response.completed"), std::string::npos) << stream.body;
    EXPECT_EQ(series("r2", "completion", 3), "2");

    call("/generate", R"({"model":"t1","inputs":"hi","parameters":{"max_new_tokens":3,"details":true}})");
    EXPECT_EQ(series("t1", "completion", 4), "3");
    call("/generate_stream", R"({"model":"t2","inputs":"hi","parameters":{"max_new_tokens":2,"details":true}})");
    EXPECT_EQ(series("t2", "completion", 5), "2");
    call("/generate_stream", R"({"model":"t3","inputs":"hi","parameters":{"max_new_tokens":4}})");
    EXPECT_EQ(series("t3", "completion", 6), "4") << "no details: one token an event";
}

}  // namespace
}  // namespace tokengate::testing
