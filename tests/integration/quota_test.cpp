// Calendar quotas through the binary (SPEC §14): insufficient_quota and its headers, the
// official OpenAI SDK not retrying it, the rollover at the zone's midnight under libfaketime,
// the admin view / top-up / reset, a restart keeping the day's usage, and two gateways on one
// Redis sharing a quota exactly.

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using steady = std::chrono::steady_clock;
namespace fs = std::filesystem;

const std::string k_routes = "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n";

/// acme: `quota` (one limit line) and nothing else; the rest of the config after it.
std::string config(const std::string& quota, const std::string& rest = "") {
    return k_routes + "tenants:\n  - id: acme\n    keys: [\"k1\"]\n    limits:\n      - " + quota + "\n" + rest;
}

Response chat(const GatewayUnderTest& gw, int max_tokens = 1, const std::string& extra_header = "") {
    Request r{
        "POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", max_tokens, false)};
    if (!extra_header.empty()) r.headers.emplace_back(extra_header, "24");
    return gw.request(r);
}

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout = 15s) {
    for (auto deadline = steady::now() + timeout; steady::now() < deadline; std::this_thread::sleep_for(50ms))
        if (done()) return true;
    return done();
}

json tenant_quota(const GatewayUnderTest& gw) {
    auto r = gw.admin(Request{"GET", "/admin/tenants/acme", {}, ""});
    auto body = json::parse(r.body, nullptr, false);
    if (body.is_discarded() || !body.contains("quotas") || body["quotas"].empty()) return json();
    return body["quotas"][0];
}

Response change(const GatewayUnderTest& gw, const std::string& name, const std::string& body) {
    return gw.admin(Request{"POST", "/admin/tenants/acme/quotas/" + name, {}, body});
}

long long unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

TEST(Quota, ExhaustedIsInsufficientQuotaWithTheResetHeaders) {
    GatewayUnderTest gw(config("{ name: daily, algorithm: quota, period: day, limit: 3 }"));
    for (int i = 0; i < 3; ++i) ASSERT_EQ(chat(gw).status, 200) << i;
    auto r = chat(gw);
    ASSERT_EQ(r.status, 429) << r.body;
    auto body = json::parse(r.body);
    EXPECT_EQ(body["error"]["code"], "insufficient_quota") << r.body;
    EXPECT_EQ(body["error"]["type"], "requests") << r.body;
    auto midnight = (unix_seconds() / 86400 + 1) * 86400;  // quotas.timezone defaults to UTC
    auto message = body["error"]["message"].get<std::string>();
    EXPECT_NE(message.find("tenant quota 'daily' (3 requests a day): used 3 of 3"), std::string::npos) << message;
    EXPECT_EQ(r.header("x-should-retry"), "false");
    EXPECT_EQ(std::stoll(r.header("x-ratelimit-reset")), midnight);
    auto retry = std::stoll(r.header("retry-after"));
    EXPECT_NEAR(static_cast<double>(retry), static_cast<double>(midnight - unix_seconds()), 5);
    EXPECT_NEAR(std::stod(r.header("retry-after-ms")) / 1000, static_cast<double>(retry), 1.5);
}

