// SPEC §22 through the binary: prefix-cache affinity over real mock GPUs, the bound that
// passes a hot one over, consistent hashing across a reload, and retrying a refusal elsewhere.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <sstream>
#include <thread>

#include "harness.hpp"
#include "scripted_upstream.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

/// Extra mock GPUs beside the gateway's own "mock", as upstreams "gpu1", "gpu2", ...
class MoreMocks {
public:
    explicit MoreMocks(int n, const std::vector<std::string>& args = {}) {
        for (int i = 0; i < n; ++i) {
            auto port = free_port();
            std::vector<std::string> command = {gateway_binary(),     "mock-upstream",  "--port",
                                                std::to_string(port), "--tokens-per-s", "0"};
            command.insert(command.end(), args.begin(), args.end());
            processes_.emplace_back(command, dir_.path() + "/mock" + std::to_string(i) + ".log");
            EXPECT_TRUE(wait_for_port(port));
            ports_.push_back(port);
        }
    }
    /// Their upstream entries; `settings` ("    metrics: {...}\n") goes under each.
    std::string yaml(const std::string& settings = "") const {
        std::string out;
        for (std::size_t i = 0; i < ports_.size(); ++i)
            out += "  - name: gpu" + std::to_string(i + 1) +
                   "\n    url: http://127.0.0.1:" + std::to_string(ports_[i]) + "\n" + settings;
        return out;
    }
    unsigned short port(int i) const { return ports_[i]; }

private:
    TempDir dir_;
    std::vector<Process> processes_;
    std::vector<unsigned short> ports_;
};

std::string system_prompt(int n) {
    std::string s = "You are assistant number " + std::to_string(n) + ".";
    for (int i = 0; i < 80; ++i) s += " Rule " + std::to_string(i) + " of team " + std::to_string(n) + ".";
    return s;
}

json chat(int prefix, int user) {
    return {{"model", "m"},
            {"max_tokens", 4},
            {"messages",
             {{{"role", "system"}, {"content", system_prompt(prefix)}},
              {{"role", "user"}, {"content", "question " + std::to_string(user)}}}}};
}

Request post(const json& body, std::vector<std::pair<std::string, std::string>> headers = {}) {
    headers.push_back({"Authorization", "Bearer k1"});
    return {"POST", "/v1/chat/completions", std::move(headers), body.dump()};
}

/// The upstream each chat went to, by its request id.
std::map<std::string, std::string> upstreams_logged(const GatewayUnderTest& gw, std::size_t expected) {
    std::map<std::string, std::string> out;
    for (const auto& line : gw.access_lines("/v1/chat/completions", expected)) {
        auto j = json::parse(line);
        out[j.value("request_id", "")] = j.value("upstream", "");
    }
    return out;
}

std::string explain_upstream(const GatewayUnderTest& gw, const json& body, std::string* why = nullptr) {
    auto r = gw.admin({"POST", "/admin/explain", {}, json{{"key", "k1"}, {"body", body}}.dump()});
    auto doc = json::parse(r.body, nullptr, false);
    if (why) *why = doc.value("upstream_why", r.body);
    return doc.value("upstream", std::string("(none)"));
}

const std::string k_tenant = "tenants:\n  - { id: acme, keys: [\"k1\"] }\n";

TEST(PrefixAffinity, ThePrefixsRequestsMeetOnOneUpstream) {
    MoreMocks gpus(2);
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock, gpu1, gpu2], balance: "
        "prefix_affinity, affinity: { prefix_tokens: 64 } }\n" +
            k_tenant,
        "", 0, gpus.yaml());
    constexpr int k_prefixes = 16, k_users = 10;
    std::vector<std::vector<std::string>> ids(k_prefixes);
    for (int user = 0; user < k_users; ++user)
        for (int prefix = 0; prefix < k_prefixes; ++prefix) {
            auto r = gw.request(post(chat(prefix, user)));
            ASSERT_EQ(r.status, 200);
            ids[prefix].push_back(r.header("x-request-id"));
        }
    auto logged = upstreams_logged(gw, k_prefixes * k_users);
    ASSERT_EQ(logged.size(), static_cast<std::size_t>(k_prefixes * k_users));
    std::map<std::string, int> homes;
    for (int prefix = 0; prefix < k_prefixes; ++prefix) {
        std::map<std::string, int> where;
        for (const auto& id : ids[prefix]) ++where[logged[id]];
        int most = 0;
        std::string home;
        for (const auto& [name, n] : where)
            if (n > most) most = n, home = name;
        EXPECT_GE(most, 9) << "prefix " << prefix << ": at least 90% on one upstream";
        ++homes[home];
        // explain names the same upstream, and why.
        std::string why;
        EXPECT_EQ(explain_upstream(gw, chat(prefix, 99), &why), home);
        EXPECT_NE(why.find("prefix_affinity: '" + home + "' is the prefix's home"), std::string::npos) << why;
    }
    EXPECT_EQ(homes.size(), 3u) << "16 prefixes spread over the three upstreams";
}

