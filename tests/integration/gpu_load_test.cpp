// SPEC §13 through the binaries: the mock upstream as a GPU (`--max-seqs`), whose vLLM-style
// /metrics show its batch and its queue.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <csignal>
#include <future>
#include <iostream>
#include <thread>

#include "harness.hpp"
#include "scripted_upstream.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

/// The value of an unlabelled series in a Prometheus text page (NaN if absent).
double series(const std::string& page, const std::string& name) {
    auto at = page.find("\n" + name + " ");
    if (at == std::string::npos) return std::nan("");
    return std::stod(page.substr(at + name.size() + 2));
}

TEST(GpuMock, AtMostMaxSeqsGenerateAndTheRestWaitInOrder) {
    TempDir dir;
    auto port = free_port();
    // 20 tokens/s and 10 tokens each: a request holds its place for about half a second.
    Process mock(
        {gateway_binary(), "mock-upstream", "--port", std::to_string(port), "--tokens-per-s", "20", "--max-seqs", "2"},
        dir.path() + "/mock.log");
    ASSERT_TRUE(wait_for_port(port));
    std::vector<std::thread> clients;
    std::vector<int> statuses(5);
    for (int i = 0; i < 5; ++i)
        clients.emplace_back([&, i] {
            statuses[i] = send_request(port, {"POST",
                                              "/v1/chat/completions",
                                              {{"x-mock-completion-tokens", "10"}},
                                              chat_body("m", "hi", 10, false)})
                              .status;
        });
    // Watch the batch fill: two running, three waiting, the KV cache full.
    std::string page;
    for (int i = 0; i < 100; ++i) {
        page = send_request(port, {"GET", "/metrics", {}, ""}).body;
        if (series(page, "vllm:num_requests_waiting") == 3) break;
        std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(series(page, "vllm:num_requests_running"), 2) << page;
    EXPECT_EQ(series(page, "vllm:num_requests_waiting"), 3) << page;
    EXPECT_EQ(series(page, "vllm:kv_cache_usage_perc"), 1.0) << page;
    double most_running = 0;
    for (int i = 0; i < 300; ++i) {
        page = send_request(port, {"GET", "/metrics", {}, ""}).body;
        most_running = std::max(most_running, series(page, "vllm:num_requests_running"));
        if (series(page, "mock_requests_total") == 5 && series(page, "vllm:num_requests_running") == 0) break;
        std::this_thread::sleep_for(10ms);
    }
    for (auto& c : clients) c.join();
    EXPECT_EQ(statuses, std::vector<int>(5, 200)) << "every waiting request is served in the end";
    EXPECT_LE(most_running, 2) << "a finishing request hands its place over: never more than N";
    EXPECT_EQ(series(page, "vllm:num_requests_waiting"), 0);
    EXPECT_EQ(series(page, "vllm:kv_cache_usage_perc"), 0);
}

/// A labelled series in a Prometheus text page, e.g. `tokengate_adaptive_rate{limit="gpu"}`.
double labelled(const std::string& page, const std::string& series_and_labels) {
    auto at = page.find("\n" + series_and_labels + " ");
    if (at == std::string::npos) return std::nan("");
    return std::stod(page.substr(at + series_and_labels.size() + 2));
}

std::string gateway_metrics(const GatewayUnderTest& gw) {
    return send_request(gw.admin_port(), {"GET", "/metrics", {}, ""}).body;
}

/// Someone else's work on a mock GPU, straight to it: `requests` of `tokens` each, at once.
/// Join the threads (the requests end when they are served, or when the mock dies).
std::vector<std::thread> fill_gpu(unsigned short mock_port, int requests, int tokens) {
    std::vector<std::thread> clients;
    for (int i = 0; i < requests; ++i)
        clients.emplace_back([=] {
            send_request(mock_port, {"POST",
                                     "/v1/chat/completions",
                                     {{"x-mock-completion-tokens", std::to_string(tokens)}},
                                     chat_body("m", "hi", tokens, false)});
        });
    return clients;
}

TEST(AdaptiveRate, AQueueLowersTheRateAndFailingScrapesPutItBack) {
    // The mock as a GPU of 2 sequences; the gateway reads its /metrics every 200 ms.
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "tenants:\n  - { id: acme, keys: [\"k1\"] }\n"
        "global_limits:\n"
        "  - { name: gpu, algorithm: token_bucket, capacity: 1000, rate: 100/s,\n"
        "      adaptive: { signal: queue, target: 1, min_rate: 5/s } }\n",
        "", 20, "    metrics: { interval: 200ms }\n", {}, {}, {"--max-seqs", "2"});
    std::vector<std::thread> flood;
    for (int i = 0; i < 8; ++i)  // 3 s each at 20 tokens/s: two generate, six wait
        flood.emplace_back([&] {
            gw.request({"POST",
                        "/v1/chat/completions",
                        {{"Authorization", "Bearer k1"}, {"x-mock-completion-tokens", "60"}},
                        chat_body("m", "hi", 60, false)});
        });
    std::string page;
    for (int i = 0; i < 100; ++i) {
        page = gateway_metrics(gw);
        if (labelled(page, "tokengate_adaptive_rate{limit=\"gpu\"}") < 50) break;
        std::this_thread::sleep_for(50ms);
    }
    EXPECT_EQ(labelled(page, "tokengate_upstream_metrics_up{upstream=\"mock\"}"), 1) << page;
    EXPECT_GE(labelled(page, "tokengate_upstream_queue{upstream=\"mock\"}"), 1) << page;
    EXPECT_EQ(labelled(page, "tokengate_upstream_running{upstream=\"mock\"}"), 2) << page;
    EXPECT_EQ(labelled(page, "tokengate_upstream_kv_cache_ratio{upstream=\"mock\"}"), 1) << page;
    double lowered = labelled(page, "tokengate_adaptive_rate{limit=\"gpu\"}");
    EXPECT_LT(lowered, 50) << "× 0.7 per interval while the queue is past its target: " << page;
    EXPECT_GE(lowered, 5) << "never under min_rate";
    EXPECT_TRUE(gw.log_contains("adaptive limit gpu: queue"));

    // The model server goes away: after 3 failed scrapes the configured rate is back.
    auto killed = std::chrono::steady_clock::now();
    gw.mock().stop(SIGKILL);
    double restored = 0;
    for (int i = 0; i < 200 && restored != 100; ++i) {
        std::this_thread::sleep_for(20ms);
        restored = labelled(gateway_metrics(gw), "tokengate_adaptive_rate{limit=\"gpu\"}");
    }
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed);
    EXPECT_EQ(restored, 100) << "never stuck low";
    std::cout << "configured rate back " << took.count() << " ms after the upstream died (interval 200 ms)\n";
    page = gateway_metrics(gw);
    EXPECT_EQ(labelled(page, "tokengate_upstream_metrics_up{upstream=\"mock\"}"), 0) << page;
    EXPECT_TRUE(gw.log_contains("back to its configured"));
    for (auto& t : flood) t.join();
}

