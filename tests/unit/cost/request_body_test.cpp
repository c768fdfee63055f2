// SPEC §11's table, row by row: what each body shape costs in input, output and sequences,
// and the bad input each refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/image.hpp"

namespace tokengate::cost {
namespace {

config::CostConfig defaults() {
    config::CostConfig c;
    c.default_max_tokens = 256;
    return c;
}

RequestSummary priced(std::string_view path, std::string_view body) {
    auto p = parse_request_body(body, defaults(), nullptr, path);
    EXPECT_EQ(p.error, BodyError::none) << p.message;
    return p.summary;
}

std::string refusal(std::string_view path, std::string_view body) {
    auto p = parse_request_body(body, defaults(), nullptr, path);
    return p.error == BodyError::invalid_body || p.error == BodyError::duplicate_key ? p.message : "accepted";
}

const std::string k_words = [] {
    std::string s;
    for (int i = 0; i < 1000; ++i) s += "word ";
    return s;
}();

TEST(EndpointForPath, TheLastSegmentDecidesWhateverThePrefix) {
    EXPECT_EQ(endpoint_for_path("/v1/chat/completions"), Endpoint::chat);
    EXPECT_EQ(endpoint_for_path("/openai/v1/chat/completions/"), Endpoint::chat);
    EXPECT_EQ(endpoint_for_path("/v1/completions"), Endpoint::completions);
    EXPECT_EQ(endpoint_for_path("/v1/embeddings"), Endpoint::embeddings);
    EXPECT_EQ(endpoint_for_path("/pooling"), Endpoint::embeddings);
    EXPECT_EQ(endpoint_for_path("/classify"), Endpoint::embeddings);
    EXPECT_EQ(endpoint_for_path("/v1/rerank"), Endpoint::rerank);
    EXPECT_EQ(endpoint_for_path("/score"), Endpoint::rerank);
    EXPECT_EQ(endpoint_for_path("/v1/responses"), Endpoint::responses);
    EXPECT_EQ(endpoint_for_path("/generate"), Endpoint::tgi);
    EXPECT_EQ(endpoint_for_path("/tgi/generate_stream"), Endpoint::tgi);
    EXPECT_EQ(endpoint_for_path("/v1/models"), Endpoint::unknown);
}

TEST(RequestBody, ChatMultipliesOutputByN) {
    auto one = priced("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":100})");
    auto eight =
        priced("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":100,"n":8})");
    EXPECT_EQ(one.endpoint, Endpoint::chat);
    EXPECT_EQ(one.max_output_tokens, 100u);
    EXPECT_EQ(eight.sequences, 8u);
    EXPECT_EQ(eight.max_output_tokens, 800u);
    EXPECT_EQ(eight.input_tokens, one.input_tokens) << "the prompt is read once";
}

TEST(RequestBody, ChatCountsTheResponseFormatSchema) {
    auto plain = priced("/v1/chat/completions", R"({"messages":[]})");
    auto schema = priced("/v1/chat/completions",
                         R"({"messages":[],"response_format":{"type":"json_schema","json_schema":{"name":"answer",
                             "schema":{"type":"object","properties":{"city":{"type":"string"}}}}}})");
    EXPECT_GT(schema.input_tokens, plain.input_tokens + 5);
}

TEST(RequestBody, AZeroMaxCompletionTokensFallsThroughToMaxTokens) {
    // vLLM and SGLang read `max_completion_tokens or max_tokens`: price what they will do.
    auto s = priced("/v1/chat/completions", R"({"messages":[],"max_completion_tokens":0,"max_tokens":4000})");
    EXPECT_EQ(s.max_output_tokens, 4000u);
    EXPECT_EQ(priced("/v1/chat/completions", R"({"messages":[],"max_completion_tokens":7,"max_tokens":4000})")
                  .max_output_tokens,
              7u);
    EXPECT_EQ(priced("/v1/chat/completions", R"({"messages":[]})").max_output_tokens, 256u) << "the default";
}

