#include "tokengate/server/simulate.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <sstream>

#include "tokengate/config/loader.hpp"

namespace tokengate::server {
namespace {

std::shared_ptr<const config::GatewayConfig> seed_config(const std::string& mode) {
    // Seed 000: a leaky bucket of 5 draining at 2/s.
    return config::load_config_text(
        "upstreams: [ { name: up, url: \"http://127.0.0.1:8000\" } ]\n"
        "routes: [ { path: /v1/chat/completions, upstreams: [up] } ]\n"
        "tenants:\n  - id: seed\n    keys: "
        "[\"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"]\n"
        "    limits: [ { name: bucket, algorithm: leaky_bucket, mode: " +
            mode + ", capacity: 5, rate: 2/s } ]\n",
        "seed.yaml");
}

/// 20 requests 0.1 s apart, with the key whose digest the config holds ("test").
std::vector<TraceEntry> seed_trace() {
    std::stringstream lines;
    for (int i = 0; i < 20; ++i)
        lines << R"({"t": )" << i / 10.0 << R"(, "key": "test", "cost": 1})"
              << "\n";
    TraceStats reordered;
    return read_trace(lines, reordered);
}

TEST(Simulate, SeedZeroPoliceAdmitsTheBurstThenTheRate) {
    auto result = simulate(seed_config("police"), seed_trace());
    std::vector<double> admitted;
    for (const auto& d : result.decisions)
        if (d.status == 200) admitted.push_back(d.t);
    EXPECT_EQ(admitted, (std::vector<double>{0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 1.0, 1.5}));
    ASSERT_EQ(result.limits.size(), 1u);
    EXPECT_EQ(result.limits[0].limit, "tenant:bucket");
    EXPECT_EQ(result.limits[0].admitted, 8u);
    EXPECT_EQ(result.limits[0].rejected, 12u);
    EXPECT_EQ(result.limits[0].queued, 0u);
    // The report's series: every arrival, start and refusal in some bin; the water reaches 5.
    const auto& l = result.limits[0];
    EXPECT_TRUE(l.water);
    EXPECT_EQ(l.capacity, 5);
    EXPECT_EQ(std::accumulate(l.arrivals.begin(), l.arrivals.end(), 0u), 20u);
    EXPECT_EQ(std::accumulate(l.started.begin(), l.started.end(), 0u), 8u);
    EXPECT_EQ(std::accumulate(l.refused.begin(), l.refused.end(), 0u), 12u);
    double highest = 0;
    for (double v : l.level)
        if (!std::isnan(v)) highest = std::max(highest, v);
    EXPECT_NEAR(highest, 5, 1e-9);
}

TEST(Simulate, SeedZeroShapeReleasesExactlyTwoASecond) {
    auto result = simulate(seed_config("shape"), seed_trace());
    std::vector<double> starts;
    for (const auto& d : result.decisions)
        if (d.status == 200) starts.push_back(d.t + d.wait_s);
    ASSERT_GE(starts.size(), 6u);
    for (std::size_t i = 0; i < starts.size(); ++i) EXPECT_NEAR(starts[i], 0.5 * static_cast<double>(i), 1e-9) << i;
    EXPECT_EQ(result.limits[0].queued, starts.size() - 1) << "all but the first waited their turn";
    EXPECT_NEAR(result.limits[0].wait_p99_s, 2.5, 1e-9) << "max_wait defaults to capacity / rate";
    // The chart spans the queue's drain after the last arrival, and the queue empties.
    const auto& l = result.limits[0];
    EXPECT_GE(result.bin_s * static_cast<double>(l.level.size()), 1.9 + 2.5);
    EXPECT_EQ(std::accumulate(l.started.begin(), l.started.end(), 0u), starts.size());
    double last = -1;
    for (double v : l.level)
        if (!std::isnan(v)) last = v;
    EXPECT_EQ(last, 0) << "every queued request started";
}

TEST(Simulate, AQueueOfPriorityClassesGivesASheddablePlaceToACriticalRequest) {
    auto config = config::load_config_text(
        "upstreams: [ { name: up, url: \"http://127.0.0.1:8000\" } ]\n"
        "routes: [ { path: /v1/chat/completions, upstreams: [up] } ]\n"
        "tiers: { free: { priority: sheddable }, vip: { priority: critical } }\n"
        "tenants:\n"
        "  - { id: crowd, tier: free, keys: "
        "[\"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"] }\n"
        "  - { id: bank, tier: vip, keys: "
        "[\"sha256:f9505a739a8fb8e851942c3f973d4bbb2d4c4743a6b633090abf2f2be035d572\"] }\n"
        "global_limits: [ { name: gpu, algorithm: leaky_bucket, mode: shape, capacity: 2, rate: 1/s, "
        "max_wait: 10s } ]\n",
        "priority.yaml");
    // Three from the crowd (one starts, two wait: the queue is full), then one from the bank.
    std::stringstream lines(R"({"t": 0, "key": "test", "cost": 1})"
                            "\n"
                            R"({"t": 0.1, "key": "test", "cost": 1})"
                            "\n"
                            R"({"t": 0.2, "key": "test", "cost": 1})"
                            "\n"
                            R"({"t": 0.3, "key": "vip", "cost": 1})"
                            "\n");
    TraceStats stats;
    auto result = simulate(config, read_trace(lines, stats));
    ASSERT_EQ(result.decisions.size(), 4u);
    EXPECT_EQ(result.decisions[0].status, 200);
    EXPECT_EQ(result.decisions[1].status, 200) << "the oldest waiting one keeps its place";
    EXPECT_EQ(result.decisions[2].status, 429) << "the newest sheddable one lost its place";
    EXPECT_EQ(result.decisions[3].status, 200);
    EXPECT_NEAR(result.decisions[3].t + result.decisions[3].wait_s, 1.0, 1e-9) << "first in line";
    EXPECT_NEAR(result.decisions[1].t + result.decisions[1].wait_s, 2.0, 1e-9) << "behind the critical one";
    ASSERT_EQ(result.limits.size(), 1u);
    EXPECT_EQ(result.limits[0].rejected, 1u);
    double last = -1;
    for (double v : result.limits[0].level)
        if (!std::isnan(v)) last = v;
    EXPECT_EQ(last, 0) << "the displaced one left the queue's count";
}