TEST(LeastLoaded, ABusyUpstreamIsPassedOverForAnIdleOne) {
    TempDir dir;
    auto idle_port = free_port();
    Process idle({gateway_binary(), "mock-upstream", "--port", std::to_string(idle_port), "--tokens-per-s", "0"},
                 dir.path() + "/idle.log");
    ASSERT_TRUE(wait_for_port(idle_port));
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock, idle], balance: least_loaded }\n"
        "tenants:\n  - { id: acme, keys: [\"k1\"] }\n",
        "", 10,
        "    metrics: { interval: 200ms }\n  - name: idle\n    url: http://127.0.0.1:" + std::to_string(idle_port) +
            "\n    metrics: { interval: 200ms }\n",
        {}, {}, {"--max-seqs", "1"});
    // Someone else fills the first GPU: one generating, five waiting.
    auto others = fill_gpu(gw.mock_port(), 6, 50);
    std::string page;
    for (int i = 0; i < 100; ++i) {
        page = gateway_metrics(gw);
        if (labelled(page, "tokengate_upstream_queue{upstream=\"mock\"}") >= 4 &&
            labelled(page, "tokengate_upstream_metrics_up{upstream=\"idle\"}") == 1)
            break;
        std::this_thread::sleep_for(50ms);
    }
    ASSERT_GE(labelled(page, "tokengate_upstream_queue{upstream=\"mock\"}"), 4) << page;
    for (int i = 0; i < 4; ++i)
        EXPECT_EQ(
            gw.request(
                  {"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 5, false)})
                .status,
            200);
    auto idle_page = send_request(idle_port, {"GET", "/metrics", {}, ""}).body;
    EXPECT_EQ(series(idle_page, "mock_requests_total"), 4) << "every request to the idle upstream";
    auto busy_page = send_request(gw.mock_port(), {"GET", "/metrics", {}, ""}).body;
    EXPECT_EQ(series(busy_page, "mock_requests_total"), 6) << "none more to the busy one";
    gw.mock().stop(SIGKILL);  // the others' requests end here
    for (auto& t : others) t.join();
}

TEST(LoadScrape, BadPagesAreCountedDownAndHoldNoRequest) {
    auto page = [](std::string body) {
        return "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
               "\r\nConnection: close\r\n\r\n" + body;
    };
    ScriptedUpstream huge([&](const std::string&, const std::string&) {
        return ScriptedUpstream::Reply(page(std::string(5u << 20, '#')));  // over the 4 MiB cap
    });
    ScriptedUpstream malformed([&](const std::string&, const std::string&) {
        return ScriptedUpstream::Reply(page("vllm:num_requests_waiting{ 7\n\x01\x02 garbage\n{}{}\n"));
    });
    ScriptedUpstream other_names([&](const std::string&, const std::string&) {
        return ScriptedUpstream::Reply(page("# TYPE my_queue gauge\nmy_queue 3\nrequests_waiting 9\n"));
    });
    ScriptedUpstream hangs([&](const std::string&, const std::string&) {
        return ScriptedUpstream::Reply("", page("vllm:num_requests_waiting 1\n"), 3000);  // long after the timeout
    });
    ScriptedUpstream missing([&](const std::string&, const std::string&) {
        return ScriptedUpstream::Reply("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    });
    const std::string scrape = "    metrics: { interval: 200ms, timeout: 200ms }\n";
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "tenants:\n  - { id: acme, keys: [\"k1\"] }\n",
        "", 1000,
        huge.yaml("huge") + scrape + malformed.yaml("malformed") + scrape + other_names.yaml("other-names") + scrape +
            hangs.yaml("hangs") + scrape + missing.yaml("missing") + scrape);
    std::string metrics;
    auto down = [&](const std::string& name) {
        return labelled(metrics, "tokengate_upstream_metrics_up{upstream=\"" + name + "\"}") == 0;
    };
    for (int i = 0; i < 100; ++i) {
        metrics = gateway_metrics(gw);
        if (down("huge") && down("malformed") && down("other-names") && down("hangs") && down("missing")) break;
        std::this_thread::sleep_for(50ms);
    }
    for (const char* name : {"huge", "malformed", "other-names", "hangs", "missing"}) EXPECT_TRUE(down(name)) << name;
    // Requests do not wait for any scrape.
    auto started = std::chrono::steady_clock::now();
    EXPECT_EQ(
        gw.request({"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 5, false)})
            .status,
        200);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 5s);
    EXPECT_TRUE(gw.log_contains("upstream huge: cannot read its metrics: the page is over 4194304 bytes"));
    EXPECT_TRUE(gw.log_contains("upstream malformed: cannot read its metrics: no queue, running or KV-cache"));
    EXPECT_TRUE(gw.log_contains("upstream other-names: cannot read its metrics: no queue"));
    EXPECT_TRUE(gw.log_contains("upstream hangs: cannot read its metrics: read: "));
    EXPECT_TRUE(gw.log_contains("upstream missing: cannot read its metrics: HTTP 404"));
    // Each failing upstream is logged once, not once per interval.
    auto log = gw.log();
    std::size_t lines = 0;
    for (auto at = log.find("upstream missing: cannot"); at != std::string::npos;
         at = log.find("upstream missing: cannot", at + 1))
        ++lines;
    EXPECT_EQ(lines, 1u);
}

TEST(Overload, SheddableTiersAreRefusedWhileEveryUpstreamIsPastItCriticalOnesPass) {
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n  - { path: /v1/messages, upstreams: [mock] "
        "}\n"
        "tiers:\n  free: { priority: sheddable }\n  vip: { priority: critical }\n"
        "tenants:\n  - { id: crowd, tier: free, keys: [\"k-free\"] }\n  - { id: bank, tier: vip, keys: [\"k-vip\"] }\n"
        "overload: { queue: 2 }\n",
        "", 50, "    metrics: { interval: 200ms }\n", {}, {}, {"--max-seqs", "1"});
    auto chat = [&](const std::string& key) {
        return gw.request(
            {"POST", "/v1/chat/completions", {{"Authorization", "Bearer " + key}}, chat_body("m", "hi", 5, false)});
    };
    EXPECT_EQ(chat("k-free").status, 200) << "no overload yet";
    auto others = fill_gpu(gw.mock_port(), 6, 25);
    std::string page;
    for (int i = 0; i < 100; ++i) {
        page = gateway_metrics(gw);
        if (labelled(page, "tokengate_upstream_queue{upstream=\"mock\"}") >= 3) break;
        std::this_thread::sleep_for(20ms);
    }
    auto shed = chat("k-free");
    EXPECT_EQ(shed.status, 503) << shed.body;
    EXPECT_NE(shed.body.find("\"code\":\"server_overloaded\""), std::string::npos) << shed.body;
    EXPECT_NE(shed.body.find("\"type\":\"server_error\""), std::string::npos);
    EXPECT_EQ(shed.header("retry-after"), "1");
    // The Anthropic SDK reads overload as 529 overloaded_error (and retries it).
    auto messages = gw.request({"POST",
                                "/v1/messages",
                                {{"x-api-key", "k-free"}},
                                R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]})"});
    EXPECT_EQ(messages.status, 529) << messages.body;
    EXPECT_NE(messages.body.find(R"({"type":"error","error":{"type":"overloaded_error",)"), std::string::npos)
        << messages.body;
    EXPECT_EQ(messages.header("retry-after"), "1");
    EXPECT_EQ(chat("k-vip").status, 200) << "critical traffic is never shed";
    for (auto& t : others) t.join();
    // The queue gone (a scrape or two later), the free tier is served again.
    int status = 0;
    for (int i = 0; i < 50 && status != 200; ++i) {
        std::this_thread::sleep_for(100ms);
        status = chat("k-free").status;
    }
    EXPECT_EQ(status, 200);
}

TEST(AdaptiveRate, TwoReplicasOnRedisEachFollowTheirOwnGpuAndShareTheBucketExactly) {
    REQUIRE_REDIS();
    RedisServer redis;
    auto config =
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "tenants:\n  - { id: acme, keys: [\"k1\"] }\n"
        "global_limits:\n"
        "  - { name: gpu, algorithm: token_bucket, capacity: 10, rate: 0.1/s,\n"
        "      adaptive: { signal: queue, target: 1, min_rate: 0.01/s } }\n"
        "store:\n  backend: redis\n  redis: { url: \"" +
        redis.url() + "\", prefix: \"tga:\", timeout: 5s, on_error: fail_closed }\n";
    const std::string scrape = "    metrics: { interval: 200ms }\n";
    GatewayUnderTest a(config, "", 20, scrape, {}, {}, {"--max-seqs", "1"});
    GatewayUnderTest b(config, "", 20, scrape, {}, {}, {"--max-seqs", "1"});
    auto chat = [](const GatewayUnderTest& gw) {
        return gw
            .request({"POST",
                      "/v1/chat/completions",
                      {{"Authorization", "Bearer k1"}, {"x-mock-completion-tokens", "1"}},
                      chat_body("m", "hi", 1, false)})
            .status;
    };
    // One bucket in Redis for both: 10 of 14 alternating requests pass, wherever they land.
    int passed = 0, refused = 0;
    for (int i = 0; i < 14; ++i) {
        auto status = chat(i % 2 ? a : b);
        passed += status == 200;
        refused += status == 429;
    }
    EXPECT_EQ(passed, 10);
    EXPECT_EQ(refused, 4);
    // Replica a's GPU fills up (someone else's work): a slows its rate, b, whose GPU is idle, does not.
    auto others = fill_gpu(a.mock_port(), 4, 30);
    double rate_a = 0.1;
    for (int i = 0; i < 100 && !(rate_a < 0.1); ++i) {
        std::this_thread::sleep_for(50ms);
        rate_a = labelled(gateway_metrics(a), "tokengate_adaptive_rate{limit=\"gpu\"}");
    }
    EXPECT_LT(rate_a, 0.1);
    EXPECT_EQ(labelled(gateway_metrics(b), "tokengate_adaptive_rate{limit=\"gpu\"}"), 0.1);
    for (auto& t : others) t.join();
}

/// One chat's answer and when it came, from `start`.
struct Timed {
    int status = 0;
    std::string body;
    std::chrono::steady_clock::duration at{};
};

/// Through one gateway, or several replicas sharing Redis (requests alternate between them):
/// a shaping queue full of sheddable requests, then critical ones. The critical ones go to the
/// front, each taking the newest sheddable request's place (that one gets a 429 then).
void critical_requests_jump_the_queue(std::vector<GatewayUnderTest*> replicas) {
    using steady = std::chrono::steady_clock;
    auto start = steady::now();
    std::size_t turn = 0;
    auto chat = [&](const std::string& key) {
        auto* gw = replicas[turn++ % replicas.size()];
        return std::async(std::launch::async, [gw, key, start] {
            auto r = gw->request(
                {"POST", "/v1/chat/completions", {{"Authorization", "Bearer " + key}}, chat_body("m", "hi", 1, false)});
            return Timed{r.status, r.body, steady::now() - start};
        });
    };
    ASSERT_EQ(chat("k-free").get().status, 200) << "the first starts at once; the next slot is 500 ms away";
    std::vector<std::future<Timed>> free;
    for (int i = 0; i < 4; ++i) {
        free.push_back(chat("k-free"));
        std::this_thread::sleep_for(40ms);  // in order
    }
    // Admitted is queued: the first one has started and the next is 500 ms away.
    double admitted = 0;
    for (int i = 0; i < 100 && admitted < 5; ++i) {
        admitted = 0;
        for (auto* gw : replicas) admitted += metric_total(gateway_metrics(*gw), "tokengate_admitted_total");
        if (admitted < 5) std::this_thread::sleep_for(10ms);
    }
    ASSERT_EQ(admitted, 5) << "four sheddable requests fill the queue";
    auto vip_sent = steady::now() - start;
    std::vector<std::future<Timed>> vip;
    for (int i = 0; i < 2; ++i) vip.push_back(chat("k-vip"));
    steady::duration vip_done{};
    for (auto& f : vip) {
        auto r = f.get();
        EXPECT_EQ(r.status, 200) << r.body;
        vip_done = std::max(vip_done, r.at);
    }
    std::vector<Timed> answers;
    for (auto& f : free) answers.push_back(f.get());
    for (std::size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(answers[i].status, 200) << "the oldest sheddable ones keep their places: " << answers[i].body;
        if (answers[i].status == 200 && answers[i].at > vip_sent + 100ms) {
            EXPECT_GT(answers[i].at, vip_done) << "served after the critical ones that came later";
        }
    }
    for (std::size_t i = 2; i < 4; ++i) {
        ASSERT_EQ(answers[i].status, 429) << "the newest sheddable ones lost their places: " << answers[i].body;
        auto error = json::parse(answers[i].body)["error"];
        EXPECT_EQ(error["code"], "rate_limit_exceeded");
        EXPECT_NE(error["message"].get<std::string>().find("higher-priority"), std::string::npos) << error;
        // Told when their place went (a replica on Redis asks every 0.5 s), not at their old turn.
        EXPECT_LT(answers[i].at, vip_done + 700ms);
    }
    for (auto* gw : replicas) EXPECT_TRUE(gw->wait_settled(1)) << "every request settled, the displaced ones too";
}

const std::string k_priority_tenants =
    "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
    "tiers:\n  free: { priority: sheddable }\n  vip: { priority: critical }\n"
    "tenants:\n  - { id: crowd, tier: free, keys: [\"k-free\"] }\n  - { id: bank, tier: vip, keys: [\"k-vip\"] }\n"
    "global_limits:\n"
    "  - { name: gpu, algorithm: leaky_bucket, mode: shape, capacity: 4, rate: 2/s, max_wait: 30s }\n";

TEST(PriorityQueue, CriticalRequestsGoFirstAndTakeTheNewestSheddablePlaces) {
    GatewayUnderTest gw(k_priority_tenants);
    critical_requests_jump_the_queue({&gw});
}

TEST(PriorityQueue, TwoReplicasOnRedisShareOneRankedQueue) {
    REQUIRE_REDIS();
    RedisServer redis;
    auto config = k_priority_tenants + "store:\n  backend: redis\n  redis: { url: \"" + redis.url() +
                  "\", prefix: \"tgp:\", timeout: 5s, on_error: fail_closed }\n";
    GatewayUnderTest a(config);
    GatewayUnderTest b(config);
    critical_requests_jump_the_queue({&a, &b});
}

TEST(PriorityQueue, APlaceHeldByAReplicaThatDiedIsDroppedWithinSeconds) {
    REQUIRE_REDIS();
    RedisServer redis;
    auto config = k_priority_tenants + "store:\n  backend: redis\n  redis: { url: \"" + redis.url() +
                  "\", prefix: \"tgd:\", timeout: 5s, on_error: fail_closed }\n";
    GatewayUnderTest a(config);
    GatewayUnderTest b(config);
    auto chat = [](const GatewayUnderTest& gw, const std::string& key) {
        return gw.request(
            {"POST", "/v1/chat/completions", {{"Authorization", "Bearer " + key}}, chat_body("m", "hi", 1, false)});
    };
    ASSERT_EQ(chat(a, "k-free").status, 200);  // the next slot is 500 ms away
    RawClient waiter(a.port());
    waiter.send_all(raw_post("/v1/chat/completions", "k-vip", chat_body("m", "hi", 1, false)));
    for (int i = 0; i < 100 && metric_total(gateway_metrics(a), "tokengate_admitted_total") < 2; ++i)
        std::this_thread::sleep_for(10ms);
    ASSERT_EQ(metric_total(gateway_metrics(a), "tokengate_admitted_total"), 2) << "the critical one holds a place";
    a.gateway().stop(SIGKILL);
    auto start = std::chrono::steady_clock::now();
    auto r = chat(b, "k-free");
    auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(r.status, 200) << r.body;
    // Behind the dead replica's place until Redis drops it (nobody asked about it for 5 s), not
    // until this request's max_wait (30 s) ran out.
    EXPECT_GT(took, 2s);
    EXPECT_LT(took, 12s);
}

}  // namespace
}  // namespace tokengate::testing