TEST(RequestBody, CompletionsMultiplyPromptsByTheLargerOfNAndBestOf) {
    auto s = priced("/v1/completions", R"({"prompt":["a","b","c"],"max_tokens":10,"n":2,"best_of":4})");
    EXPECT_EQ(s.sequences, 12u);
    EXPECT_EQ(s.max_output_tokens, 120u);
    auto ids = priced("/v1/completions", R"({"prompt":[1,2,3,4,5],"max_tokens":10})");
    EXPECT_EQ(ids.input_tokens, 5u) << "token ids count one each";
    EXPECT_EQ(ids.sequences, 1u) << "a flat array of ids is one prompt";
    auto batches = priced("/v1/completions", R"({"prompt":[[1,2],[3,4,5]],"max_tokens":10})");
    EXPECT_EQ(batches.input_tokens, 5u);
    EXPECT_EQ(batches.sequences, 2u);
}

TEST(RequestBody, EmbeddingsReserveInputOnly) {
    auto s = priced("/v1/embeddings", R"({"model":"e5","input":")" + k_words + R"("})");
    EXPECT_EQ(s.endpoint, Endpoint::embeddings);
    EXPECT_EQ(s.input_tokens, 1000u);
    EXPECT_EQ(s.max_output_tokens, 0u) << "no default output";
    EXPECT_EQ(priced("/v1/embeddings", R"({"input":["a b","c d"]})").input_tokens, 4u);
    EXPECT_EQ(priced("/pooling", R"({"input":[[1,2,3]]})").input_tokens, 3u);
    EXPECT_EQ(priced("/classify", R"({"input":"x","max_tokens":99})").max_output_tokens, 0u);
}

TEST(RequestBody, RerankAndScoreCountEveryText) {
    auto rerank = priced("/v1/rerank", R"({"query":"a b","documents":["c d","e f g"]})");
    EXPECT_EQ(rerank.input_tokens, 7u);
    EXPECT_EQ(rerank.max_output_tokens, 0u);
    auto score = priced("/score", R"({"text_1":"a","text_2":["b","c"]})");
    EXPECT_EQ(score.input_tokens, 3u);
}

TEST(RequestBody, ResponsesApiReadsInstructionsInputAndMaxOutputTokens) {
    auto s = priced("/v1/responses",
                    R"({"model":"m","instructions":"be brief","input":")" + k_words + R"(","max_output_tokens":4000})");
    EXPECT_EQ(s.endpoint, Endpoint::responses);
    EXPECT_EQ(s.input_tokens, 1002u);
    EXPECT_EQ(s.max_output_tokens, 4000u);
    auto items = priced("/v1/responses",
                        R"({"input":[{"role":"user","content":[{"type":"input_text","text":"hello there"}]}]})");
    EXPECT_GE(items.input_tokens, 2u);
    EXPECT_EQ(items.max_output_tokens, 256u);
    auto streamed = priced("/v1/responses", R"({"input":"x","stream":true})");
    EXPECT_TRUE(streamed.stream);
    EXPECT_FALSE(streamed.injects_stream_usage()) << "the Responses API reports usage unasked";
}

TEST(RequestBody, TgiNativeReadsParameters) {
    auto s = priced("/generate", R"({"inputs":")" + k_words + R"(","parameters":{"max_new_tokens":4000,"best_of":2}})");
    EXPECT_EQ(s.endpoint, Endpoint::tgi);
    EXPECT_EQ(s.input_tokens, 1000u);
    EXPECT_EQ(s.sequences, 2u);
    EXPECT_EQ(s.max_output_tokens, 8000u);
    auto stream = priced("/generate_stream", R"({"inputs":"x"})");
    EXPECT_TRUE(stream.stream) << "/generate_stream is a stream whatever the body says";
    EXPECT_EQ(stream.max_output_tokens, 256u);
    EXPECT_FALSE(stream.injects_stream_usage());
}

TEST(RequestBody, OtherPathsAreShapedByTheirKeys) {
    EXPECT_EQ(priced("/x", R"({"messages":[]})").endpoint, Endpoint::chat);
    EXPECT_EQ(priced("/x", R"({"prompt":"a"})").endpoint, Endpoint::completions);
    EXPECT_EQ(priced("/", R"({"inputs":"a"})").endpoint, Endpoint::tgi);
    auto unknown = priced("/x", R"({"max_tokens":4000,"whatever":[1,2]})");
    EXPECT_EQ(unknown.endpoint, Endpoint::unknown);
    EXPECT_EQ(unknown.max_output_tokens, 0u) << "an unknown shape is priced at the minimum";
    EXPECT_EQ(unknown.input_tokens, 0u);
}