TEST(Simulate, TheStagesAfterAdmissionAreTheGatewaysOwn) {
    // Shed (SPEC §13) from the trace's load; cap_output (§12) re-prices a body the budget cannot
    // hold whole, and its answer generates no more than the bound written upstream.
    auto config = config::load_config_text(
        "upstreams: [ { name: up, url: \"http://127.0.0.1:8000\", metrics: { interval: 1s } } ]\n"
        "routes: [ { path: /v1/chat/completions, upstreams: [up] } ]\n"
        "cost: { input: { per: 1, min: 1 }, output: { per: 1, min: 1 }, stream_surcharge: 0, cap_output: true, "
        "min_output: 10 }\n"
        "tiers: { free: { priority: sheddable }, vip: { priority: critical } }\n"
        "tenants:\n"
        "  - { id: crowd, tier: free, keys: "
        "[\"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"], limits: [ { name: tokens, "
        "algorithm: token_bucket, capacity: 100, rate: 0.001/s, unit: cost } ] }\n"
        "  - { id: bank, tier: vip, keys: "
        "[\"sha256:f9505a739a8fb8e851942c3f973d4bbb2d4c4743a6b633090abf2f2be035d572\"] }\n"
        "overload: { queue: 4 }\n",
        "stages.yaml");
    const std::string body = R"("body": {"model": "m", "messages": [{"role": "user", "content": "hi"}], )";
    std::stringstream lines(R"({"t": 0, "key": "test", "cost": 1, "load": {"queue": 9}})"
                            "\n"
                            R"({"t": 0.1, "key": "vip", "cost": 1, "load": {"queue": 9}})"
                            "\n"
                            R"({"t": 0.2, "key": "test", "cost": 1, "load": {"queue": 3}})"
                            "\n"
                            R"({"t": 0.3, "key": "test", "cost": 1})"
                            "\n"
                            R"({"t": 1, "key": "test", )" +
                            body +
                            R"("max_tokens": 500}, "usage": {"prompt_tokens": 9, "completion_tokens": 400}})"
                            "\n"
                            R"({"t": 2, "key": "test", )" +
                            body +
                            R"("max_tokens": 500}, "usage": {"prompt_tokens": 9, "completion_tokens": 400}})"
                            "\n");
    TraceStats stats;
    auto result = simulate(config, read_trace(lines, stats));
    ASSERT_EQ(result.decisions.size(), 6u);
    EXPECT_EQ(result.decisions[0].status, 503) << "sheddable, and the upstream's queue is past 4";
    EXPECT_EQ(result.decisions[1].status, 200) << "critical traffic is never shed";
    EXPECT_EQ(result.decisions[2].status, 200) << "a queue of 3 is not past 4";
    EXPECT_EQ(result.decisions[3].status, 200) << "no load known: nobody is shed on a guess";
    EXPECT_EQ(result.decisions[4].status, 200);
    // 98 of the bucket's 100 left; the input is 9 or 10 tokens: about 88 output tokens fit.
    EXPECT_GT(result.decisions[4].output_bound, 80u);
    EXPECT_LT(result.decisions[4].output_bound, 90u);
    EXPECT_EQ(result.decisions[4].completion_tokens, result.decisions[4].output_bound)
        << "the upstream stops at the bound written to it";
    EXPECT_EQ(result.decisions[5].status, 429) << "nothing left for even min_output";
}

TEST(Simulate, AStreamClaimingAnyOutputIsReplayedInBoundedWork) {
    // stop_at_budget with a learned reservation of 1: a line claiming 10^14 output tokens, paid
    // block by block (one token a block) from a bucket that holds them, would take 10^14
    // charges; it takes at most 10,000 and is paid for whole.
    auto config = config::load_config_text(
        "upstreams: [ { name: up, url: \"http://127.0.0.1:8000\" } ]\n"
        "routes: [ { path: /v1/chat/completions, upstreams: [up] } ]\n"
        "cost: { input: { per: 1, min: 1 }, output: { per: 1, min: 1 }, stream_surcharge: 0, output_estimate: "
        "learned, learned: { min_samples: 1, window: 10 }, stop_at_budget: true, stream_charge_every: 1 }\n"
        "tenants:\n  - { id: seed, keys: "
        "[\"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"], limits: [ { name: tokens, "
        "algorithm: token_bucket, capacity: 1000000000000000, rate: 1000000000/s, unit: cost } ] }\n",
        "endless.yaml");
    std::stringstream lines(
        R"({"t": 0, "key": "test", "body": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}, )"
        R"("usage": {"prompt_tokens": 9, "completion_tokens": 1}})"
        "\n"
        R"({"t": 1, "key": "test", "body": {"messages": [{"role": "user", "content": "hi"}], "stream": true, )"
        R"("max_tokens": 100000000000000}, "usage": {"prompt_tokens": 9, "completion_tokens": 100000000000000}, )"
        R"("duration_s": 60})"
        "\n");
    TraceStats stats;
    auto result = simulate(config, read_trace(lines, stats));
    ASSERT_EQ(result.decisions.size(), 2u);
    EXPECT_EQ(result.decisions[1].status, 200);
    EXPECT_FALSE(result.decisions[1].stopped);
    EXPECT_EQ(result.decisions[1].completion_tokens, 100'000'000'000'000u);
}

TEST(Simulate, UnknownKeysAreCountedAs401) {
    std::stringstream lines(
        R"({"t": 0, "key": "nobody", "cost": 1})"
        "\n"
        R"({"t": 0.5, "key": "test", "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}})"
        "\n");
    TraceStats reordered;
    auto result = simulate(seed_config("police"), read_trace(lines, reordered));
    ASSERT_EQ(result.decisions.size(), 2u);
    EXPECT_EQ(result.decisions[0].status, 401);
    EXPECT_EQ(result.unauthorized, 1u);
    EXPECT_EQ(result.decisions[1].status, 200) << "a body is priced as the gateway prices it";
    EXPECT_EQ(result.decisions[1].tenant, "seed");
}

