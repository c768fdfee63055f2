// SPEC §17 through the binary: a reservation binds the GPU. Each test replays an attack that
// worked against the gateway before §17 (the bytes in the issue), against the real binary,
// with the mock or a scripted upstream that lies, streams reasoning and tool calls, or speaks
// SGLang.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>

#include "harness.hpp"
#include "scripted_upstream.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const std::pair<std::string, std::string> k_auth = {"Authorization", "Bearer k1"};

/// One token a unit: cost = input + output tokens.
std::string config(const std::string& upstream, const std::string& cost, const std::string& limit) {
    return "routes:\n  - { path_prefix: /, upstreams: [" + upstream +
           "] }\n"
           "cost:\n  input: { per: 1, min: 1 }\n  output: { per: 1, min: 1 }\n  stream_surcharge: 0\n" +
           cost + "tiers:\n  t:\n    limits:\n      - " + limit +
           "\ntenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n";
}

Request post(const std::string& path, const std::string& body,
             std::vector<std::pair<std::string, std::string>> extra = {}) {
    extra.push_back(k_auth);
    extra.emplace_back("Content-Type", "application/json");
    return {"POST", path, extra, body};
}

double remaining(const GatewayUnderTest& gw, const std::string& name = "tokens") {
    auto doc = json::parse(gw.admin(Request{"GET", "/admin/tenants/acme", {}, ""}).body, nullptr, false);
    for (const auto& l : doc["limits"])
        if (l["name"] == name) return l["remaining"].get<double>();
    return 1e18;
}

json explain(const GatewayUnderTest& gw, const std::string& path, const json& body) {
    auto r =
        gw.admin(Request{"POST", "/admin/explain", {}, json{{"key", "k1"}, {"path", path}, {"body", body}}.dump()});
    return json::parse(r.body, nullptr, false);
}

/// An upstream that records each body and answers with `answer(body)`.
struct RecordingUpstream {
    std::mutex mutex;
    std::vector<std::string> bodies;
    std::function<ScriptedUpstream::Reply(const std::string&)> answer;
    ScriptedUpstream up{[this](const std::string&, const std::string& body) {
        {
            std::lock_guard lock(mutex);
            bodies.push_back(body);
        }
        return answer(body);
    }};
    std::string last() {
        std::lock_guard lock(mutex);
        return bodies.empty() ? std::string() : bodies.back();
    }
};

std::string sse_reply(const std::string& events) {
    return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + [&] {
        std::string chunked;
        char size[32];
        std::snprintf(size, sizeof size, "%zx\r\n", events.size());
        chunked += size + events + "\r\n0\r\n\r\n";
        return chunked;
    }();
}

