#include <gtest/gtest.h>

#include <filesystem>

#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/hf_tokenizer.hpp"
#include "tokengate/cost/usage.hpp"

namespace tokengate::cost {
namespace {

const std::string k_role = R"(data: {"choices":[{"delta":{"role":"assistant","content":""},"index":0}],"usage":null})"
                           "\n\n";
const std::string k_token = R"(data: {"choices":[{"delta":{"content":"Hello world"},"index":0}],"usage":null})"
                            "\n\n";
const std::string k_usage =
    R"(data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}})"
    "\n\n";
const std::string k_done = "data: [DONE]\n\n";

std::string feed_in_pieces(SseUsageFilter& f, const std::string& stream, std::size_t piece) {
    std::string out;
    for (std::size_t i = 0; i < stream.size(); i += piece) {
        bool last = i + piece >= stream.size();
        out += f.feed(std::string_view(stream).substr(i, piece), last);
    }
    return out;
}

TEST(SseUsageFilter, HidesTheInjectedUsageChunkAcrossAnySplit) {
    auto stream = k_role + k_token + k_usage + k_done;
    for (std::size_t piece : {1, 7, 64, 4096}) {
        SseUsageFilter f(/*hide_usage=*/true);
        auto out = feed_in_pieces(f, stream, piece);
        SCOPED_TRACE(piece);
        EXPECT_EQ(out.find("\"usage\""), std::string::npos) << out;
        EXPECT_NE(out.find("Hello world"), std::string::npos);
        EXPECT_NE(out.find("[DONE]"), std::string::npos);
        ASSERT_TRUE(f.usage().known);
        EXPECT_EQ(f.usage().prompt_tokens, 12u);
        EXPECT_EQ(f.usage().completion_tokens, 34u);
    }
}

TEST(SseUsageFilter, KeepsUsageForAClientThatAsked) {
    auto stream = k_role + k_token + k_usage + k_done;
    SseUsageFilter f(/*hide_usage=*/false);
    EXPECT_EQ(feed_in_pieces(f, stream, 5), stream) << "byte for byte";
    EXPECT_TRUE(f.usage().known);
}

TEST(SseUsageFilter, PassesUnchangedEventsOnWithoutACopy) {
    SseUsageFilter f(/*hide_usage=*/false);
    auto batch = k_role + k_token + k_token + "data: {\"cho";
    auto out = f.feed(batch, false);
    EXPECT_EQ(out.data(), batch.data()) << "a view of the caller's bytes";
    EXPECT_EQ(out, k_role + k_token + k_token);
    EXPECT_EQ(f.feed("ices\":[]}\n\n", true), "data: {\"choices\":[]}\n\n") << "the held tail, completed";
}

TEST(SseUsageFilter, EditsOnlyTheEventsItMustInABatch) {
    const std::string plain = R"(data: {"choices":[{"delta":{"content":"Hi"},"index":0}]})"
                              "\n\n";
    SseUsageFilter f(/*hide_usage=*/true);
    auto out = std::string(f.feed(plain + k_token + plain + k_usage + plain + k_done, true));
    auto stripped = R"(data: {"choices":[{"delta":{"content":"Hello world"},"index":0}]})"
                    "\n\n";
    EXPECT_EQ(out, plain + stripped + plain + plain + k_done);
    EXPECT_EQ(f.usage().completion_tokens, 34u);
    EXPECT_EQ(f.streamed_tokens(), 3 * estimate_tokens("Hi") + estimate_tokens("Hello world"));
}

TEST(SseUsageFilter, CountsStreamedTextWithoutUsage) {
    SseUsageFilter f(false);
    feed_in_pieces(f, k_role + k_token + k_token + k_done, 3);
    EXPECT_FALSE(f.usage().known);
    EXPECT_EQ(f.streamed_tokens(), 2 * estimate_tokens("Hello world"));
    SseUsageFilter completions(false);
    completions.feed("data: {\"choices\":[{\"text\":\"abcdefgh\",\"index\":0}]}\r\n\r\n", true);
    EXPECT_EQ(completions.streamed_tokens(), estimate_tokens("abcdefgh"));
}

TEST(SseUsageFilter, CountsStreamedTextWithTheModelsTokenizerWhenItHasOne) {
    // The fuzz target's small tokenizer: it has no merge for "zq", so each letter is a token.
    auto tokenizer =
        HfTokenizer::load((std::filesystem::path(TOKENGATE_FIXTURES).parent_path() / "fuzz/tokenizer.json").string());
    const std::string text = "zqzqzqzq";
    std::string event = R"(data: {"choices":[{"index":0,"delta":{"content":")" + text + "\"}}]}\n\n";
    SseUsageFilter heuristic(false), counted(false, 1u << 20, tokenizer.get());
    heuristic.feed(event, false);
    counted.feed(event, false);
    EXPECT_EQ(counted.streamed_tokens(), tokenizer->count(text));
    EXPECT_NE(counted.streamed_tokens(), heuristic.streamed_tokens());
}

TEST(SseUsageFilter, PassesOversizedOrMalformedEventsOn) {
    SseUsageFilter f(true, /*max_event_bytes=*/16);
    auto out = std::string(f.feed("data: {not json, and no end in sight", false));
    EXPECT_EQ(out, "data: {not json, and no end in sight");
    SseUsageFilter g(true);
    EXPECT_EQ(g.feed("data: {broken}\n\n", true), "data: {broken}\n\n");
}

TEST(JsonUsageReader, ReadsUsageFromPieces) {
    JsonUsageReader r;
    std::string body = R"({"id":"x","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}})";
    r.feed(body.substr(0, 10));
    r.feed(body.substr(10));
    auto u = r.finish();
    ASSERT_TRUE(u.known);
    EXPECT_EQ(u.prompt_tokens, 5u);
    EXPECT_EQ(u.completion_tokens, 7u);
    JsonUsageReader small(8);
    small.feed(body);
    EXPECT_FALSE(small.finish().known) << "over its cap it gives up rather than grow";
    JsonUsageReader none;
    none.feed(R"({"error":{}})");
    EXPECT_FALSE(none.finish().known);
}

}  // namespace
}  // namespace tokengate::cost