TEST(Simulate, ATraceOutOfOrderIsSortedAndABadLineIsNamed) {
    std::stringstream lines(R"({"t": 2, "key": "a", "cost": 1})"
                            "\n\n"
                            R"({"t": 1, "key": "b", "cost": 1})"
                            "\n");
    TraceStats reordered;
    auto trace = read_trace(lines, reordered);
    EXPECT_EQ(reordered.reordered, 1u);
    ASSERT_EQ(trace.size(), 2u);
    EXPECT_EQ(trace[0].key, "b");
    EXPECT_EQ(trace[0].line, 3u);
    auto error = [](const std::string& text) {
        std::stringstream in(text);
        TraceStats n;
        try {
            read_trace(in, n);
            return std::string("accepted");
        } catch (const TraceError& e) {
            return std::string(e.what());
        }
    };
    EXPECT_EQ(error("{\"t\": 0, \"key\": \"a\", \"cost\": 1}\n{\"t\": 1, \"key\""), "line 2: not a JSON object");
    EXPECT_EQ(error("not json\n{\"t\": 0, \"key\": \"a\", \"cost\": 1}\n"), "line 1: not a JSON object")
        << "skipped only in an access log";
    EXPECT_EQ(error(R"({"t": -1, "key": "a", "cost": 1})"), "line 1: 't' must be a number from 0 to 315360000");
    EXPECT_EQ(error(R"({"t": 1e400, "key": "a", "cost": 1})"), "line 1: not a JSON object");
    EXPECT_EQ(error(R"({"t": 1, "key": "a"})"), "line 1: give either 'body' (the request) or 'cost'");
    EXPECT_EQ(error(R"({"t": 1, "key": "a", "cost": 1, "colour": "red"})"), "line 1: unknown field 'colour'");
    EXPECT_EQ(error(R"({"t": 1, "key": "a", "cost": 1, "usage": {"prompt_tokens": -3}})"),
              "line 1: usage.prompt_tokens must be a whole number");
}

