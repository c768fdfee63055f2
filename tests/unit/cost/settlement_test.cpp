// The settled-cost rule as a table, without sockets: what each way an exchange can end costs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "tokengate/cost/settlement.hpp"

namespace tokengate::cost {
namespace {

constexpr std::string_view k_json_with_usage =
    R"({"id":"x","usage":{"prompt_tokens":300,"completion_tokens":160,"total_tokens":460}})";
constexpr std::string_view k_json_without_usage = R"({"id":"x"})";
constexpr std::string_view k_stream_with_usage =
    "data: {\"choices\":[{\"delta\":{\"content\":\"Hello there friend\"}}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":300,\"completion_tokens\":160}}\n\n"
    "data: [DONE]\n\n";
constexpr std::string_view k_stream_without_usage =
    "data: {\"choices\":[{\"delta\":{\"content\":\"Hello there friend\"}}]}\n\ndata: [DONE]\n\n";

struct Row {
    const char* name;
    std::string_view type;
    std::string_view body;
    ExchangeEnd end;
    double cost;  // at factor 3.5, in per 100, out per 50 (SPEC §5's 70B row: 21)
    std::uint64_t prompt, completion;
};

TEST(Settlement, EveryWayAnExchangeEnds) {
    config::CostConfig cfg;
    RequestSummary request;
    request.input_tokens = 250;
    const double reserved = 40;
    const Row rows[] = {
        {"JSON completed with usage", "application/json", k_json_with_usage, {false, true, 200}, 21, 300, 160},
        {"JSON completed without usage", "application/json", k_json_without_usage, {false, true, 200}, reserved, 0, 0},
        {"JSON cut short: input, nothing streamed",
         "application/json",
         k_json_with_usage.substr(0, 20),
         {false, false, 200},
         (2 + 1) * 3.5,
         250,
         0},
        {"client gone before the head: the prompt was read", "", "", {false, false, 0}, (2 + 1) * 3.5, 250, 0},
        {"non-2xx without usage", "application/json", R"({"error":{}})", {false, true, 500}, 0, 0, 0},
        {"non-2xx with usage", "application/json", k_json_with_usage, {false, true, 400}, 21, 300, 160},
        {"stream with usage", "text/event-stream", k_stream_with_usage, {false, true, 200}, 21, 300, 160},
        {"stream without usage: input and streamed text",
         "text/event-stream",
         k_stream_without_usage,
         {false, true, 200},
         (2 + 1) * 3.5,
         250,
         3},
        {"upstream failed before any response", "", "", {true, false, 0}, 0, 0, 0},
        {"plain text completed", "text/plain", "hi", {false, true, 200}, reserved, 0, 0},
    };
    for (const auto& row : rows) {
        ResponseUsage observed;
        observed.start(row.type, false, false);
        observed.feed(row.body, true);
        auto settled = settled_cost(cfg, 3.5, request, reserved, observed, row.end);
        EXPECT_DOUBLE_EQ(settled.cost, row.cost) << row.name;
        EXPECT_EQ(settled.prompt_tokens, row.prompt) << row.name;
        EXPECT_EQ(settled.completion_tokens, row.completion) << row.name;
    }
}

TEST(Settlement, AStreamCarriesItsSurcharge) {
    config::CostConfig cfg;
    cfg.stream_surcharge = 2;
    RequestSummary request;
    request.stream = true;
    ResponseUsage observed;
    observed.start("text/event-stream", false, true);
    auto forwarded = observed.feed(k_stream_with_usage, true);
    EXPECT_EQ(forwarded.find("usage"), std::string_view::npos) << "the injected usage chunk is hidden";
    auto settled = settled_cost(cfg, 1.0, request, 10, observed, {false, true, 200});
    EXPECT_DOUBLE_EQ(settled.cost, (3 + 3) * 1.0 + 2);
}

}  // namespace
}  // namespace tokengate::cost