TEST(RequestBody, AbsurdCountsSaturateInsteadOfOverflowing) {
    auto s = priced("/v1/completions", R"({"prompt":["a","b"],"max_tokens":18446744073709551615,"n":128})");
    EXPECT_EQ(s.max_output_tokens, UINT64_MAX);
    auto cost = request_cost(defaults(), 1.0, s.input_tokens, s.max_output_tokens, false);
    EXPECT_TRUE(std::isfinite(cost));
    EXPECT_GT(cost, 1e15) << "past every limit's capacity: refused as never";
}

TEST(RequestBody, BadSequenceCountsAndWrongTypesAre400s) {
    EXPECT_EQ(refusal("/v1/chat/completions", R"({"messages":[],"n":0})"), "'n' must be an integer from 1 to 128");
    EXPECT_EQ(refusal("/v1/chat/completions", R"({"messages":[],"n":-3})"), "'n' must be an integer from 1 to 128");
    EXPECT_EQ(refusal("/v1/chat/completions", R"({"messages":[],"n":1.5})"), "'n' must be an integer from 1 to 128");
    EXPECT_EQ(refusal("/v1/chat/completions", R"({"messages":[],"n":129})"), "'n' must be an integer from 1 to 128");
    EXPECT_EQ(refusal("/v1/chat/completions", R"({"messages":[],"n":"2"})"), "'n' must be an integer from 1 to 128");
    EXPECT_EQ(refusal("/v1/completions", R"({"prompt":"a","n":4,"best_of":2})"), "'best_of' must be at least 'n'");
    EXPECT_EQ(refusal("/v1/completions", R"({"prompt":"a","best_of":1e9})"),
              "'best_of' must be an integer from 1 to 128");
    EXPECT_EQ(refusal("/v1/completions", R"({"prompt":[{"a":1}]})"),
              "'prompt' must be a string, strings, token ids or arrays of them");
    EXPECT_EQ(refusal("/v1/completions", R"({"prompt":[[1,"x"]]})"),
              "'prompt' must be a string, strings, token ids or arrays of them");
    EXPECT_EQ(refusal("/v1/embeddings", R"({"input":{"text":"a"}})"),
              "'input' must be a string, strings, token ids or arrays of them");
    EXPECT_EQ(refusal("/v1/chat/completions", R"({"messages":[],"response_format":"json"})"),
              "'response_format' must be an object");
    EXPECT_EQ(refusal("/v1/responses", R"({"input":5})"), "'input' must be a string or an array of items");
    EXPECT_EQ(refusal("/v1/responses", R"({"instructions":[]})"), "'instructions' must be a string");
    EXPECT_EQ(refusal("/v1/responses", R"({"max_output_tokens":-1})"),
              "'max_output_tokens' must be a non-negative integer");
    EXPECT_EQ(refusal("/generate", R"({"inputs":["a"]})"), "'inputs' must be a string");
    EXPECT_EQ(refusal("/generate", R"({"inputs":"a","parameters":[]})"), "'parameters' must be an object");
    EXPECT_EQ(refusal("/generate", R"({"inputs":"a","parameters":{"max_new_tokens":"9"}})"),
              "'parameters.max_new_tokens' must be a non-negative integer");
    EXPECT_EQ(refusal("/generate", R"({"inputs":"a","parameters":{"best_of":0}})"),
              "'parameters.best_of' must be an integer from 1 to 128");
    EXPECT_EQ(refusal("/generate", R"({"inputs":"a","parameters":{"max_new_tokens":1,"max_new_tokens":4000}})"),
              "The request body holds the key at '/parameters/max_new_tokens' twice.");
    EXPECT_EQ(refusal("/v1/rerank", R"({"query":5})"), "'query' must be a string, an array or an object");
    EXPECT_EQ(refusal("/v1/chat/completions", R"({"messages":[],"n":1,"n":8})"),
              "The request body holds the key at '/n' twice.");
}