TEST(Simulate, AnAccessLogIsATraceFromItsFirstRequest) {
    // Two of record.cpp's lines (one refused before pricing: no route) around a message line.
    std::stringstream lines(
        R"({"ts":1796172117.5,"request_id":"b","client_ip":"10.0.0.2","method":"POST","path":"/v1/chat/completions",)"
        R"("tenant":"seed","key_id":"9f86d081884c","model":"m","route":"/v1/chat/completions","upstream":"up",)"
        R"("status":429,"rejected_by":"tenant:bucket","cost":3.0,"cost_reserved":0.0,"cost_settled":0.0,)"
        R"("prompt_tokens":0,"completion_tokens":0,"ttfb_ms":null,"duration_ms":100})"
        "\n[2026-12-02 00:41:55.827] [tokengate] [info] tokengate listening on 127.0.0.1:8080\n"
        R"({"ts":1796172117.25,"request_id":"a","client_ip":"10.0.0.1","method":"POST","path":"/v1/nope",)"
        R"("tenant":"seed","key_id":"9f86d081884c","model":"","route":"","upstream":"","status":404,"rejected_by":"","cost":0.0,)"
        R"("cost_reserved":0.0,"cost_settled":0.0,"prompt_tokens":0,"completion_tokens":0,"ttfb_ms":null,"duration_ms":0.1})"
        "\n");
    TraceStats stats;
    auto trace = read_trace(lines, stats);
    EXPECT_TRUE(stats.access_log);
    EXPECT_EQ(stats.skipped, 1u);
    EXPECT_EQ(stats.reordered, 0u) << "lines are written as requests end: sorted by arrival without a word";
    ASSERT_EQ(trace.size(), 2u);
    EXPECT_DOUBLE_EQ(trace[0].t, 0);
    EXPECT_NEAR(trace[1].t, 0.1501, 1e-6) << "each arrived duration_ms before its line was written";
    EXPECT_EQ(trace[0].refused_at_admission, 404);
    EXPECT_EQ(trace[1].refused_at_admission, 0);
    EXPECT_EQ(trace[1].key_id, "9f86d081884c");
    EXPECT_EQ(trace[1].client_ip, "10.0.0.2");
    EXPECT_EQ(trace[1].cost, 3.0) << "the price, though the request was refused";
    EXPECT_DOUBLE_EQ(trace[1].duration_s, 0.1);

    // Replayed: the key is found by its id; the line refused before pricing is replayed as it was.
    auto result = simulate(seed_config("police"), trace);
    ASSERT_EQ(result.decisions.size(), 2u);
    EXPECT_EQ(result.decisions[0].status, 404) << "the gateway found no route: nothing to decide";
    EXPECT_EQ(result.decisions[1].status, 200);
    EXPECT_EQ(result.decisions[1].tenant, "seed");
    EXPECT_EQ(result.invalid, 1u);

    std::stringstream mixed(R"({"ts":1,"request_id":"a","tenant":"seed","key_id":"","status":200,"cost":1})"
                            "\n"
                            R"({"t": 1, "key": "a", "cost": 1})"
                            "\n");
    EXPECT_THROW(
        {
            try {
                read_trace(mixed, stats);
            } catch (const TraceError& e) {
                EXPECT_STREQ(e.what(), "line 2: a trace line in an access log");
                throw;
            }
        },
        TraceError);
}

}  // namespace
}  // namespace tokengate::server

