#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "tokengate/cost/cost.hpp"

namespace tokengate::cost {
namespace {

TEST(RequestCost, SpecWorkedExamples) {
    config::CostConfig c;  // input per 100 min 1, output per 50 min 1, floor
    c.stream_surcharge = 1;
    EXPECT_DOUBLE_EQ(request_cost(c, 1.0, 60, 40, false), 2);
    EXPECT_DOUBLE_EQ(request_cost(c, 3.5, 300, 160, false), 21);
    c.rounding = config::Rounding::ceil;
    EXPECT_DOUBLE_EQ(request_cost(c, 3.5, 300, 160, false), 24.5);
    EXPECT_DOUBLE_EQ(request_cost(c, 3.5, 300, 160, true), 25.5);
}

config::ModelCost model(std::string pattern, double factor) {
    config::ModelCost m;
    m.pattern = std::move(pattern);
    m.cost_factor = factor;
    return m;
}

TEST(CostFactor, GlobsAndDefault) {
    std::vector<config::ModelCost> models = {model("llama3-70b*", 3.5), model("llama3-8b", 1.0)};
    EXPECT_DOUBLE_EQ(cost_factor(models, "llama3-70b-instruct"), 3.5);
    EXPECT_DOUBLE_EQ(cost_factor(models, "mistral"), 1.0);
    models.push_back(model("*", 2.0));
    EXPECT_DOUBLE_EQ(cost_factor(models, "mistral"), 2.0);
    EXPECT_DOUBLE_EQ(cost_factor(models, "llama3-8b"), 1.0);
}

TEST(EstimateTokens, LatinAndCjk) {
    EXPECT_EQ(estimate_tokens(""), 0u);
    EXPECT_EQ(estimate_tokens("abcd"), 1u);
    EXPECT_EQ(estimate_tokens("hello world"), 2u) << "a common word is one token";
    EXPECT_EQ(estimate_tokens("internationalization"), 3u) << "long words split every ~8 letters";
    EXPECT_EQ(estimate_tokens("1234567"), 3u) << "digits in threes";
    EXPECT_EQ(estimate_tokens("a == b;\n"), 5u) << "a, ==, b, ;, newline";
    EXPECT_EQ(estimate_tokens("你好世界。"), 5u) << "one token per CJK character";
    EXPECT_EQ(estimate_tokens("hi 你好"), 3u);
    EXPECT_EQ(estimate_tokens(std::string_view("\x01\x7f\v\f", 4)), 4u) << "fuzz regression: this used to hang";
}

// ASCII text is counted from class masks 64 bytes at a time (found with AVX2 where the CPU has
// it, else SSE2); any other text by the rules run by run. One é (one token, a run of its own)
// sends ASCII text the second way: the counts must agree, on both ways of finding the masks.
TEST(Cost, AsciiTextCountsAsTheRunByRunRules) {
    auto by_runs = [](std::string text) { return estimate_tokens(text + "\xc3\xa9") - 1; };
    auto agree = [&](const std::string& text) {
        auto expected = by_runs(text);
        return estimate_tokens(text) == expected && detail::estimate_tokens_without_avx2(text) == expected;
    };
    for (const char* file : {"english.txt", "code.txt"}) {
        std::ifstream in(std::filesystem::path(TOKENGATE_FIXTURES).parent_path() / "corpus" / file);
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        ASSERT_GT(text.size(), 1000u) << file;
        for (std::size_t length : {text.size(), text.size() / 3, std::size_t{1000}, std::size_t{7}, std::size_t{0}})
            EXPECT_TRUE(agree(text.substr(0, length))) << file << " " << length;
    }
    // Every ASCII byte, long runs of each class (words past 8, spaces past 2), cuts anywhere.
    std::mt19937 random(17);
    const std::string alphabet = "aaaaaaaaaaaaZ_00000  \n\r\t.,;{}()\x01\x7f\v";
    for (int round = 0; round < 3000; ++round) {
        std::string text;
        auto length = random() % (round < 2000 ? 64 : 4000);
        while (text.size() < length) {
            char c = random() % 4 == 0 ? static_cast<char>(random() % 128) : alphabet[random() % alphabet.size()];
            text.append(1 + random() % (random() % 8 == 0 ? 40 : 3), c);
        }
        ASSERT_TRUE(agree(text)) << text;
    }
    // Each ASCII byte alone and between two others of each kind: every class is told apart.
    for (int c = 0; c < 128; ++c)
        for (char around : {'a', '7', '.', ' ', '\n', '\x01'}) {
            std::string text{around, static_cast<char>(c), static_cast<char>(c), around};
            ASSERT_TRUE(agree(text)) << c << " " << int{around};
        }
    // A run of each class starting at every offset in a block, long enough to cross one or two
    // block edges: its extra tokens are counted across them.
    for (char c : {'a', '7', '.', ' ', '\n', '\x01'})
        for (std::size_t offset = 0; offset < 70; ++offset)
            for (std::size_t length = 1; length < 140; ++length) {
                auto text = std::string(offset, c == 'a' ? '-' : 'b') + std::string(length, c) + "!";
                ASSERT_TRUE(agree(text)) << int{c} << " " << offset << " " << length;
            }
    EXPECT_EQ(estimate_tokens(std::string(5000, 'a')), 625u) << "one run across every block";
    EXPECT_EQ(estimate_tokens(std::string(5000, ' ')), 1u);
    EXPECT_EQ(estimate_tokens(std::string(5000, '\x01')), 5000u);
}

TEST(ParseRequestBody, ChatRequest) {
    config::CostConfig c;
    auto p = parse_request_body(
        R"({"model":"llama3-8b","messages":[{"role":"user","content":"abcdefgh"}],"max_tokens":100,"stream":true,
            "stream_options":{"include_usage":true}})",
        c);
    ASSERT_EQ(p.error, BodyError::none);
    EXPECT_EQ(p.summary.model, "llama3-8b");
    EXPECT_TRUE(p.summary.stream);
    EXPECT_TRUE(p.summary.client_wants_usage);
    EXPECT_EQ(p.summary.max_output_tokens, 100u);
    EXPECT_EQ(p.summary.input_tokens, 4u + 1u + 1u + 3u) << "message framing + role + one word + reply priming";
}