TEST(PrefixAffinity, AHotUpstreamIsPassedOver) {
    MoreMocks gpus(3, {"--max-seqs", "1"});
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [gpu1, gpu2, gpu3], balance: "
        "prefix_affinity, affinity: { prefix_tokens: 64, max_load: 1.25 } }\n" +
            k_tenant,
        "", 0, gpus.yaml("    metrics: { interval: 200ms }\n"));
    auto home = explain_upstream(gw, chat(3, 0));
    ASSERT_EQ(home.substr(0, 3), "gpu");
    // Eight slow requests of one prefix at once: the home takes what its bound allows (in
    // flight within 1.25 × the average), the rest go on along the ring.
    std::vector<std::thread> clients;
    std::vector<int> statuses(8);
    for (int i = 0; i < 8; ++i) {
        clients.emplace_back([&, i] {
            statuses[i] = gw.request(post(chat(3, i), {{"x-mock-delay-ms", "300"}})).status;
        });
        std::this_thread::sleep_for(20ms);  // one after another, each seeing the ones before
    }
    for (auto& c : clients) c.join();
    for (int s : statuses) EXPECT_EQ(s, 200);
    auto logged = upstreams_logged(gw, 8);
    std::map<std::string, int> where;
    for (const auto& [id, u] : logged) ++where[u];
    EXPECT_GE(where[home], 2) << "the home took its bound's worth";
    EXPECT_LE(where[home], 4) << "and not all eight";
    EXPECT_EQ(where.size(), 3u) << "the rest went along the ring";
    // Its queue (another gateway's requests, say) counts too: three waiting at the home GPU.
    std::vector<std::thread> direct;
    for (int i = 0; i < 4; ++i)
        direct.emplace_back([&, i] {
            send_request(gpus.port(home[3] - '1'), post(chat(9, i), {{"x-mock-delay-ms", "1000"}}));
        });
    std::string why, while_hot;
    for (int i = 0; i < 60 && (while_hot == home || while_hot.empty()); ++i) {
        std::this_thread::sleep_for(50ms);
        while_hot = explain_upstream(gw, chat(3, 100), &why);
    }
    EXPECT_NE(while_hot, home) << why;
    EXPECT_NE(why.find("'" + home + "' (load "), std::string::npos) << why;
    EXPECT_NE(why.find("is over the bound"), std::string::npos) << why;
    auto r = gw.request(post(chat(3, 101)));
    EXPECT_EQ(r.status, 200);
    EXPECT_NE(upstreams_logged(gw, 9)[r.header("x-request-id")], home) << "a request goes where explain said";
    for (auto& d : direct) d.join();
    // Quiet again, the prefix goes home.
    for (int i = 0; i < 60 && while_hot != home; ++i) {
        std::this_thread::sleep_for(100ms);
        while_hot = explain_upstream(gw, chat(3, 200));
    }
    EXPECT_EQ(while_hot, home);
}

TEST(PrefixAffinity, AReplicaRemovedMovesOnlyItsOwnPrefixes) {
    MoreMocks gpus(3);
    auto config = [&](const std::string& upstreams) {
        return "routes:\n  - { path: /v1/chat/completions, upstreams: [" + upstreams +
               "], balance: prefix_affinity, affinity: { prefix_tokens: 64 } }\n" + k_tenant;
    };
    GatewayUnderTest gw(config("gpu1, gpu2, gpu3"), "", 0, gpus.yaml());
    constexpr int k_prefixes = 60;
    std::vector<std::string> before;
    for (int p = 0; p < k_prefixes; ++p) before.push_back(explain_upstream(gw, chat(p, 0)));
    gw.rewrite_config(config("gpu1, gpu2"));
    ASSERT_EQ(gw.admin({"POST", "/admin/reload", {}, ""}).status, 200);
    int moved = 0, gpu3 = 0;
    for (int p = 0; p < k_prefixes; ++p) {
        auto after = explain_upstream(gw, chat(p, 0));
        if (before[p] == "gpu3") ++gpu3;
        else if (after != before[p]) ++moved;
    }
    EXPECT_EQ(moved, 0) << "prefixes homed on the two that stay do not move";
    EXPECT_GT(gpu3, 5) << "gpu3 had its share to give up";
}

std::string refusal(int status) {
    std::string body = R"({"error":{"message":"busy","type":"server_error"}})";
    return "HTTP/1.1 " + std::to_string(status) +
           " Refused\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
           body;
}

TEST(Retry, ARefusalGoesToAnotherUpstreamOnceAndIsChargedOnce) {
    ScriptedUpstream busy([](const std::string&, const std::string&) { return ScriptedUpstream::Reply{refusal(503)}; });
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [busy, mock], "
        "retry: { on: [429, 503] } }\n" +
            k_tenant,
        "", 0, busy.yaml("busy"));
    constexpr int k_requests = 30;
    for (int i = 0; i < k_requests; ++i) {
        auto r = gw.request(post(chat(0, i)));
        ASSERT_EQ(r.status, 200) << "the client sees only the last answer: " << r.body;
        EXPECT_EQ(json::parse(r.body)["object"], "chat.completion");
    }
    ASSERT_TRUE(gw.wait_settled(k_requests));
    auto metrics = gw.metrics_after(k_requests);
    auto retries = metric_total(metrics, "tokengate_upstream_retries_total");
    EXPECT_GT(retries, 0) << "about half went to busy first";
    EXPECT_EQ(retries, static_cast<double>(busy.heads().size())) << "each refusal retried once";
    EXPECT_EQ(metric_total(metrics, "tokengate_settled_total"), k_requests) << "charged once each";
    auto logged = upstreams_logged(gw, k_requests);
    for (const auto& [id, u] : logged) EXPECT_EQ(u, "mock");
}

