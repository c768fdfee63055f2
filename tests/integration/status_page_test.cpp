// SPEC §15's status page through the binary: /admin/status's JSON after real traffic, paging
// over a thousand tenants, the token (Bearer or Basic), the embedded files, and a real
// Chromium (Debian's, driven by npm's playwright-core) loading /ui and watching it update.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string config(int extra_tenants = 0) {
    std::string c =
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "tiers:\n  t:\n    limits:\n"
        "      - { name: requests, algorithm: token_bucket, capacity: 3, rate: 0.01/s }\n"
        "      - { name: daily, algorithm: quota, period: day, limit: 100000, unit: tokens }\n"
        "global_limits:\n  - { name: gpu, algorithm: leaky_bucket, capacity: 1000, rate: 10/s, unit: cost }\n"
        "tenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n  - { id: beta, tier: t, keys: [\"k2\"] }\n"
        "  - { id: idle, tier: t, keys: [\"k3\"] }\n";
    for (int i = 0; i < extra_tenants; ++i)
        c += "  - { id: tenant-" + std::to_string(i) + ", tier: t, keys: [\"key-" + std::to_string(i) + "\"] }\n";
    return c;
}

int chat(const GatewayUnderTest& gw, const std::string& key) {
    return gw
        .request({"POST",
                  "/v1/chat/completions",
                  {{"Authorization", "Bearer " + key}},
                  chat_body("llama3-8b", "hello there", 16, false)})
        .status;
}

const json* tenant(const json& status, const std::string& id) {
    for (const auto& t : status["tenants"]["items"])
        if (t["id"] == id) return &t;
    return nullptr;
}

TEST(StatusPage, StatusShowsLimitsRatesAndTheHeatMapAfterTraffic) {
    GatewayUnderTest gw(config());
    for (int i = 0; i < 4; ++i) chat(gw, "k1");  // 3 admitted, the 4th refused
    EXPECT_EQ(chat(gw, "k2"), 200);
    gw.metrics_after(5);
    auto res = gw.admin({"GET", "/admin/status", {}, ""});
    ASSERT_EQ(res.status, 200) << res.body;
    auto s = json::parse(res.body);
    EXPECT_EQ(s["tenants"]["total"], 3);
    // Sorted by tokens over the last hour: acme used the most, idle none.
    ASSERT_EQ(s["tenants"]["items"].size(), 3u);
    EXPECT_EQ(s["tenants"]["items"][0]["id"], "acme");
    EXPECT_EQ(s["tenants"]["items"][2]["id"], "idle");
    const auto* acme = tenant(s, "acme");
    ASSERT_NE(acme, nullptr);
    EXPECT_EQ((*acme)["limits"][0]["name"], "requests");
    EXPECT_EQ((*acme)["limits"][0]["capacity"], 3.0);
    EXPECT_LT((*acme)["limits"][0]["remaining"].get<double>(), 0.1);
    EXPECT_EQ((*acme)["limits"][1]["algorithm"], "quota");
    EXPECT_EQ((*acme)["quotas"][0]["name"], "daily");
    EXPECT_GT((*acme)["quotas"][0]["used"].get<double>(), 0);
    // The sparkline: 60 bins of 5 s; this traffic is in the last ones.
    const auto& spark = (*acme)["spark"];
    ASSERT_EQ(spark["completion"].size(), 60u);
    std::uint64_t completion = 0, rejections = 0;
    for (const auto& v : spark["completion"]) completion += v.get<std::uint64_t>();
    for (const auto& v : spark["rejections"]) rejections += v.get<std::uint64_t>();
    EXPECT_GT(completion, 0u);
    EXPECT_EQ(rejections, 1u);
    EXPECT_EQ((*tenant(s, "idle"))["spark"], nullptr);
    // The heat map: the two tenants that used tokens, the heavier first, 60 minutes each.
    const auto& rows = s["heatmap"]["rows"];
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0]["tenant"], "acme");
    EXPECT_EQ(rows[0]["tokens"].size(), 60u);
    EXPECT_GT(rows[0]["tokens"][59].get<std::uint64_t>() + rows[0]["tokens"][58].get<std::uint64_t>(), 0u);
    // The upstream that served, with its time to first byte; the global limit.
    ASSERT_GE(s["upstreams"].size(), 1u);
    EXPECT_EQ(s["upstreams"][0]["name"], "mock");
    EXPECT_EQ(s["upstreams"][0]["healthy"], true);
    EXPECT_EQ(s["upstreams"][0]["ttfb_samples"], 4);
    EXPECT_GT(s["upstreams"][0]["ttfb_p99_ms"].get<double>(), 0);
    EXPECT_EQ(s["global"][0]["name"], "gpu");
    EXPECT_LT(s["global"][0]["remaining"].get<double>(), 1000);
}