TEST(ParseRequestBody, MaxCompletionTokensWinsAndDefaultApplies) {
    config::CostConfig c;
    c.default_max_tokens = 256;
    EXPECT_EQ(parse_request_body(R"({"messages":[],"max_tokens":10,"max_completion_tokens":20})", c)
                  .summary.max_output_tokens,
              20u);
    EXPECT_EQ(parse_request_body(R"({"prompt":"x"})", c).summary.max_output_tokens, 256u);
    EXPECT_EQ(parse_request_body("", c).summary.max_output_tokens, 0u);
}

TEST(ParseRequestBody, DuplicateKeysAreRefusedAtEveryDepthNamingTheirPointer) {
    config::CostConfig c;
    auto p = parse_request_body(R"({"max_tokens":1,"messages":[],"max_tokens":4000})", c);
    EXPECT_EQ(p.error, BodyError::duplicate_key);
    EXPECT_NE(p.message.find("'/max_tokens'"), std::string::npos) << p.message;
    EXPECT_EQ(parse_request_body(R"({"user":"a","user":"b"})", c).error, BodyError::duplicate_key);
    // Below the top level, after unescaping, with '/' and '~' escaped in the pointer.
    p = parse_request_body(
        R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"input_audio","type":"text","text":"b"}]}]})",
        c);
    EXPECT_EQ(p.error, BodyError::duplicate_key);
    EXPECT_NE(p.message.find("'/messages/0/content/1/type'"), std::string::npos) << p.message;
    p = parse_request_body(R"({"x":{"a/b~":1,"a/b~":2}})", c);
    EXPECT_NE(p.message.find("'/x/a~1b~0'"), std::string::npos) << p.message;
    // A large object (sorted, not compared pairwise) too.
    std::string wide = R"({"prompt":"x")";
    for (int i = 0; i < 40; ++i) wide += ",\"k" + std::to_string(i) + "\":1";
    EXPECT_EQ(parse_request_body(wide + "}", c).error, BodyError::none);
    EXPECT_EQ(parse_request_body(wide + R"(,"k7":2})", c).error, BodyError::duplicate_key);
}

TEST(ParseRequestBody, Errors) {
    config::CostConfig c;
    EXPECT_EQ(parse_request_body("{not json", c).error, BodyError::invalid_json);
    EXPECT_EQ(parse_request_body("[1,2]", c).error, BodyError::invalid_body);
    EXPECT_EQ(parse_request_body(R"({"messages":[],"max_tokens":"x"})", c).error, BodyError::invalid_body);
    EXPECT_EQ(parse_request_body(R"({"messages":[],"max_tokens":-1})", c).error, BodyError::invalid_body);
    EXPECT_EQ(parse_request_body(R"({"messages":"hi"})", c).error, BodyError::invalid_body);
    EXPECT_EQ(parse_request_body(R"({"model":5})", c).error, BodyError::invalid_body);
    EXPECT_EQ(parse_request_body(R"({"stream":"yes"})", c).error, BodyError::invalid_body);
}

}  // namespace
}  // namespace tokengate::cost

namespace tokengate::cost {
namespace {

TEST(WithStreamUsage, InsertsOrSetsIncludeUsage) {
    auto added = with_stream_usage(R"({"model":"m","stream":true})", false);
    EXPECT_EQ(added, R"({"stream_options":{"include_usage":true},"model":"m","stream":true})");
    EXPECT_EQ(with_stream_usage("{}", false), R"({"stream_options":{"include_usage":true}})");
    // Fuzz regression: stream_options of the wrong type used to throw on the data plane.
    auto replaced = nlohmann::json::parse(with_stream_usage(R"({"stream":true,"stream_options":"m"})", true));
    EXPECT_EQ(replaced["stream_options"]["include_usage"], true);
    EXPECT_EQ(with_stream_usage("[1]", true), "[1]");
    auto set = nlohmann::json::parse(with_stream_usage(R"({"stream_options":{"include_usage":false},"x":1})", true));
    EXPECT_EQ(set["stream_options"]["include_usage"], true);
    EXPECT_EQ(set["x"], 1);
}

}  // namespace
}  // namespace tokengate::cost