TEST(RequestBody, TheModelsOwnDefaultOutputAppliesWhenTheRequestNamesNone) {
    config::ModelCost model;
    model.max_output_tokens = 1024;
    auto named = priced("/v1/chat/completions", R"({"messages":[],"max_tokens":5,"n":2})");
    apply_model_default(named, &model);
    EXPECT_EQ(named.max_output_tokens, 10u);
    auto unnamed = priced("/v1/chat/completions", R"({"messages":[],"n":2})");
    apply_model_default(unnamed, &model);
    EXPECT_EQ(unnamed.max_output_tokens, 2048u);
    auto embeddings = priced("/v1/embeddings", R"({"input":"a"})");
    apply_model_default(embeddings, &model);
    EXPECT_EQ(embeddings.max_output_tokens, 0u) << "never for embeddings";
}

}  // namespace
}  // namespace tokengate::cost

namespace tokengate::cost {
namespace {

// SPEC §20: Anthropic's Messages API. Token counts by the heuristic here; the table against the
// reference tokenizer runs through the binary (tiktoken_reference_test.cpp).
TEST(MessagesBody, PathAndBodyNameTheEndpoint) {
    EXPECT_EQ(endpoint_for_path("/v1/messages"), Endpoint::messages);
    EXPECT_EQ(endpoint_for_path("/anthropic/v1/messages/"), Endpoint::messages);
    EXPECT_EQ(endpoint_for_path("/v1/messages/count_tokens"), Endpoint::count_tokens);
    EXPECT_EQ(endpoint_for_path("/v1/count_tokens"), Endpoint::unknown);
    EXPECT_EQ(priced("/x", R"({"anthropic_version":"bedrock-2023-05-31","messages":[]})").endpoint, Endpoint::messages);
    EXPECT_EQ(priced("/x", R"({"system":[{"type":"text","text":"a"}],"messages":[]})").endpoint, Endpoint::messages);
    EXPECT_EQ(priced("/x", R"({"system":"a","messages":[]})").endpoint, Endpoint::chat)
        << "a string system alone does not tell";
}

TEST(MessagesBody, SystemBlocksToolsAndMaxTokens) {
    auto text =
        priced("/v1/messages", R"({"max_tokens":300,"messages":[{"role":"user","content":")" + k_words + R"("}]})");
    auto chat = priced("/v1/chat/completions",
                       R"({"max_tokens":300,"messages":[{"role":"user","content":")" + k_words + R"("}]})");
    EXPECT_EQ(text.input_tokens, chat.input_tokens) << "a string content costs as chat's";
    EXPECT_EQ(text.max_output_tokens, 300u);
    EXPECT_EQ(text.output_field, OutputField::max_tokens);
    EXPECT_TRUE(text.output_named);
    EXPECT_TRUE(text.anthropic());
    auto with_system = priced("/v1/messages", R"({"max_tokens":300,"system":[{"type":"text","text":")" + k_words +
                                                  R"(","cache_control":{"type":"ephemeral"}}],)"
                                                  R"("messages":[{"role":"user","content":")" +
                                                  k_words + R"("}]})");
    EXPECT_EQ(with_system.input_tokens, text.input_tokens + 4 + estimate_tokens("system") + estimate_tokens(k_words))
        << "a message's overhead, the role 'system' and its text";
    auto tools = priced("/v1/messages", R"({"max_tokens":1,"messages":[],"tools":[{"name":"search",)"
                                        R"("description":")" +
                                            k_words + R"(","input_schema":{"type":"object"}}]})");
    EXPECT_GE(tools.input_tokens, estimate_tokens(k_words)) << "tool descriptions are prompt";
    auto unnamed = priced("/v1/messages", R"({"messages":[]})");
    EXPECT_FALSE(unnamed.output_named);
    EXPECT_EQ(unnamed.max_output_tokens, 256u) << "no max_tokens: the default, written upstream";
    auto streamed = priced("/v1/messages", R"({"max_tokens":5,"stream":true,"messages":[]})");
    EXPECT_TRUE(streamed.stream);
}