TEST(Quota, TheOpenAiSdkDoesNotRetryInsufficientQuotaButRetriesARateLimit) {
    auto shared = fs::path(TOKENGATE_BUILD_DIR) / "openai-sdk";
    fs::create_directories(shared);
    auto skip = npm_install_once(shared.string(), "openai@4.95.0", "openai/package.json");
    if (!skip.empty()) GTEST_SKIP() << skip;
    // acme has a quota of 1 request a day; bursty has a rate of 1 request an hour.
    GatewayUnderTest gw(k_routes +
                        "tenants:\n"
                        "  - id: acme\n    keys: [\"k1\"]\n    limits:\n"
                        "      - { name: daily, algorithm: quota, period: day, limit: 1 }\n"
                        "  - id: bursty\n    keys: [\"k2\"]\n    limits:\n"
                        "      - { name: hourly, algorithm: token_bucket, capacity: 1, rate: 1/h }\n");
    TempDir dir;
    auto script = dir.path() + "/sdk.js";
    // The SDK's defaults: two retries, honouring retry-after-ms (capped by a short timeout so
    // the rate-limit case does not wait an hour: it must still try again, which is the point).
    std::ofstream(script) << R"(const OpenAI = require('openai');
(async () => {
  const client = new OpenAI({ baseURL: process.argv[2], apiKey: process.argv[3], timeout: 20000 });
  const ask = () => client.chat.completions.create({ model: 'm', max_tokens: 1,
    messages: [{ role: 'user', content: 'hi' }] });
  await ask();
  try { await ask(); console.log(JSON.stringify({ second: 'passed' })); }
  catch (e) { console.log(JSON.stringify({ status: e.status, code: e.code || (e.error && e.error.code) })); }
})().catch((e) => { console.log(JSON.stringify({ error: String(e) })); process.exit(1); });
)";
    auto run = [&](const std::string& key) {
        auto out = capture("NODE_PATH=" + (shared / "node_modules").string() + " node " + script +
                           " http://127.0.0.1:" + std::to_string(gw.port()) + "/v1 " + key + " 2>&1");
        return json::parse(out, nullptr, false);
    };
    auto requests_of = [&](const std::string& tenant) {
        auto m = gw.admin(Request{"GET", "/metrics", {}, ""}).body;
        double n = 0;
        for (auto at = m.find("tokengate_requests_total{"); at != std::string::npos;
             at = m.find("tokengate_requests_total{", at + 1)) {
            auto line = m.substr(at, m.find('\n', at) - at);
            if (line.find("tenant=\"" + tenant + "\"") != std::string::npos)
                n += std::stod(line.substr(line.rfind(' ') + 1));
        }
        return n;
    };
    auto quota = run("k1");
    ASSERT_FALSE(quota.is_discarded());
    EXPECT_EQ(quota["status"], 429) << quota.dump();
    EXPECT_EQ(quota["code"], "insufficient_quota") << quota.dump();
    ASSERT_TRUE(wait_until([&] { return requests_of("acme") >= 2; }));
    std::this_thread::sleep_for(500ms);  // room for a retry that should not come
    EXPECT_EQ(requests_of("acme"), 2) << "one admitted, one refused: the SDK did not retry";

    // The control: a rate limit's 429 is retried (x-should-retry absent), twice.
    auto rate = run("k2");
    ASSERT_FALSE(rate.is_discarded());
    EXPECT_EQ(rate["code"], "rate_limit_exceeded") << rate.dump();
    EXPECT_TRUE(wait_until([&] { return requests_of("bursty") >= 4; }, 30s)) << requests_of("bursty");
}