std::string chat_answer(std::uint64_t prompt, std::uint64_t completion) {
    return http_ok(json{{"object", "chat.completion"},
                        {"choices", {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", "ok"}}}}}},
                        {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", completion}}}}
                       .dump(),
                   "application/json");
}

// §17 "The output bound goes upstream": each dialect's field, written only when the client
// named none, and shown by /admin/explain.
TEST(Binding, TheDeclaredOutputBoundIsWrittenUpstreamInEachDialectsField) {
    RecordingUpstream rec;
    rec.answer = [](const std::string&) { return ScriptedUpstream::Reply{chat_answer(1, 1)}; };
    GatewayUnderTest gw(
        config("scripted", "  default_max_tokens: 300\n",
               "{ name: tokens, algorithm: token_bucket, capacity: 100000, rate: 1000/s, unit: cost }") +
            "models:\n  big: { max_output_tokens: 77 }\n",
        "", 1000, rec.up.yaml());
    const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
        {"/v1/chat/completions", R"({"model":"m","messages":[{"role":"user","content":"hi"}]})", R"("max_tokens":300)"},
        {"/v1/chat/completions", R"({"model":"big","messages":[{"role":"user","content":"hi"}]})",
         R"("max_tokens":77)"},
        {"/v1/completions", R"({"model":"m","prompt":"hi"})", R"("max_tokens":300)"},
        {"/v1/responses", R"({"model":"m","input":"hi"})", R"("max_output_tokens":300)"},
        {"/generate", R"({"inputs":"hi"})", R"("parameters":{"max_new_tokens":300})"},
        {"/generate", R"({"inputs":"hi","parameters":{"temperature":0.5}})", R"("max_new_tokens":300)"},
        {"/generate", R"({"text":"hi","sampling_params":{"temperature":0}})", R"("max_new_tokens":300)"},
        {"/generate", R"({"text":"hi"})", R"("sampling_params":{"max_new_tokens":300})"},
        // null is "none named": the upstream would read the later key of two, so it is replaced.
        {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":null})",
         R"("max_tokens":300)"},
    };
    for (const auto& [path, body, written] : cases) {
        SCOPED_TRACE(path + " " + body);
        auto r = gw.request(post(path, body));
        ASSERT_EQ(r.status, 200) << r.body;
        auto sent = rec.last();
        EXPECT_NE(sent.find(written), std::string::npos) << sent;
        EXPECT_EQ(sent.find("null"), std::string::npos) << sent;
    }
    // A named field goes as the client wrote it.
    const std::string named = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":5})";
    ASSERT_EQ(gw.request(post("/v1/chat/completions", named)).status, 200);
    EXPECT_EQ(rec.last(), named);
    auto ex = explain(gw, "/v1/chat/completions", json::parse(R"({"model":"big","messages":[]})"));
    EXPECT_EQ(ex["output_bound"]["per_sequence"], 77) << ex.dump();
    EXPECT_EQ(ex["output_bound"]["field"], "max_tokens");
    EXPECT_EQ(ex["output_bound"]["written_by_gateway"], true);
}

// The issue's first scenario: 25 one-token answers taught the learned estimate "1 token"; then
// 8 parallel requests without max_tokens got 140,000 tokens against a 2,000 budget (70x).
TEST(Binding, LearnedReservationsWithoutMaxTokensAreBoundedAndStreamsShareTheBudget) {
    auto learned_gateway = [] {
        return std::make_unique<GatewayUnderTest>(
            config("mock",
                   "  default_max_tokens: 500\n  output_estimate: learned\n  stop_at_budget: true\n"
                   "  learned: { min_samples: 5, window: 25 }\n",
                   "{ name: tokens, algorithm: token_bucket, capacity: 2000, rate: 1/s, unit: cost }"),
            "", 0);
    };
    const std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
    auto teach = [&](GatewayUnderTest& gw) {
        for (int i = 0; i < 25; ++i)
            ASSERT_EQ(gw.request(post("/v1/chat/completions", body, {{"x-mock-completion-tokens", "1"}})).status, 200);
        ASSERT_TRUE(gw.wait_settled(25));
        auto ex = explain(gw, "/v1/chat/completions", json::parse(body));
        ASSERT_EQ(ex["output_estimate"]["source"], "learned") << ex.dump();
        ASSERT_EQ(ex["output_tokens"], 1);
        std::this_thread::sleep_for(1s);  // the 25 requests' cost (about 250) mostly back
    };
    auto eight = [&](GatewayUnderTest& gw, const std::string& request, auto&& tokens_of) {
        std::vector<std::future<Response>> parallel;
        for (int i = 0; i < 8; ++i)
            parallel.push_back(std::async(std::launch::async, [&] {
                return gw.request(post("/v1/chat/completions", request, {{"x-mock-completion-tokens", "17500"}}));
            }));
        std::pair<int, std::uint64_t> out{0, 0};  // admitted, delivered
        for (auto& f : parallel) {
            auto r = f.get();
            if (r.status != 200) continue;
            ++out.first;
            out.second += tokens_of(r.body);
        }
        EXPECT_TRUE(gw.wait_settled(25 + out.first));
        return out;
    };
    // Answers: each holds what its bound (written upstream) may still take past its learned
    // reservation of 1 token, so later ones are lowered to the room left, or refused.
    auto gw = learned_gateway();
    teach(*gw);
    auto [answers, answered] = eight(*gw, body, [](const std::string& b) {
        return json::parse(b)["usage"]["completion_tokens"].get<std::uint64_t>();
    });
    std::printf("learned + no max_tokens, 8 parallel answers: %d admitted, %llu tokens on a 2,000 budget\n", answers,
                static_cast<unsigned long long>(answered));
    EXPECT_LE(answered, 2000u + 30 + 500) << "budget + refill + one bound (140,000 before; 4,000 with bounds alone)";
    EXPECT_GE(answered, 1500u) << "the budget is used, not refused outright";
    // Streams with stop_at_budget charge one live budget as they go.
    auto streaming = learned_gateway();
    teach(*streaming);
    auto [streams, streamed] =
        eight(*streaming, R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})",
              [](const std::string& b) {
                  std::uint64_t n = 0;
                  const std::string word = "\"delta\":{\"content\":";
                  for (auto at = b.find(word); at != std::string::npos; at = b.find(word, at + 1)) ++n;
                  return n;
              });
    std::printf("learned + no max_tokens, 8 parallel streams: %d admitted, %llu tokens on a 2,000 budget\n", streams,
                static_cast<unsigned long long>(streamed));
    EXPECT_LE(streamed, 2000u + 30 + 8 * 64) << "budget + refill + a block a stream";
}

// §17 "Debt is paid back, not forgiven": a learned reservation of 1 token on a bucket of 200,
// and an answer of its whole bound of 1,000.
TEST(Binding, DebtPastTheCapacityIsKeptAndRetryAfterCountsIt) {
    GatewayUnderTest gw(config("mock",
                               "  default_max_tokens: 1000\n  output_estimate: learned\n"
                               "  learned: { min_samples: 5, window: 25 }\n",
                               "{ name: tokens, algorithm: token_bucket, capacity: 200, rate: 1/s, unit: cost }"),
                        "", 0);
    const std::string taught = R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]})";
    for (int i = 0; i < 5; ++i) ASSERT_EQ(gw.request(post("/v1/chat/completions", taught)).status, 200);
    ASSERT_TRUE(gw.wait_settled(5));
    const std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
    auto r = gw.request(post("/v1/chat/completions", body, {{"x-mock-completion-tokens", "17500"}}));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["usage"]["completion_tokens"], 1000) << "the bound went upstream";
    ASSERT_TRUE(gw.wait_settled(6));
    auto level = remaining(gw);
    std::printf("level after settlement: %.0f on a capacity of 200\n", level);
    EXPECT_LT(level, -700) << "debt is kept, not floored at -C";
    auto refused = gw.request(post("/v1/chat/completions", taught));
    EXPECT_EQ(refused.status, 429);
    EXPECT_GT(std::stod(refused.header("retry-after")), 700) << "Retry-After counts the debt";
}

