// The settled-cost rule as a table, without sockets: what each way an exchange can end costs.
#include <gtest/gtest.h>

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