TEST(MessagesBody, EveryBlockTypeCountsWhatTheTemplateRenders) {
    auto cost_of = [](const std::string& blocks) {
        return priced("/v1/messages", R"({"max_tokens":1,"messages":[{"role":"user","content":)" + blocks + "}]}")
            .input_tokens;
    };
    auto empty = cost_of("[]");
    auto words = estimate_tokens(k_words);
    EXPECT_EQ(cost_of(R"([{"type":"text","text":")" + k_words + R"("}])"), empty + words);
    EXPECT_EQ(cost_of(R"([{"type":"thinking","thinking":")" + k_words + R"(","signature":"s"}])"), empty + 1 + words);
    EXPECT_EQ(cost_of(R"([{"type":"tool_result","tool_use_id":"t","content":")" + k_words + R"("}])"),
              empty + 1 + words);
    EXPECT_EQ(cost_of(R"([{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":")" + k_words +
                      R"("}]}])"),
              empty + 1 + words);
    EXPECT_GE(cost_of(R"([{"type":"tool_use","id":"t","name":"f","input":{"q":")" + k_words + R"("}}])"),
              empty + 1 + words);
    EXPECT_EQ(cost_of(R"([{"type":"document","source":{"type":"text","media_type":"text/plain","data":")" + k_words +
                      R"("}}])"),
              empty + 1 + words);
    EXPECT_EQ(cost_of(R"([{"type":"document","source":{"type":"base64","media_type":"application/pdf",)"
                      R"("data":")" +
                      std::string(40000, 'A') + R"("}}])"),
              empty + 1 + 1000)
        << "a PDF at the media default, its base64 never text";
    EXPECT_EQ(cost_of(R"([{"type":"image","source":{"type":"url","url":"https://x/y.png"}}])"), empty + 1 + 1000);
    // A 512 × 512 PNG header: its tiles, as the same image in a chat part, and a token more.
    auto png = std::string("iVBORw0KGgoAAAANSUhEUgAAAgAAAAIACAIAAAAAAAAA");
    auto image =
        cost_of(R"([{"type":"image","source":{"type":"base64","media_type":"image/png","data":")" + png + R"("}}])");
    auto chat = priced("/v1/chat/completions", R"({"messages":[{"role":"user","content":[{"type":"image_url",)"
                                               R"("image_url":{"url":"data:image/png;base64,)" +
                                                   png + R"("}}]}]})");
    EXPECT_EQ(image, chat.input_tokens + 1);
    EXPECT_EQ(image, empty + 1 + image_tokens({512, 512}, config::ImageScheme{}, false));
    EXPECT_GT(image, empty + 1 + 100);
    // What comes next (redacted thinking, search results): every string in it.
    EXPECT_GE(cost_of(R"([{"type":"redacted_thinking","data":")" + k_words + R"("}])"), empty + words);
}

TEST(MessagesBody, CountTokensGeneratesNothing) {
    auto s = priced("/v1/messages/count_tokens", R"({"messages":[{"role":"user","content":"hello"}]})");
    EXPECT_EQ(s.endpoint, Endpoint::count_tokens);
    EXPECT_EQ(s.sequences, 0u);
    EXPECT_EQ(s.max_output_tokens, 0u);
    EXPECT_GT(s.input_tokens, 0u);
}

TEST(MessagesBody, BadBlocksAre400s) {
    EXPECT_EQ(refusal("/v1/messages", R"({"system":5})"), "'system' must be a string or an array of text blocks");
    EXPECT_EQ(refusal("/v1/messages", R"({"messages":[{"role":"user","content":5}]})"),
              "content must be a string or an array of blocks");
    EXPECT_EQ(refusal("/v1/messages", R"({"messages":[{"role":"user","content":["x"]}]})"),
              "each content block must be an object");
    EXPECT_EQ(refusal("/v1/messages", R"({"messages":[{"role":"user","content":[{"text":"x"}]}]})"),
              "each content block needs its 'type'");
    EXPECT_EQ(refusal("/v1/messages", R"({"messages":[{"role":"user","content":[{"type":"image"}]}]})"),
              "'image' blocks need their 'source' object");
    EXPECT_EQ(refusal("/v1/messages", R"({"messages":[{"role":"user","content":[{"type":"image","source":)"
                                      R"({"type":"base64","data":"!!!!"}}]}]})"),
              "an image block holds bad base64");
    EXPECT_EQ(refusal("/v1/messages", R"({"max_tokens":-1,"messages":[]})"),
              "'max_tokens' must be a non-negative integer");
    EXPECT_EQ(refusal("/v1/messages", R"({"tools":{}})"), "'tools' must be an array");
    EXPECT_EQ(refusal("/v1/messages", R"({"messages":[{"role":"user","content":[{"type":"text","text":"a",)"
                                      R"("text":"b"}]}]})"),
              "The request body holds the key at '/messages/0/content/0/text' twice.");
}

}  // namespace
}  // namespace tokengate::cost