namespace tokengate::cost {
namespace {

std::string anthropic_event(const std::string& type, const std::string& data) {
    return "event: " + type + "\ndata: " + data + "\n\n";
}

TEST(SseUsageFilter, AMessagesStreamStoppedAtItsBudgetEndsAsTheApiEndsOneAtMaxTokens) {
    auto stream =
        anthropic_event(
            "message_start",
            R"({"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":7,"output_tokens":1}}})") +
        anthropic_event(
            "content_block_start",
            R"({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}})") +
        anthropic_event(
            "content_block_delta",
            R"({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm hmm"}})") +
        anthropic_event("content_block_stop", R"({"type":"content_block_stop","index":0})") +
        anthropic_event("content_block_start",
                        R"({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}})") +
        anthropic_event(
            "content_block_delta",
            R"({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"one two three"}})") +
        anthropic_event(
            "content_block_delta",
            R"({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"never sent"}})");
    SseUsageFilter f(false);
    f.pause_after(4);
    auto out = std::string(f.feed(stream, true));
    ASSERT_TRUE(f.stopped());
    EXPECT_EQ(out.find("never sent"), std::string::npos);
    EXPECT_EQ(f.streamed_tokens(), 5u) << "thinking and text both count";
    EXPECT_EQ(f.usage().prompt_tokens, 7u) << "message_start's usage";
    auto ending = f.final_events(false, 7);
    EXPECT_EQ(ending,
              "event: content_block_stop\ndata: {\"index\":1,\"type\":\"content_block_stop\"}\n\n"
              "event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},"
              "\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}\n\n"
              "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
}

TEST(SseUsageFilter, AMessagesStreamStoppedBetweenBlocksClosesNoBlockTwice) {
    auto stream = anthropic_event("message_start", R"({"type":"message_start","message":{"id":"m","usage":{}}})") +
                  anthropic_event("content_block_start",
                                  R"({"type":"content_block_start","index":0,"content_block":{"type":"text"}})") +
                  anthropic_event("content_block_delta",
                                  R"({"type":"content_block_delta","index":0,"delta":{"text":"a b c d e"}})") +
                  anthropic_event("content_block_stop", R"({"type":"content_block_stop","index":0})");
    SseUsageFilter f(false);
    f.feed(stream, false);
    EXPECT_EQ(f.final_events(false, 0).find("content_block_stop"), std::string::npos);
}

}  // namespace
}  // namespace tokengate::cost