TEST(Quota, RollsOverAtMidnightInItsTimeZoneUnderLibfaketime) {
    const std::string libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    if (::access(libfaketime.c_str(), R_OK) != 0) {
        if (std::getenv("TOKENGATE_REQUIRE_REDIS")) FAIL() << "libfaketime missing (apt-get install faketime)";
        GTEST_SKIP() << "libfaketime is not installed";
    }
    // 15:59:52 UTC is 23:59:52 in Shanghai: the gateway's day ends eight seconds after it starts.
    const char* asan = std::getenv("ASAN_OPTIONS");
    GatewayUnderTest gw(
        config("{ name: daily, algorithm: quota, period: day, limit: 2 }", "quotas: { timezone: Asia/Shanghai }\n"), "",
        1000, "",
        {"/usr/bin/env", "TZ=UTC", "LD_PRELOAD=" + libfaketime, "FAKETIME=@2026-12-31 15:59:52",
         "ASAN_OPTIONS=" + std::string(asan ? asan : "") + ":verify_asan_link_order=0"});
    ASSERT_EQ(chat(gw).status, 200);
    ASSERT_EQ(chat(gw).status, 200);
    auto refused = chat(gw);
    ASSERT_EQ(refused.status, 429) << refused.body;
    // 2027-01-01T00:00:00+08:00: the reset is Shanghai's midnight, not UTC's.
    EXPECT_EQ(refused.header("x-ratelimit-reset"), "1798732800");
    auto wait_ms = std::stoll(refused.header("retry-after-ms"));
    ASSERT_GT(wait_ms, 0);
    ASSERT_LE(wait_ms, 8000) << "the faked clock is near midnight";
    EXPECT_EQ(tenant_quota(gw)["resets_at"], "2026-12-31T16:00:00Z");
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms + 300));
    auto next_year = chat(gw);
    EXPECT_EQ(next_year.status, 200) << next_year.body;
    auto q = tenant_quota(gw);
    EXPECT_EQ(q["used"], 1) << q.dump();
    EXPECT_EQ(q["resets_at"], "2027-01-01T16:00:00Z") << q.dump();
}

TEST(Quota, AdminShowsTopsUpAndResets) {
    GatewayUnderTest gw(config("{ name: daily-tokens, algorithm: quota, period: day, limit: 500, unit: tokens }"));
    // The mock reports 4 prompt tokens ("hi" in a chat) and 24 completion tokens as asked.
    auto first = chat(gw, 100, "x-mock-completion-tokens");
    ASSERT_EQ(first.status, 200) << first.body;
    ASSERT_TRUE(gw.wait_settled(1));
    auto q = tenant_quota(gw);
    auto usage = json::parse(first.body)["usage"];
    EXPECT_EQ(q["used"], usage["prompt_tokens"].get<int>() + usage["completion_tokens"].get<int>()) << q.dump();
    EXPECT_EQ(q["limit"], 500);
    EXPECT_EQ(q["unit"], "tokens");
    EXPECT_EQ(q["period"], "day");
    EXPECT_EQ(q["timezone"], "UTC");
    auto used = q["used"].get<double>();
    // A request reserving more than is left (its max_tokens) is refused, whatever it would use.
    EXPECT_EQ(chat(gw, static_cast<int>(500 - used)).status, 429);
    auto topped = change(gw, "daily-tokens", R"({"add": 1000})");
    ASSERT_EQ(topped.status, 200) << topped.body;
    EXPECT_EQ(json::parse(topped.body)["quota"]["limit"], 1500);
    EXPECT_EQ(chat(gw, static_cast<int>(500 - used)).status, 200);
    ASSERT_TRUE(gw.wait_settled(2));
    auto reset = change(gw, "daily-tokens", R"({"reset": true})");
    ASSERT_EQ(reset.status, 200) << reset.body;
    EXPECT_EQ(json::parse(reset.body)["quota"]["used"], 0);
    EXPECT_EQ(json::parse(reset.body)["quota"]["limit"], 500) << "a reset also ends the top-up";
    auto metrics = gw.admin(Request{"GET", "/metrics", {}, ""}).body;
    EXPECT_NE(metrics.find("tokengate_quota_used{tenant=\"acme\",limit=\"daily-tokens\"} 0"), std::string::npos)
        << metrics;
    EXPECT_NE(metrics.find("tokengate_quota_limit{tenant=\"acme\",limit=\"daily-tokens\"} 500"), std::string::npos);
    // Bad requests are refused with a reason, and change nothing.
    for (const char* bad : {R"({"add": -5})", R"({"add": 1e300})", R"({"add": "5"})", R"({"reset": 1})", "{}",
                            R"({"add": 5, "extra": 1})", "not json"}) {
        auto r = change(gw, "daily-tokens", bad);
        EXPECT_EQ(r.status, 400) << bad << " " << r.body;
        EXPECT_NE(r.body.find("invalid_body"), std::string::npos) << r.body;
    }
    EXPECT_EQ(change(gw, "nope", R"({"reset": true})").status, 404);
    EXPECT_EQ(tenant_quota(gw)["limit"], 500);
}