TEST(StatusPage, AThousandTenantsArePagedFilteredAndSorted) {
    GatewayUnderTest gw(config(1000));
    EXPECT_EQ(chat(gw, "key-517"), 200);
    gw.metrics_after(1);
    auto page = [&](const std::string& query) {
        auto res = gw.admin({"GET", "/admin/status" + query, {}, ""});
        EXPECT_EQ(res.status, 200) << res.body;
        EXPECT_LT(res.body.size(), 200'000u) << "a page, not every tenant";
        return json::parse(res.body)["tenants"];
    };
    auto first = page("");
    EXPECT_EQ(first["total"], 1003);
    EXPECT_EQ(first["items"].size(), 20u) << "the default page";
    EXPECT_EQ(first["items"][0]["id"], "tenant-517") << "the one with traffic first";
    auto by_id = page("?sort=id&offset=1000&limit=50");
    ASSERT_EQ(by_id["items"].size(), 3u);
    EXPECT_EQ(by_id["items"][0]["id"], "tenant-997");
    auto filtered = page("?q=tenant-99&limit=100&sort=id");
    EXPECT_EQ(filtered["total"], 11);  // tenant-99 and tenant-990..999
    EXPECT_EQ(filtered["q"], "tenant-99");
    // Nonsense is not an error: each value keeps its default, and a page is at most 100.
    auto odd = page("?limit=99999999999999999999999&offset=-3&sort=%00&q=%zz");
    EXPECT_EQ(odd["limit"], 20);
    EXPECT_EQ(odd["offset"], 0);
    EXPECT_EQ(odd["sort"], "tokens");
    EXPECT_EQ(odd["q"], "%zz");
    EXPECT_EQ(page("?limit=5000")["items"].size(), 100u);
}

TEST(StatusPage, TheTokenIsBearerOrBasicAndTheFilesAreInTheBinary) {
    GatewayUnderTest gw(config());
    auto anon = send_request(gw.admin_port(), {"GET", "/ui", {}, ""});
    EXPECT_EQ(anon.status, 401);
    EXPECT_EQ(anon.header("www-authenticate").rfind("Basic realm=", 0), 0u) << "a browser prompts";
    EXPECT_EQ(send_request(gw.admin_port(), {"GET", "/admin/status", {}, ""}).status, 401);
    // Basic: any user name, the admin token as the password ("admin:test-admin-token").
    auto basic = [&](const std::string& target, const std::string& credentials) {
        return send_request(gw.admin_port(), {"GET", target, {{"Authorization", "Basic " + credentials}}, ""});
    };
    EXPECT_EQ(basic("/ui", "YWRtaW46dGVzdC1hZG1pbi10b2tlbg==").status, 200);
    EXPECT_EQ(basic("/ui", "YWRtaW46d3Jvbmc=").status, 401) << "admin:wrong";
    EXPECT_EQ(basic("/ui", "!!!").status, 401);
    auto status = basic("/admin/status", "YWRtaW46dGVzdC1hZG1pbi10b2tlbg==");
    EXPECT_EQ(status.status, 200);
    EXPECT_EQ(status.header("content-type"), "application/json");

    auto ui = gw.admin({"GET", "/ui", {}, ""});
    ASSERT_EQ(ui.status, 200);
    EXPECT_EQ(ui.header("content-type"), "text/html; charset=utf-8");
    EXPECT_NE(ui.header("content-security-policy").find("default-src 'self'"), std::string::npos);
    EXPECT_EQ(ui.body, read_file(std::string(TOKENGATE_SOURCE_DIR) + "/src/server/ui/index.html"));
    for (auto [path, type] : {std::pair{"/ui/app.js", "text/javascript; charset=utf-8"},
                              {"/ui/style.css", "text/css; charset=utf-8"},
                              {"/ui/favicon.svg", "image/svg+xml"},
                              {"/favicon.ico", "image/svg+xml"}}) {
        auto file = gw.admin({"GET", path, {}, ""});
        EXPECT_EQ(file.status, 200) << path;
        EXPECT_EQ(file.header("content-type"), type) << path;
        EXPECT_GT(file.body.size(), 100u) << path;
    }
    EXPECT_EQ(gw.admin({"GET", "/ui/../gateway.yaml", {}, ""}).status, 404);
    EXPECT_EQ(gw.admin({"GET", "/ui/nothing.js", {}, ""}).status, 404);
}

TEST(StatusPage, ChromiumShowsTheTenantsAndUpdatesWithoutAReload) {
    const char* chromium = "/usr/bin/chromium";
    bool required = std::getenv("TOKENGATE_REQUIRE_BROWSER") != nullptr;
    auto shared = std::string(TOKENGATE_BUILD_DIR) + "/playwright";
    auto why = fs::exists(chromium) ? npm_install_once(shared, "playwright-core@1.65.1", "playwright-core/package.json")
                                    : std::string("Debian's chromium is not installed (scripts/setup.sh installs it)");
    if (!why.empty()) {
        if (required) FAIL() << why;
        GTEST_SKIP() << why;
    }
    GatewayUnderTest gw(config());
    EXPECT_EQ(chat(gw, "k2"), 200);  // the page opens with some history
    gw.metrics_after(1);
    auto screenshot = gw.dir() + "/status-page.png";
    json cfg = {{"admin", "http://127.0.0.1:" + std::to_string(gw.admin_port())},
                {"gateway", "http://127.0.0.1:" + std::to_string(gw.port())},
                {"token", GatewayUnderTest::admin_token},
                {"key", "k1"},
                {"tenant", "acme"},
                {"requests", 4},
                {"screenshot", screenshot},
                {"chromium", chromium}};
    std::ofstream(gw.dir() + "/ui.json") << cfg.dump();
    auto out = capture("node '" + std::string(TOKENGATE_SOURCE_DIR) + "/tests/ui/status_page.mjs' '" + shared +
                       "/node_modules/playwright-core' '" + gw.dir() + "/ui.json' 2>&1");
    auto seen = json::parse(out.substr(0, out.find('\n')), nullptr, false);
    ASSERT_TRUE(seen.is_object()) << out;
    ASSERT_FALSE(seen.contains("failed")) << out;
    EXPECT_EQ(seen["errors"], json::array()) << "no console error: " << out;
    const auto& c = seen["checks"];
    EXPECT_EQ(c["without_token"], 401);
    EXPECT_EQ(c["status"], 200);
    EXPECT_EQ(c["tenants"], json({"beta", "acme", "idle"})) << "by tokens in the last hour: beta had traffic";
    EXPECT_EQ(c["limits"], json({"tenant:requests", "tenant:daily"}));
    EXPECT_EQ(c["answers"], json({{"200", 3}, {"429", 1}}));
    EXPECT_EQ(c["before"]["heat_cells"], 0) << "acme had used nothing";
    EXPECT_NE(c["after"]["figures"], c["before"]["figures"]) << out;
    EXPECT_GT(c["after"]["heat_cells"].get<int>(), 0) << out;
    EXPECT_EQ(c["navigations"], 1) << "updated in place, not reloaded";
    EXPECT_GT(fs::file_size(screenshot), 10'000u);
}

}  // namespace
}  // namespace tokengate::testing