namespace tokengate::cost {
namespace {

/// SPEC §11's settlement per shape: what each upstream reports, read from a body or a stream.
SettledCost settle_response(std::string_view type, std::string_view body, std::uint64_t estimated_input = 250,
                            double cached_input_factor = 1.0) {
    config::CostConfig cfg;  // in per 100, out per 50, floor
    cfg.cached_input_factor = cached_input_factor;
    RequestSummary request;
    request.input_tokens = estimated_input;
    ResponseUsage observed;
    observed.start(type, false, false);
    observed.feed(body, true);
    return settled_cost(cfg, 1.0, request, 99, observed, {false, true, 200});
}

TEST(Settlement, EmbeddingsUsageHasNoCompletion) {
    auto s = settle_response("application/json", R"({"data":[],"usage":{"prompt_tokens":700,"total_tokens":700}})");
    EXPECT_EQ(s.prompt_tokens, 700u);
    EXPECT_EQ(s.completion_tokens, 0u);
    EXPECT_DOUBLE_EQ(s.cost, 7 + 1) << "output at its minimum";
}

TEST(Settlement, ResponsesApiJsonAndItsCompletedEvent) {
    auto json = settle_response("application/json",
                                R"({"object":"response","usage":{"input_tokens":400,"output_tokens":100}})");
    EXPECT_EQ(json.prompt_tokens, 400u);
    EXPECT_EQ(json.completion_tokens, 100u);
    auto stream = settle_response(
        "text/event-stream",
        "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n"
        "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi there\"}\n\n"
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":"
        "{\"input_tokens\":400,\"output_tokens\":100}}}\n\n");
    EXPECT_EQ(stream.prompt_tokens, 400u);
    EXPECT_EQ(stream.completion_tokens, 100u);
}

TEST(Settlement, ResponsesStreamCutShortCountsTheRelayedText) {
    config::CostConfig cfg;
    RequestSummary request;
    request.input_tokens = 250;
    ResponseUsage observed;
    observed.start("text/event-stream", false, false);
    observed.feed("data: {\"type\":\"response.output_text.delta\",\"delta\":\"one two three\"}\n\n", false);
    auto s = settled_cost(cfg, 1.0, request, 99, observed, {false, false, 200});
    EXPECT_EQ(s.prompt_tokens, 250u);
    EXPECT_EQ(s.completion_tokens, 3u);
}

TEST(Settlement, TgiDetailsAndGeneratedTextWithTheEstimatedPrompt) {
    auto details = settle_response(
        "application/json", R"({"generated_text":"...","details":{"finish_reason":"length","generated_tokens":500}})");
    EXPECT_EQ(details.prompt_tokens, 250u) << "TGI reports no prompt count: the estimate stands";
    EXPECT_EQ(details.completion_tokens, 500u);
    EXPECT_DOUBLE_EQ(details.cost, 2 + 10);
    auto array = settle_response("application/json", R"([{"generated_text":"one two three four"}])");
    EXPECT_EQ(array.completion_tokens, 4u) << "no details: the generated text, counted";
    auto stream = settle_response("text/event-stream",
                                  "data: {\"token\":{\"id\":1,\"text\":\"a\",\"special\":false}}\n\n"
                                  "data: {\"token\":{\"id\":2,\"text\":\"b\",\"special\":false}}\n\n"
                                  "data: {\"token\":{\"id\":3,\"text\":\"</s>\",\"special\":true},"
                                  "\"generated_text\":\"ab\",\"details\":{\"generated_tokens\":3}}\n\n");
    EXPECT_EQ(stream.completion_tokens, 3u);
    auto undetailed = settle_response("text/event-stream",
                                      "data: {\"token\":{\"id\":1,\"text\":\"a\",\"special\":false}}\n\n"
                                      "data: {\"token\":{\"id\":2,\"text\":\"b\",\"special\":false}}\n\n");
    EXPECT_EQ(undetailed.completion_tokens, 2u) << "one token an event";
}

TEST(Settlement, DollarsFromTheUsageWithCachedTokensAtTheirPrice) {
    config::CostConfig cfg;
    config::ModelPrice price{0.60, 0.80, 0.06};
    RequestSummary request;
    request.input_tokens = 1000;
    ResponseUsage observed;
    observed.start("application/json", true, false);
    observed.feed(R"({"usage":{"prompt_tokens":1000000,"completion_tokens":500000,)"
                  R"("prompt_tokens_details":{"cached_tokens":400000}}})",
                  true);
    auto settled = settled_cost(cfg, 1.0, request, 40, observed, {false, true, 200});
    EXPECT_EQ(settled.cached_tokens, 400000u);
    auto used = settled_amounts(settled, config::Amounts{40, 1200, 0.5}, &price);
    EXPECT_DOUBLE_EQ(used.tokens, 1.5e6);
    // 600k uncached at $0.60/M + 400k cached at $0.06/M + 500k out at $0.80/M.
    EXPECT_NEAR(used.usd, 0.36 + 0.024 + 0.40, 1e-12);
    EXPECT_EQ(settled_amounts(settled, {}, nullptr).usd, 0) << "no price: 0 USD";

    // A complete answer without usage keeps what was reserved, in every unit.
    ResponseUsage bare;
    bare.start("application/json", true, false);
    bare.feed(R"({"id":"x"})", true);
    auto kept = settled_amounts(settled_cost(cfg, 1.0, request, 40, bare, {false, true, 200}),
                                config::Amounts{40, 1200, 0.5}, &price);
    EXPECT_EQ(kept.tokens, 1200);
    EXPECT_EQ(kept.usd, 0.5);
    // An upstream that failed: nothing in any unit.
    auto failed = settled_amounts(settled_cost(cfg, 1.0, request, 40, bare, {true, false, 0}),
                                  config::Amounts{40, 1200, 0.5}, &price);
    EXPECT_EQ(failed.tokens, 0);
    EXPECT_EQ(failed.usd, 0);
}

SettledCost settle_cached(std::string_view type, std::string_view body, double cached_input_factor) {
    return settle_response(type, body, 2000, cached_input_factor);
}

// SPEC §20: Anthropic's input_tokens leaves out the cache's tokens; both count as prompt, and
// what was read from the cache at cost.cached_input_factor.
constexpr std::string_view k_messages_json =
    R"({"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hi"}],)"
    R"("usage":{"input_tokens":200,"cache_creation_input_tokens":300,"cache_read_input_tokens":1000,"output_tokens":100}})";
constexpr std::string_view k_messages_stream =
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\","
    "\"usage\":{\"input_tokens\":200,\"cache_creation_input_tokens\":300,\"cache_read_input_tokens\":1000,"
    "\"output_tokens\":1}}}\n\n"
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,"
    "\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n"
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":null},"
    "\"usage\":{\"output_tokens\":40}}\n\n"
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},"
    "\"usage\":{\"output_tokens\":100}}\n\n"
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

TEST(Settlement, MessagesUsageCountsTheCacheAsPromptAndItsReadsAtTheFactor) {
    for (auto [type, body] :
         {std::pair{"application/json", k_messages_json}, std::pair{"text/event-stream", k_messages_stream}}) {
        SCOPED_TRACE(type);
        auto full = settle_cached(type, body, 1.0);
        EXPECT_EQ(full.prompt_tokens, 1500u) << "200 + 300 written + 1000 read";
        EXPECT_EQ(full.cached_tokens, 1000u);
        EXPECT_EQ(full.completion_tokens, 100u) << "the last message_delta's cumulative count";
        EXPECT_DOUBLE_EQ(full.cost, 15 + 2);
        auto cached = settle_cached(type, body, 0.1);
        // 500 uncached + 1000 × 0.1 = 600 → 6, output 100 → 2.
        EXPECT_DOUBLE_EQ(cached.cost, 6 + 2);
        EXPECT_DOUBLE_EQ(settle_cached(type, body, 0).cost, 5 + 2);
    }
}

TEST(Settlement, MessagesStreamWithItsPromptRepeatedInTheLastDelta) {
    // Newer servers repeat the prompt's counts in message_delta: the last word stands.
    std::string stream(k_messages_stream);
    auto at = stream.rfind("\"usage\":{\"output_tokens\":100}");
    stream.replace(at, std::string_view("\"usage\":{\"output_tokens\":100}").size(),
                   "\"usage\":{\"input_tokens\":700,\"cache_read_input_tokens\":300,\"output_tokens\":100}");
    auto s = settle_cached("text/event-stream", stream, 0.5);
    EXPECT_EQ(s.prompt_tokens, 1000u);
    EXPECT_EQ(s.cached_tokens, 300u);
    EXPECT_DOUBLE_EQ(s.cost, 8 + 2) << "700 + 300 × 0.5 = 850 → 8";
}

TEST(Settlement, OpenAiCachedTokensAtTheFactorInEveryDialect) {
    auto chat = settle_cached("application/json",
                              R"({"usage":{"prompt_tokens":1000,"completion_tokens":100,)"
                              R"("prompt_tokens_details":{"cached_tokens":800}}})",
                              0.25);
    EXPECT_EQ(chat.cached_tokens, 800u);
    EXPECT_DOUBLE_EQ(chat.cost, 4 + 2) << "200 + 800 × 0.25 = 400 → 4";
    auto responses = settle_cached("application/json",
                                   R"({"object":"response","usage":{"input_tokens":1000,"output_tokens":100,)"
                                   R"("input_tokens_details":{"cached_tokens":800}}})",
                                   0.25);
    EXPECT_DOUBLE_EQ(responses.cost, 4 + 2);
    auto sglang = settle_cached(
        "application/json",
        R"({"text":"hi","meta_info":{"prompt_tokens":1000,"completion_tokens":100,"cached_tokens":800}})", 0.25);
    EXPECT_DOUBLE_EQ(sglang.cost, 4 + 2);
    // More cached than prompt is a broken report: no more than the prompt is cached.
    auto over = settle_cached("application/json",
                              R"({"usage":{"prompt_tokens":1000,"completion_tokens":100,)"
                              R"("prompt_tokens_details":{"cached_tokens":99999}}})",
                              0);
    EXPECT_EQ(over.cached_tokens, 1000u);
    EXPECT_DOUBLE_EQ(over.cost, 1 + 2) << "input at its minimum";
}

TEST(Settlement, ReservationInEveryUnitStaysFiniteForHostileCounts) {
    config::CostConfig cfg;
    config::ModelPrice price{1e9, 1e9, 1e9};
    auto a = request_amounts(cfg, 1.0, &price, UINT64_MAX, UINT64_MAX, false);
    EXPECT_TRUE(std::isfinite(a.tokens));
    EXPECT_TRUE(std::isfinite(a.usd));
    EXPECT_LE(a.usd, k_max_cost);
    // Cached tokens the upstream over-reports are capped at the prompt.
    EXPECT_DOUBLE_EQ(usd_cost(&price, 10, 1000, 0), 10 * 1e9 / 1e6);
}

}  // namespace
}  // namespace tokengate::cost