/// An SSE stream of `tokens` one-word events in the given channel.
std::string reasoning_stream(const std::string& channel, int tokens) {
    std::string events;
    for (int i = 0; i < tokens; ++i) {
        json delta;
        if (channel == "tool_calls") delta["tool_calls"] = {{{"index", 0}, {"function", {{"arguments", "word "}}}}};
        else if (channel == "response.reasoning_text.delta" || channel == "response.function_call_arguments.delta") {
            events += "data: " + json{{"type", channel}, {"delta", "word "}}.dump() + "\n\n";
            continue;
        } else if (channel == "thinking_delta" || channel == "input_json_delta") {  // Anthropic's
            json block = {{"type", channel}, {channel == "thinking_delta" ? "thinking" : "partial_json", "word "}};
            events += "event: content_block_delta\ndata: " +
                      json{{"type", "content_block_delta"}, {"index", 0}, {"delta", block}}.dump() + "\n\n";
            continue;
        } else delta[channel] = "word ";
        events += "data: " +
                  json{{"object", "chat.completion.chunk"}, {"choices", {{{"index", 0}, {"delta", delta}}}}}.dump() +
                  "\n\n";
    }
    return events + "data: [DONE]\n\n";
}

// §17 "Every output channel counts": the same 20,000-token stream in reasoning or tool-call
// deltas ran to its end on a 2,000 budget.
TEST(Binding, EveryOutputChannelCountsAgainstTheBudget) {
    std::atomic<int> which{0};
    const std::vector<std::string> channels = {"reasoning_content",
                                               "reasoning",
                                               "tool_calls",
                                               "response.reasoning_text.delta",
                                               "response.function_call_arguments.delta",
                                               "thinking_delta",
                                               "input_json_delta"};
    // Made before any request: under a sanitizer, building 20,000 events took longer than the
    // upstream's first-byte timeout.
    std::vector<std::string> replies;
    for (const auto& channel : channels) replies.push_back(sse_reply(reasoning_stream(channel, 20000)));
    RecordingUpstream rec;
    rec.answer = [&](const std::string&) { return ScriptedUpstream::Reply{replies[which]}; };
    // A tenant a channel, each with a full bucket that refills too slowly to matter (1/s).
    std::string tenants = "tenants:\n";
    for (std::size_t i = 0; i < channels.size(); ++i)
        tenants += "  - { id: t" + std::to_string(i) + ", tier: t, keys: [\"k" + std::to_string(i) + "\"] }\n";
    GatewayUnderTest gw(
        "routes:\n  - { path_prefix: /, upstreams: [scripted] }\n"
        "cost:\n  input: { per: 1, min: 1 }\n  output: { per: 1, min: 1 }\n  stream_surcharge: 0\n"
        "  stop_at_budget: true\ntiers:\n  t:\n    limits:\n"
        "      - { name: tokens, algorithm: token_bucket, capacity: 2000, rate: 1/s, unit: cost }\n" +
            tenants,
        "", 1000, rec.up.yaml());
    for (std::size_t i = 0; i < channels.size(); ++i) {
        SCOPED_TRACE(channels[i]);
        which = static_cast<int>(i);
        auto r = gw.request({"POST",
                             "/v1/chat/completions",
                             {{"Authorization", "Bearer k" + std::to_string(i)}},
                             R"({"stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]})"});
        ASSERT_EQ(r.status, 200) << r.body;
        std::size_t relayed = 0;
        for (auto at = r.body.find("word "); at != std::string::npos; at = r.body.find("word ", at + 1)) ++relayed;
        std::printf("%s: %zu of 20,000 tokens relayed on a 2,000 budget\n", channels[i].c_str(), relayed);
        EXPECT_LE(relayed, 2000u + 64 + 2) << "20,000 before";
        EXPECT_GE(relayed, 1900u) << "it runs on to the budget: a read of many events is held, not cut";
        ASSERT_TRUE(gw.wait_settled(static_cast<double>(i + 1)));
    }
}