TEST(Retry, OnlyOnceAndNeverWithoutTheConfig) {
    ScriptedUpstream a([](const std::string&, const std::string&) { return ScriptedUpstream::Reply{refusal(429)}; });
    ScriptedUpstream b([](const std::string&, const std::string&) { return ScriptedUpstream::Reply{refusal(429)}; });
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [a, b], retry: { on: [429] } }\n"
        "  - { path: /v1/completions, upstreams: [a, mock] }\n" +
            k_tenant,
        "", 0, a.yaml("a") + b.yaml("b"));
    auto r = gw.request(post(chat(0, 0)));
    EXPECT_EQ(r.status, 429) << "both refused: the second refusal is the answer";
    EXPECT_EQ(a.heads().size() + b.heads().size(), 2u) << "tried once more, not again";
    // No retry configured: a refusal is the client's.
    int refused = 0;
    for (int i = 0; i < 20; ++i) {
        auto c = gw.request({"POST", "/v1/completions", {{"Authorization", "Bearer k1"}}, R"({"prompt":"hi"})"});
        refused += c.status == 429;
    }
    EXPECT_GT(refused, 0);
    EXPECT_EQ(metric_total(gw.metrics_after(21), "tokengate_upstream_retries_total"), 1);
}

TEST(Retry, NeverAfterTheFirstByteOfTheBody) {
    // An answer that starts and then stalls is the client's: nothing is sent twice, even when it
    // breaks with a status the route retries.
    ScriptedUpstream broken([](const std::string&, const std::string&) {
        return ScriptedUpstream::Reply{
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Transfer-Encoding: chunked\r\n\r\n10\r\ndata: {\"a\":1}\n\n\r\n"};
    });
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [broken, mock], "
        "retry: { on: [429, 502, 503] } }\n" +
            k_tenant,
        "", 0, broken.yaml("broken"));
    // Each request goes to one of the two at random: asked until three went to broken (40
    // requests all to mock is one chance in 2^40).
    int to_broken = 0, sent = 0;
    for (int i = 0; i < 40 && to_broken < 3; ++i, ++sent) {
        RawClient client(gw.port());
        auto body = chat(0, i);
        body["stream"] = true;
        client.send_all(raw_post("/v1/chat/completions", "k1", body.dump()));
        auto seen = client.read_some(6s, "data: {");  // the first event, from either upstream
        if (seen.find("data: {\"a\":1}") != std::string::npos) ++to_broken;
        client.close();  // the stalled one would end in its idle timeout; leaving ends it sooner
    }
    EXPECT_EQ(to_broken, 3);
    EXPECT_EQ(broken.heads().size(), static_cast<std::size_t>(to_broken)) << "each sent there once";
    EXPECT_EQ(metric_total(gw.metrics_after(sent), "tokengate_upstream_retries_total"), 0)
        << "a response relayed is never retried";
}

}  // namespace
}  // namespace tokengate::testing

namespace tokengate::testing {
namespace {

TEST(MockPrefixCache, ACachedPrefixSkipsItsPrefill) {
    MoreMocks gpu(
        1, {"--prefix-cache", "2", "--cached-ttft", "5", "--prefill-tokens-per-s", "1000", "--prefix-tokens", "64"});
    auto timed = [&](int prefix) {
        auto started = std::chrono::steady_clock::now();
        auto r = send_request(gpu.port(0), post(chat(prefix, 0)));
        EXPECT_EQ(r.status, 200) << r.body;
        return std::chrono::steady_clock::now() - started;
    };
    auto cold = timed(1);  // about 500 prompt tokens at 1,000 a second
    auto warm = timed(1);
    EXPECT_GE(cold, 300ms);
    EXPECT_LT(warm, cold / 2) << "the second meets its prefix in the cache";
    timed(2), timed(3);  // two more prefixes push prefix 1 out of a cache of 2
    EXPECT_GE(timed(1), 300ms) << "evicted, least recently used first";
    auto metrics = send_request(gpu.port(0), {"GET", "/metrics", {}, ""}).body;
    auto queries = metric_total(metrics, "vllm:prefix_cache_queries_total");
    auto hits = metric_total(metrics, "vllm:prefix_cache_hits_total");
    EXPECT_GT(queries, 5 * 400.0) << metrics;
    EXPECT_EQ(hits, 64) << "one hit, of its 64-token prefix";
}

}  // namespace
}  // namespace tokengate::testing