namespace tokengate::server {
namespace {

// SPEC §20 in the one pipeline: count_tokens is answered without a charge, and cached prompt
// tokens settle at cost.cached_input_factor, in simulate as in serve.
TEST(Simulate, CountTokensIsFreeAndCachedPromptsSettleAtTheirFactor) {
    auto config = [](const std::string& factor) {
        return config::load_config_text(
            "upstreams: [ { name: up, url: \"http://127.0.0.1:8000\" } ]\n"
            "routes: [ { path_prefix: /v1/messages, upstreams: [up] }, { path: /v1/chat/completions, upstreams: "
            "[up] } ]\n"
            "cost: { cached_input_factor: " +
                factor +
                " }\n"
                "tenants:\n  - id: seed\n    keys: "
                "[\"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"]\n"
                "    limits: [ { name: budget, algorithm: token_bucket, capacity: 40, rate: 0.001/s, unit: cost } ]\n",
            "cache.yaml");
    };
    std::string words;
    for (int i = 0; i < 1500; ++i) words += "word ";
    std::stringstream lines;
    // Five counts of a 1,500-token prompt: 15 units each, were they charged.
    for (int i = 0; i < 5; ++i)
        lines
            << R"({"t": )" << i / 10.0
            << R"(, "key": "test", "path": "/v1/messages/count_tokens", "body": {"messages": [{"role": "user", "content": ")"
            << words << R"("}]}})"
            << "\n";
    // Three chats of that prompt, each reserving about 20 units, answered from the prompt cache.
    for (int i = 0; i < 3; ++i)
        lines
            << R"({"t": )" << 1 + i
            << R"(, "key": "test", "path": "/v1/chat/completions", "duration_s": 0.1, "body": {"messages": [{"role": "user", "content": ")"
            << words << R"("}]}, "usage": {"prompt_tokens": 1500, "completion_tokens": 10, "cached_tokens": 1500}})"
            << "\n";
    TraceStats stats;
    auto trace = read_trace(lines, stats);
    auto statuses = [&](const std::string& factor) {
        std::vector<int> out;
        for (const auto& d : simulate(config(factor), trace).decisions) out.push_back(d.status);
        return out;
    };
    EXPECT_EQ(statuses("0"), (std::vector<int>{200, 200, 200, 200, 200, 200, 200, 200}))
        << "a cached prompt settles at the minimum";
    EXPECT_EQ(statuses("1"), (std::vector<int>{200, 200, 200, 200, 200, 200, 200, 429}))
        << "in full, two chats leave too little for a third";
}

}  // namespace
}  // namespace tokengate::server