// §17: "Non-stream answers are counted the same way when they carry no usage" (before, such
// an answer kept its reservation, whatever it held).
TEST(Binding, AnAnswerWithoutUsageIsChargedForEveryChannelItCarries) {
    std::string thoughts;
    for (int i = 0; i < 3000; ++i) thoughts += "word ";
    RecordingUpstream rec;
    rec.answer = [&](const std::string&) {
        json message = {
            {"role", "assistant"},
            {"content", "ok"},
            {"reasoning_content", thoughts},
            {"tool_calls",
             {{{"id", "c"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", thoughts}}}}}}};
        return ScriptedUpstream::Reply{
            http_ok(json{{"object", "chat.completion"}, {"choices", {{{"index", 0}, {"message", message}}}}}.dump(),
                    "application/json")};
    };
    GatewayUnderTest gw(
        config("scripted", "",
               "{ name: tokens, algorithm: token_bucket, capacity: 1000000000, rate: 1000/s, unit: cost }"),
        "", 1000, rec.up.yaml());
    ASSERT_EQ(
        gw.request(post("/v1/chat/completions", R"({"max_tokens":10000,"messages":[{"role":"user","content":"hi"}]})"))
            .status,
        200);
    auto m = gw.metrics_after(1);
    const std::string series = R"(tokengate_tokens_total{tenant="acme",model="",kind="completion"} )";
    auto at = m.find(series);
    ASSERT_NE(at, std::string::npos) << m;
    auto completion = std::stod(m.substr(at + series.size(), m.find('\n', at) - at - series.size()));
    std::printf("an answer without usage: %.0f completion tokens counted (6,000 words of reasoning and arguments)\n",
                completion);
    EXPECT_GE(completion, 6000) << m;
    EXPECT_LE(completion, 6100) << m;
}

// §17 "Concurrent streams share one live budget": 8 parallel streams relayed 8,552 tokens
// against C = 2,000 when each had the budget it saw at admission.
TEST(Binding, ConcurrentStreamsShareOneLiveBudget) {
    RecordingUpstream rec;
    rec.answer = [](const std::string&) {
        // 50 tokens now (within the reservation: nothing charged yet), the rest a second later,
        // so every stream is admitted before any charges a block, however slow the machine.
        auto events = reasoning_stream("content", 2000);
        std::size_t split = 0;
        for (int i = 0; i < 50; ++i) split = events.find("data:", split) + 1;
        split = events.find("data:", split);
        auto head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
        return ScriptedUpstream::Reply{head + events.substr(0, split), events.substr(split), 1000};
    };
    GatewayUnderTest gw(config("scripted", "  stop_at_budget: true\n",  // stream_charge_every: 64, the default
                               "{ name: tokens, algorithm: token_bucket, capacity: 2000, rate: 1/s, unit: cost }"),
                        "", 1000, rec.up.yaml());
    std::vector<std::future<Response>> streams;
    for (int i = 0; i < 8; ++i)
        streams.push_back(std::async(std::launch::async, [&] {
            return gw.request(post("/v1/chat/completions",
                                   R"({"stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]})"));
        }));
    std::size_t relayed = 0;
    for (auto& f : streams) {
        auto r = f.get();
        EXPECT_EQ(r.status, 200);
        for (auto at = r.body.find("word "); at != std::string::npos; at = r.body.find("word ", at + 1)) ++relayed;
    }
    std::printf("8 concurrent streams: %zu tokens relayed against C = 2,000\n", relayed);
    EXPECT_LE(relayed, 2000u + 8 * 64) << "8,552 before";
    EXPECT_GE(relayed, 8u * 100) << "each relays at least what it reserved";
}

// §17 "Every input is priced": fields that reserved almost nothing before.
TEST(Binding, EveryInputFieldIsPriced) {
    GatewayUnderTest gw(
        config("mock", "",
               "{ name: tokens, algorithm: token_bucket, capacity: 1000000000, rate: 1000/s, unit: cost }") +
            "models:\n  emb: { embeds_bytes_per_token: 8 }\n",
        "", 0);
    std::string text(45'000, 'x');
    for (std::size_t i = 5; i < text.size(); i += 6) text[i] = ' ';
    auto input_of = [&](const std::string& path, const json& body) {
        auto ex = explain(gw, path, body);
        return ex["input_tokens"].is_number() ? ex["input_tokens"].get<std::uint64_t>() : 0;
    };
    auto in_content = input_of("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", text}}}}});
    EXPECT_GT(in_content, 7000u);
    const std::uint64_t text_alone = in_content - 10;  // without a chat message's framing
    EXPECT_GE(input_of("/v1/chat/completions", {{"messages", {{{"role", text}, {"content", "hi"}}}}}), in_content)
        << "45 KB in role reserved 9 before";
    EXPECT_GE(input_of("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"name", text}, {"content", "hi"}}}}}),
              in_content);
    EXPECT_GE(input_of("/v1/chat/completions",
                       {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"documents", {{{"text", text}}}}}),
              in_content);
    EXPECT_GE(input_of("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                                {"chat_template_kwargs", {{"system_prompt", text}}}}),
              in_content);
    EXPECT_GE(input_of("/v1/embeddings", {{"messages", {{{"role", "user"}, {"content", text}}}}}), in_content);
    EXPECT_GE(input_of("/infill", {{"input_prefix", text}, {"input_suffix", "x"}}), text_alone);
    EXPECT_GE(input_of("/infill", {{"input_extra", {{{"filename", "a.py"}, {"text", text}}}}}), text_alone);
    EXPECT_GE(input_of("/generate", {{"text", text}, {"sampling_params", {{"max_new_tokens", 1}}}}), text_alone);
    auto sglang = explain(gw, "/generate", {{"text", {"a", "b"}}, {"sampling_params", {{"n", 2}}}});
    EXPECT_EQ(sglang["endpoint"], "sglang");
    EXPECT_EQ(sglang["sequences"], 4) << "two prompts, two samples each";
    // A text part is its text: the keys `type` and `text` are not tokens (3 too many before).
    EXPECT_EQ(input_of("/v1/chat/completions",
                       {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi"}}}}}}}}),
              input_of("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}));
    // prompt_embeds: refused unless the model prices them, then by their decoded size.
    std::string embeds(8000, 'A');
    auto refused = gw.request(post("/v1/completions", json{{"model", "m"}, {"prompt_embeds", embeds}}.dump()));
    EXPECT_EQ(refused.status, 400) << refused.body;
    EXPECT_NE(refused.body.find("prompt_embeds"), std::string::npos);
    EXPECT_GE(input_of("/v1/completions", {{"model", "emb"}, {"prompt_embeds", embeds}}), 6000u / 8);
}

// §17 "Duplicate keys are refused at every depth", through the data plane (explain's body is
// re-serialised, so only a raw request carries a duplicate).
TEST(Binding, DuplicateKeysAtAnyDepthAre400sNamingThePointer) {
    GatewayUnderTest gw(
        config("mock", "", "{ name: tokens, algorithm: token_bucket, capacity: 1000000000, rate: 1000/s, unit: cost }"),
        "", 0);
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"({"messages":[{"role":"user","content":[{"type":"input_audio","type":"text","text":"x"}]}]})",
         "/messages/0/content/0/type"},
        {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/gif;base64,R0lGODlhAQABAAAAACw=","url":"https://x/big.png"}}]}]})",
         "/messages/0/content/0/image_url/url"},
        {R"({"messages":[],"max_tokens":1,"max_t\u006fkens":4000})", "/max_tokens"},
    };
    for (const auto& [body, pointer] : cases) {
        auto r = gw.request(post("/v1/chat/completions", body));
        EXPECT_EQ(r.status, 400) << body;
        auto error = json::parse(r.body, nullptr, false)["error"];
        EXPECT_EQ(error["code"], "duplicate_key") << r.body;
        EXPECT_NE(error["message"].get<std::string>().find("'" + pointer + "'"), std::string::npos) << r.body;
    }
}

// SGLang's native /generate: priced as SGLang, settled from meta_info; and §17's clamp: a
// report of more than the request could have used is settled at the bound and counted.
TEST(Binding, SglangIsSettledFromMetaInfoAndImpossibleUsageIsClamped) {
    std::atomic<std::uint64_t> prompt{0}, completion{0};
    RecordingUpstream rec;
    rec.answer = [&](const std::string&) {
        return ScriptedUpstream::Reply{
            http_ok(json{{"text", "ok"},
                         {"meta_info", {{"prompt_tokens", prompt.load()}, {"completion_tokens", completion.load()}}}}
                        .dump(),
                    "application/json")};
    };
    GatewayUnderTest gw(
        config("scripted", "",
               "{ name: tokens, algorithm: token_bucket, capacity: 1000000000, rate: 1000/s, unit: cost }"),
        "", 1000, rec.up.yaml());
    const std::string body = R"({"text":")" + std::string(1000, 'a') + R"(","sampling_params":{"max_new_tokens":50}})";
    prompt = 300, completion = 40;
    ASSERT_EQ(gw.request(post("/generate", body)).status, 200);
    auto m = gw.metrics_after(1);
    EXPECT_NE(m.find(R"(tokengate_tokens_total{tenant="acme",model="",kind="prompt"} 300)"), std::string::npos) << m;
    EXPECT_NE(m.find(R"(tokengate_tokens_total{tenant="acme",model="",kind="completion"} 40)"), std::string::npos);
    // 100,000 prompt tokens from a 1 KB body, and 1.8e19 completion tokens on a bound of 50.
    prompt = 100000, completion = 18'000'000'000'000'000'000ull;
    ASSERT_EQ(gw.request(post("/generate", body)).status, 200);
    m = gw.metrics_after(2);
    EXPECT_NE(m.find(R"(tokengate_usage_clamped_total{upstream="scripted"} 1)"), std::string::npos) << m;
    EXPECT_NE(m.find(R"(tokengate_tokens_total{tenant="acme",model="",kind="completion"} 90)"), std::string::npos)
        << "40 + the bound of 50";
    EXPECT_TRUE(gw.log_contains("reported usage past what the request could have used"));
}

// §17 "Nothing a client or upstream sends can make state unloadable".
TEST(Binding, ForgedUsageAndTopUpsNeverMakeTheStateFileUnloadable) {
    RecordingUpstream rec;
    rec.answer = [](const std::string&) {
        return ScriptedUpstream::Reply{chat_answer(1, 18'000'000'000'000'000'000ull)};
    };
    GatewayUnderTest gw(
        config("scripted", "",
               "{ name: tokens, algorithm: token_bucket, capacity: 1000, rate: 1/s, unit: cost }\n"
               "      - { name: monthly, algorithm: quota, limit: 1000000000000000, period: month, unit: cost }") +
            "store:\n  state_file: state.bin\n",
        "", 1000, rec.up.yaml());
    auto r = gw.request(post("/v1/chat/completions",
                             R"({"max_tokens":4000000000000000000,"messages":[{"role":"user","content":"hi"}]})"));
    ASSERT_TRUE(r.status == 200 || r.status == 429) << r.body;
    ASSERT_TRUE(gw.request(post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}]})")).status);
    int accepted = 0, refused = 0;
    for (int i = 0; i < 1001; ++i) {
        auto t = gw.admin(Request{"POST", "/admin/tenants/acme/quotas/monthly", {}, R"({"add":1e15})"});
        (t.status == 200 ? accepted : refused) += 1;
        if (t.status == 400) break;
    }
    EXPECT_EQ(refused, 1) << "a top-up past 1e18 is a 400";
    EXPECT_GE(accepted, 999);
    EXPECT_TRUE(gw.log_contains("reported usage past what the request could have used"));
    // A planted link where the temporary file goes is not followed.
    ::symlink((gw.dir() + "/victim").c_str(), (gw.dir() + "/state.bin.tmp").c_str());
    int code = 0;
    ASSERT_TRUE(gw.restart(SIGTERM, {}, &code)) << gw.log();
    struct stat st {};
    EXPECT_NE(::stat((gw.dir() + "/victim").c_str(), &st), 0) << "the link's target was never created";
    auto doc = json::parse(gw.admin(Request{"GET", "/admin/tenants/acme", {}, ""}).body, nullptr, false);
    EXPECT_DOUBLE_EQ(doc["quotas"][0]["added"].get<double>(), 1e18) << "the top-ups survived the restart";
}

// §17's HTTP leftovers.
TEST(Binding, TrailersAreDroppedAndAHostWithTwoValuesIsRefused) {
    RecordingUpstream rec;
    rec.answer = [](const std::string&) { return ScriptedUpstream::Reply{chat_answer(1, 1)}; };
    GatewayUnderTest gw(
        config("scripted", "",
               "{ name: tokens, algorithm: token_bucket, capacity: 1000000000, rate: 1000/s, unit: cost }"),
        "", 1000, rec.up.yaml());
    const std::string body = R"({"messages":[]})";
    char size[16];
    std::snprintf(size, sizeof size, "%zx", body.size());
    RawClient c(gw.port());
    ASSERT_TRUE(
        c.send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k1\r\n"
                   "X-Trace: head\r\nTransfer-Encoding: chunked\r\n\r\n" +
                   std::string(size) + "\r\n" + body + "\r\n0\r\nX-Trace: trailer\r\nX-Smuggled: yes\r\n\r\n"));
    auto answer = c.read_some(5s, "\r\n\r\n");
    EXPECT_NE(answer.find("200 OK"), std::string::npos) << answer;
    auto heads = rec.up.heads();
    ASSERT_EQ(heads.size(), 1u);
    EXPECT_EQ(heads[0].find("X-Smuggled"), std::string::npos) << heads[0];
    EXPECT_EQ(heads[0].find("trailer"), std::string::npos) << heads[0];
    EXPECT_NE(heads[0].find("head"), std::string::npos) << heads[0];
    RawClient two(gw.port());
    ASSERT_TRUE(
        two.send_all("POST /v1/chat/completions HTTP/1.1\r\nHost: a, b\r\nAuthorization: Bearer k1\r\n"
                     "Content-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body));
    auto refused = two.read_some(5s, "\r\n\r\n");
    EXPECT_NE(refused.find("400 Bad Request"), std::string::npos) << refused;
    EXPECT_EQ(rec.up.heads().size(), 1u) << "nothing more forwarded";
}

/// The gateway's CPU time so far (user + system), in seconds.
double cpu_seconds(int pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream fields(line.substr(line.rfind(')') + 2));
    std::string field;
    double ticks = 0;
    for (int i = 3; fields >> field; ++i)
        if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
    return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// §17 "Pricing never starves other tenants": a 4 MiB body is tokenized on the pricing pool, not
// on the event loop its connection shares with others; and a request the limits that need no
// price refuse is refused before any tokenizing.
TEST(Binding, ALargeBodyIsPricedOffTheEventLoopAndARefusedOneCostsNoTokenizerTime) {
    GatewayUnderTest gw(
        "routes:\n  - { path_prefix: /, upstreams: [mock] }\n"
        "models:\n  m: { tokenizer: " TOKENGATE_SOURCE_DIR
        "/tests/fuzz/tokenizer.json }\n"
        "tiers:\n  big:\n    limits:\n"
        "      - { name: tokens, algorithm: token_bucket, capacity: 1000000000, rate: 1000/s, unit: cost }\n"
        "  small:\n    limits:\n"
        "      - { name: tokens, algorithm: token_bucket, capacity: 2000, rate: 1/s, unit: cost }\n"
        "  once:\n    limits:\n"
        "      - { name: calls, algorithm: token_bucket, capacity: 1, rate: 1/h, unit: requests }\n"
        "tenants:\n  - { id: a, tier: big, keys: [\"ka\"] }\n  - { id: b, tier: big, keys: [\"kb\"] }\n"
        "  - { id: c, tier: once, keys: [\"kc\"] }\n  - { id: d, tier: small, keys: [\"kd\"] }\n",
        "  threads: 1\n  max_body_bytes: 8MiB\n", 0);
    std::string words;
    // Words that repeat seldom, as real text: the tokenizer's word cache does not hide the cost.
    std::uint64_t seed = 42;
    while (words.size() < (4u << 20)) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        for (auto x = seed >> 20, n = 3 + (seed >> 60) % 6; n > 0; --n, x /= 26)
            words += static_cast<char>('a' + x % 26);
        words += ' ';
    }
    auto big = json{{"model", "m"}, {"max_tokens", 1}, {"messages", {{{"role", "user"}, {"content", words}}}}}.dump();
    auto small = json{{"model", "m"}, {"max_tokens", 1}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}.dump();
    auto send = [&](const std::string& key, const std::string& body) {
        return send_request(gw.port(), {"POST", "/v1/chat/completions", {{"Authorization", "Bearer " + key}}, body},
                            60s);
    };
    // Tenant c's one request is spent: its next ones are answered by the gateway alone (429),
    // so their time is the event loop's, not the mock's (which is busy with the big body).
    ASSERT_EQ(send("kc", small).status, 200);
    // Alone: what c's refusal takes, and what pricing the big body costs.
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(send("kc", small).status, 429);
    auto alone = std::chrono::steady_clock::now() - t0;
    double cpu_before = cpu_seconds(gw.gateway().pid());
    t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(send("ka", big).status, 200);
    auto priced = std::chrono::steady_clock::now() - t0;
    double cpu_priced = cpu_seconds(gw.gateway().pid()) - cpu_before;
    // Together, on the gateway's one worker: c's request while the big one is priced.
    auto in_flight = std::async(std::launch::async, [&] { return send("ka", big); });
    std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::milliseconds>(priced) / 3);
    t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(send("kc", small).status, 429);
    auto beside = std::chrono::steady_clock::now() - t0;
    ASSERT_EQ(in_flight.get().status, 200);
    auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    std::printf(
        "4 MiB body priced in %.0f ms (%.0f ms of CPU); another tenant's small request: %.1f ms alone, "
        "%.1f ms beside it\n",
        ms(priced), cpu_priced * 1000, ms(alone), ms(beside));
    EXPECT_LT(ms(beside), ms(priced) / 4) << "it did not wait for the pricing";
    // A tenant whose request limit is spent: refused before tokenizing.
    cpu_before = cpu_seconds(gw.gateway().pid());
    for (int i = 0; i < 5; ++i) {
        auto r = send("kc", big);
        ASSERT_EQ(r.status, 429) << r.body;
    }
    double cpu_refused = (cpu_seconds(gw.gateway().pid()) - cpu_before) / 5;
    std::printf("a refused 4 MiB body: %.1f ms of CPU (an admitted one: %.0f ms)\n", cpu_refused * 1000,
                cpu_priced * 1000);
    EXPECT_LT(cpu_refused, cpu_priced / 5);
    // Counting stops past what the tightest cost limit could ever admit, and says so.
    cpu_before = cpu_seconds(gw.gateway().pid());
    auto too_big = send("kd", big);
    double cpu_too_big = cpu_seconds(gw.gateway().pid()) - cpu_before;
    EXPECT_EQ(too_big.status, 429) << too_big.body;
    EXPECT_NE(too_big.body.find("counting stopped there"), std::string::npos) << too_big.body;
    std::printf("a 4 MiB body past a 2,000-unit limit: %.1f ms of CPU\n", cpu_too_big * 1000);
    EXPECT_LT(cpu_too_big, cpu_priced / 5);
}

}  // namespace
}  // namespace tokengate::testing
