// docker/grafana's dashboard against a real Prometheus (Debian's) scraping a live gateway and
// the mock upstream's vLLM-style /metrics: every panel's query must return data. promtool
// checks the alert rules and the scrape config.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string k_repo = TOKENGATE_SOURCE_DIR;

void replace_all(std::string& s, const std::string& from, const std::string& to) {
    for (std::size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size())
        s.replace(at, from.size(), to);
}

class Dashboard : public ::testing::Test {
protected:
    void SetUp() override {
        for (const char* tool : {"/usr/bin/prometheus", "/usr/bin/promtool"})
            if (!fs::exists(tool)) {
                std::string why = std::string(tool) + " is not installed (scripts/setup.sh installs prometheus)";
                if (std::getenv("TOKENGATE_REQUIRE_PROMETHEUS")) FAIL() << why;
                GTEST_SKIP() << why;
            }
    }
};

TEST_F(Dashboard, PromtoolAcceptsTheAlertRules) {
    auto out = capture("promtool check rules '" + k_repo + "/docker/alerts.yml' 2>&1; echo exit=$?");
    EXPECT_NE(out.find("SUCCESS: 7 rules found"), std::string::npos) << out;
    EXPECT_NE(out.find("exit=0"), std::string::npos) << out;
}

TEST_F(Dashboard, EveryPanelsQueryReturnsDataFromALiveGateway) {
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "tiers:\n  t:\n    limits:\n"
        "      - { name: requests, algorithm: token_bucket, capacity: 4, rate: 2/s }\n"
        "      - { name: daily, algorithm: quota, period: day, limit: 1000000, unit: tokens }\n"
        "global_limits:\n  - { name: gpu, algorithm: leaky_bucket, capacity: 1000, rate: 100/s, unit: cost }\n"
        "tenants:\n  - { id: acme, tier: t, keys: [\"k1\"] }\n  - { id: beta, tier: t, keys: [\"k2\"] }\n");
    TempDir dir;
    auto prom_port = free_port();
    std::ofstream(dir.path() + "/prometheus.yml")
        << "global: { scrape_interval: 1s, evaluation_interval: 1s }\n"
           "rule_files: ['"
        << k_repo
        << "/docker/alerts.yml']\n"
           "scrape_configs:\n"
           "  - job_name: tokengate\n    static_configs: [ { targets: ['127.0.0.1:"
        << gw.admin_port()
        << "'] } ]\n"
           "  - job_name: vllm\n    static_configs: [ { targets: ['127.0.0.1:"
        << gw.mock_port() << "'] } ]\n";
    auto checked = capture("promtool check config '" + dir.path() + "/prometheus.yml' 2>&1; echo exit=$?");
    ASSERT_NE(checked.find("exit=0"), std::string::npos) << checked;
    Process prometheus(
        {"/usr/bin/prometheus", "--config.file=" + dir.path() + "/prometheus.yml",
         "--storage.tsdb.path=" + dir.path() + "/data", "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
        dir.path() + "/prometheus.log");
    ASSERT_TRUE(wait_for_port(prom_port, 30s)) << read_file(dir.path() + "/prometheus.log");
    auto api = "http://127.0.0.1:" + std::to_string(prom_port) + "/api/v1/";

    // Traffic for a few scrapes: both tenants admitted, acme past its request bucket (429s).
    auto chat = [&](const std::string& key) {
        return gw
            .request({"POST",
                      "/v1/chat/completions",
                      {{"Authorization", "Bearer " + key}},
                      chat_body("llama3-8b", "hello", 16, false)})
            .status;
    };
    int refused = 0;
    auto until = std::chrono::steady_clock::now() + 6s;
    while (std::chrono::steady_clock::now() < until) {
        for (int i = 0; i < 3; ++i) refused += chat("k1") == 429;
        chat("k2");
        std::this_thread::sleep_for(200ms);
    }
    ASSERT_GT(refused, 0);

    auto dashboard = json::parse(read_file(k_repo + "/docker/grafana/dashboards/tokengate.json"));
    ASSERT_GE(dashboard["panels"].size(), 6u);
    auto query = [&](std::string expr) {
        // Grafana's variables, as it would fill them at a 1 s scrape interval and "All" tenants.
        replace_all(expr, "$__rate_interval", "15s");
        replace_all(expr, "$__interval", "15s");
        replace_all(expr, "$tenant", ".*");
        std::ofstream(dir.path() + "/query.txt") << expr;
        return json::parse(
            capture("curl -s -G --data-urlencode query@'" + dir.path() + "/query.txt' '" + api + "query'"), nullptr,
            false);
    };
    std::size_t targets = 0;
    for (const auto& panel : dashboard["panels"]) {
        for (const auto& target : panel["targets"]) {
            ++targets;
            auto expr = target["expr"].get<std::string>();
            // Scrapes land each second: give a just-started series a few to appear.
            json answer;
            for (int attempt = 0; attempt < 20; ++attempt) {
                answer = query(expr);
                if (answer.is_object() && answer["status"] == "success" && !answer["data"]["result"].empty()) break;
                std::this_thread::sleep_for(500ms);
            }
            ASSERT_TRUE(answer.is_object()) << panel["title"];
            EXPECT_EQ(answer["status"], "success") << panel["title"] << ": " << answer.dump();
            EXPECT_FALSE(answer["data"]["result"].empty()) << panel["title"] << " has no data: " << expr;
        }
    }
    EXPECT_GE(targets, 10u);

    // The alert rules load and evaluate against the live series without an error.
    json rules;
    for (int attempt = 0; attempt < 30; ++attempt) {
        rules = json::parse(capture("curl -s '" + api + "rules'"), nullptr, false);
        bool all_ok = rules.is_object() && !rules["data"]["groups"].empty();
        if (all_ok)
            for (const auto& r : rules["data"]["groups"][0]["rules"]) all_ok = all_ok && r["health"] == "ok";
        if (all_ok) break;
        std::this_thread::sleep_for(500ms);
    }
    ASSERT_TRUE(rules.is_object());
    ASSERT_EQ(rules["data"]["groups"].size(), 1u);
    EXPECT_EQ(rules["data"]["groups"][0]["rules"].size(), 7u);
    for (const auto& r : rules["data"]["groups"][0]["rules"]) EXPECT_EQ(r["health"], "ok") << r.dump();
}

}  // namespace
}  // namespace tokengate::testing