TEST(Quota, ARestartKeepsTheDaysUsageAcrossSigtermAndSigkill) {
    GatewayUnderTest gw(config("{ name: daily, algorithm: quota, period: day, limit: 4 }",
                               "store:\n  state_file: state.bin\n  snapshot_interval: 1s\n"));
    ASSERT_EQ(chat(gw).status, 200);
    ASSERT_EQ(chat(gw).status, 200);
    ASSERT_TRUE(gw.wait_settled(2));
    ASSERT_TRUE(gw.restart(SIGTERM)) << gw.log();
    EXPECT_NE(gw.log().find("1 of 1 buckets and quotas restored"), std::string::npos) << gw.log();
    EXPECT_EQ(tenant_quota(gw)["used"], 2);
    ASSERT_EQ(chat(gw).status, 200);
    ASSERT_TRUE(gw.wait_settled(1));
    // SIGKILL once a snapshot surely holds the third request: nothing is lost.
    auto snapshots = [&] {
        return metric_total(gw.admin(Request{"GET", "/metrics", {}, ""}).body, "tokengate_state_snapshots_total");
    };
    auto before = snapshots();
    ASSERT_TRUE(wait_until([&] { return snapshots() >= before + 2; }));
    ASSERT_TRUE(gw.restart(SIGKILL)) << gw.log();
    EXPECT_EQ(chat(gw).status, 200);
    auto refused = chat(gw);
    EXPECT_EQ(refused.status, 429);
    EXPECT_NE(refused.body.find("insufficient_quota"), std::string::npos) << refused.body;
}

TEST(Quota, TwoGatewaysOnOneRedisShareAQuotaExactly) {
    REQUIRE_REDIS();
    RedisServer redis;
    auto shared = config("{ name: daily, algorithm: quota, period: day, limit: 25 }",
                         "store:\n  backend: redis\n  redis: { url: \"" + redis.url() +
                             "\", prefix: \"tgq:\", timeout: 500ms, pool: 2, on_error: fail_closed }\n");
    GatewayUnderTest a(shared), b(shared);
    int passed = 0, refused = 0;
    std::vector<std::thread> clients;
    std::mutex m;
    for (int t = 0; t < 4; ++t)
        clients.emplace_back([&, t] {
            for (int i = 0; i < 10; ++i) {
                auto status = chat(t % 2 ? a : b).status;
                std::lock_guard lock(m);
                passed += status == 200;
                refused += status == 429;
            }
        });
    for (auto& c : clients) c.join();
    EXPECT_EQ(passed, 25);
    EXPECT_EQ(refused, 15);
    // One key per window, named by its start, kept a day past the window's end.
    auto midnight = (unix_seconds() / 86400 + 1) * 86400;
    auto key = "tgq:tenant:daily:acme:" + std::to_string(midnight - 86400);
    auto used = redis.command({"HGET", key, "u"});
    EXPECT_NE(used.find("25"), std::string::npos) << used;
    auto ttl = redis.command({"PTTL", key});
    auto ttl_s = std::stoll(ttl.substr(1)) / 1000;
    EXPECT_NEAR(static_cast<double>(ttl_s), static_cast<double>(midnight + 86400 - unix_seconds()), 10) << ttl;
    // A top-up through either gateway is seen by both.
    ASSERT_EQ(change(a, "daily", R"({"add": 1})").status, 200);
    EXPECT_EQ(chat(b).status, 200);
    EXPECT_EQ(chat(a).status, 429);
    EXPECT_EQ(tenant_quota(b)["used"], 26);
    EXPECT_EQ(tenant_quota(a)["limit"], 26);
}

}  // namespace
}  // namespace tokengate::testing
