#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tokengate/config/loader.hpp"

namespace tokengate::config {
namespace {

namespace fs = std::filesystem;

fs::path repo_root() { return fs::path(TOKENGATE_FIXTURES).parent_path().parent_path(); }

TEST(ConfigLoader, ExampleConfigsLoad) {
    std::vector<fs::path> files = {repo_root() / "gateway.example.yaml"};
    for (const auto& entry : fs::directory_iterator(repo_root() / "config"))
        if (entry.path().extension() == ".yaml") files.push_back(entry.path());
    for (const auto& f : files) {
        SCOPED_TRACE(f.string());
        EXPECT_NO_THROW(load_config_file(f.string()));
    }
}

TEST(ConfigLoader, ExampleConfigValues) {
    auto cfg = load_config_file((repo_root() / "gateway.example.yaml").string());
    EXPECT_EQ(cfg->server.host, "127.0.0.1");
    EXPECT_EQ(cfg->server.port, 8080);
    EXPECT_EQ(cfg->server.max_body_bytes, 4u << 20);
    EXPECT_EQ(cfg->server.max_header_bytes, 16u << 10);
    EXPECT_EQ(cfg->server.header_timeout, 10 * core::k_nanos_per_second);
    ASSERT_EQ(cfg->tenants.size(), 2u);
    EXPECT_EQ(cfg->tenants[0].id, "demo");
    ASSERT_FALSE(cfg->tenants[0].limits.empty());
    EXPECT_EQ(cfg->tenants[0].limits[0].name, "requests");
    EXPECT_DOUBLE_EQ(cfg->tenants[0].limits[0].rate_per_s, 1.0);
    EXPECT_EQ(cfg->upstreams[0].port, 8000);
    EXPECT_FALSE(cfg->warnings.empty()) << "the plain demo key must be warned about";
}

/// Every fixture names its expected "line:col: message" on its first line.
TEST(ConfigLoader, EveryBadFixtureReportsItsPosition) {
    int checked = 0;
    for (const auto& entry : fs::directory_iterator(fs::path(TOKENGATE_FIXTURES) / "config")) {
        std::ifstream in(entry.path());
        std::string first;
        std::getline(in, first);
        const std::string marker = "# expect: ";
        ASSERT_EQ(first.rfind(marker, 0), 0u) << entry.path();
        auto expected = first.substr(marker.size());
        SCOPED_TRACE(entry.path().filename().string());
        try {
            load_config_file(entry.path().string());
            ADD_FAILURE() << "loaded without error";
        } catch (const ConfigError& e) {
            std::string what = e.what();
            auto prefix = entry.path().string() + ":";
            ASSERT_EQ(what.rfind(prefix, 0), 0u) << what;
            EXPECT_EQ(what.substr(prefix.size(), expected.size()), expected) << what;
        }
        ++checked;
    }
    EXPECT_GE(checked, 20);
}

TEST(ConfigLoader, TenantOverridesReplaceAndAdd) {
    auto cfg = load_config_text(R"(
upstreams: [ { name: up, url: "http://127.0.0.1:8000/base/" } ]
routes: [ { path_prefix: /v1/, upstreams: [ { name: up, weight: 3 } ] } ]
tiers:
  free:
    limits:
      - { name: requests, algorithm: token_bucket, capacity: 10, rate: 1/s }
      - { name: tokens, algorithm: token_bucket, capacity: 100, rate: 10/s, unit: cost }
tenants:
  - id: t1
    tier: free
    keys: ["k1"]
    limits:
      - { name: requests, algorithm: token_bucket, capacity: 50, rate: 5/s }
      - { name: inflight, algorithm: concurrency, max: 4 }
)",
                                "inline.yaml");
    const auto& limits = cfg->tenants[0].limits;
    ASSERT_EQ(limits.size(), 3u);
    EXPECT_EQ(limits[0].name, "requests");
    EXPECT_DOUBLE_EQ(limits[0].capacity, 50);
    EXPECT_EQ(limits[1].name, "tokens");
    EXPECT_EQ(limits[2].name, "inflight");
    EXPECT_EQ(limits[2].algorithm, Algorithm::concurrency);
    EXPECT_EQ(cfg->upstreams[0].base_path, "/base");
    EXPECT_TRUE(cfg->routes[0].prefix);
    EXPECT_EQ(cfg->routes[0].upstreams[0].weight, 3u);
}

TEST(ConfigLoader, EnvKeysResolve) {
    ::setenv("TOKENGATE_TEST_KEY", "secret-from-env", 1);
    auto cfg = load_config_text(R"(
upstreams: [ { name: up, url: "http://127.0.0.1:8000" } ]
routes: [ { path: /v1/models, upstreams: [up] } ]
tenants: [ { id: t1, keys: ["env:TOKENGATE_TEST_KEY"] } ]
)",
                                "inline.yaml");
    EXPECT_TRUE(cfg->warnings.empty());
    ASSERT_EQ(cfg->tenants[0].key_digests.size(), 1u);
    EXPECT_EQ(cfg->tenants[0].key_digests[0].size(), 32u);
}

TEST(ConfigLoader, TlsSettingsForTheListenerUpstreamsAndRedis) {
    // The loader only checks that the files are readable; tokengate_tls loads them.
    auto file = (fs::path(TOKENGATE_FIXTURES) / "config" / "unknown_top_key.yaml").string();
    auto cfg = load_config_text(R"(
server:
  listen: 0.0.0.0:8443
  tls: { cert: )" + file +
                                    ", key: " + file + R"(, min_version: "1.3", plain_listen: 127.0.0.1:8080 }
store:
  backend: redis
  redis: { url: "rediss://cache.example:6380/2", tls: { ca_file: )" +
                                    file + R"( } }
upstreams:
  - { name: remote, url: "https://api.example.com/v1", tls: { client_cert: )" +
                                    file + ", client_key: " + file + R"( } }
  - { name: local, url: "http://127.0.0.1:8000" }
routes: [ { path: /v1/models, upstreams: [remote] } ]
tenants: [ { id: t1, keys: ["k1"] } ]
)",
                                "inline.yaml");
    ASSERT_TRUE(cfg->server.tls);
    const auto& tls = *cfg->server.tls;
    EXPECT_EQ(tls.cert.path, file);
    EXPECT_EQ(tls.cert.at.line, 4);
    EXPECT_EQ(tls.min_version, 13);
    EXPECT_EQ(tls.alpn, std::vector<std::string>{"http/1.1"});
    EXPECT_TRUE(tls.plain);
    EXPECT_EQ(tls.plain_port, 8080);
    EXPECT_TRUE(cfg->store.redis.tls_enabled);
    EXPECT_EQ(cfg->store.redis.tls.ca_file.path, file);
    const auto& remote = cfg->upstreams[0];
    EXPECT_TRUE(remote.https);
    EXPECT_EQ(remote.host, "api.example.com");
    EXPECT_EQ(remote.port, 443);
    EXPECT_EQ(remote.base_path, "/v1");
    EXPECT_EQ(remote.tls.client_key.path, file);
    EXPECT_FALSE(remote.tls.insecure_skip_verify);
    EXPECT_FALSE(cfg->upstreams[1].https);
    EXPECT_EQ(cfg->upstreams[1].port, 8000);
}

TEST(ConfigLoader, SkippingVerificationIsAWarning) {
    auto cfg = load_config_text(R"(
upstreams: [ { name: up, url: "https://10.0.0.5:8443", tls: { insecure_skip_verify: true } } ]
routes: [ { path: /v1/models, upstreams: [up] } ]
tenants: [ { id: t1, keys: ["sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"] } ]
)",
                                "inline.yaml");
    ASSERT_EQ(cfg->warnings.size(), 1u);
    EXPECT_NE(cfg->warnings[0].find("inline.yaml:2:85: upstream 'up' tls: certificates are not verified"),
              std::string::npos)
        << cfg->warnings[0];
    EXPECT_TRUE(cfg->upstreams[0].tls.insecure_skip_verify);
}

TEST(ConfigLoader, QuotasPricesAndTheirZone) {
    auto cfg = load_config_text(R"(
quotas: { timezone: Asia/Shanghai }
models:
  llama3-70b: { cost_factor: 3.5, price: { input: 0.60, output: 0.80, cached_input: 0.06 } }
  "*": { price: { input: 0.1, output: 0.2 } }
upstreams: [ { name: up, url: "http://127.0.0.1:8000" } ]
routes: [ { path: /v1/chat/completions, upstreams: [up] } ]
tiers:
  free:
    limits:
      - { name: daily-tokens, algorithm: quota, period: day, limit: 1M, unit: tokens }
      - { name: monthly-usd, algorithm: quota, period: month, limit: 50, unit: usd }
tenants: [ { id: t1, tier: free, keys: ["sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"] } ]
)",
                                "inline.yaml");
    EXPECT_TRUE(cfg->warnings.empty()) << cfg->warnings[0];
    EXPECT_EQ(cfg->quota_timezone, "Asia/Shanghai");
    const auto& limits = cfg->tenants[0].limits;
    ASSERT_EQ(limits.size(), 2u);
    EXPECT_EQ(limits[0].algorithm, Algorithm::quota);
    EXPECT_EQ(limits[0].period, core::CalendarPeriod::day);
    EXPECT_EQ(limits[0].capacity, 1e6);
    EXPECT_EQ(limits[0].unit, Unit::tokens);
    EXPECT_EQ(limits[0].zone, core::find_time_zone("Asia/Shanghai"));
    EXPECT_EQ(limits[1].period, core::CalendarPeriod::month);
    EXPECT_EQ(limits[1].unit, Unit::usd);
    ASSERT_TRUE(cfg->models[0].price.has_value());
    EXPECT_DOUBLE_EQ(cfg->models[0].price->cached_input, 0.06);
    EXPECT_DOUBLE_EQ(cfg->models[1].price->cached_input, 0.1) << "cached_input defaults to input";
}

TEST(ConfigLoader, AUsdQuotaOnModelsWithoutAPriceIsAWarning) {
    auto cfg = load_config_text(R"(
models:
  llama3-70b: { price: { input: 0.60, output: 0.80 } }
  llama3-8b: { cost_factor: 0.5 }
upstreams: [ { name: up, url: "http://127.0.0.1:8000" } ]
routes: [ { path: /v1/chat/completions, upstreams: [up] } ]
global_limits:
  - { name: monthly-usd, algorithm: quota, period: month, limit: 50, unit: usd }
tenants: [ { id: t1, keys: ["sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"] } ]
)",
                                "inline.yaml");
    ASSERT_EQ(cfg->warnings.size(), 2u);
    EXPECT_EQ(cfg->warnings[0],
              "inline.yaml:8:5: limit 'monthly-usd' counts usd, but model 'llama3-8b' has no price: "
              "its requests cost 0 USD");
    EXPECT_NE(cfg->warnings[1].find("models without an entry in 'models' have no price"), std::string::npos);
    EXPECT_EQ(cfg->global_limits[0].zone, core::find_time_zone("UTC")) << "quotas.timezone defaults to UTC";
}

TEST(ConfigLoader, MissingFileIsAnError) { EXPECT_THROW(load_config_file("/nonexistent/gateway.yaml"), ConfigError); }

TEST(GlobMatch, Patterns) {
    EXPECT_TRUE(glob_match("llama3-70b*", "llama3-70b-instruct"));
    EXPECT_TRUE(glob_match("*", ""));
    EXPECT_TRUE(glob_match("a?c", "abc"));
    EXPECT_FALSE(glob_match("llama3-70b*", "llama3-8b"));
    EXPECT_TRUE(glob_match("*8b*", "llama3-8b-instruct"));
}

}  // namespace
}  // namespace tokengate::config

namespace tokengate::config {
namespace {

TEST(ConfigLoader, RedisModesAndAFlushIntervalOfZero) {
    const std::string base = R"(
upstreams: [ { name: up, url: "http://127.0.0.1:8000" } ]
routes: [ { path: /v1/chat/completions, upstreams: [up] } ]
ip_limits: [ { name: per-ip, algorithm: token_bucket, capacity: 10, rate: 1/s } ]
tenants: [ { id: a, keys: ["k"] } ]
store:
  backend: redis
  leases: { fraction: 0.1 }
)";
    auto load = [](const std::string& text) { return load_config_text(text, "inline.yaml"); };
    auto cluster = load(base + "  redis: { mode: cluster, nodes: [ \"10.0.0.1:7000\" ], flush_interval: 0 }\n");
    EXPECT_EQ(cluster->store.redis.mode, RedisMode::cluster);
    EXPECT_EQ(cluster->store.redis.nodes, std::vector<std::string>{"10.0.0.1:7000"});
    EXPECT_EQ(cluster->store.redis.flush_interval, 0);
    // No seeds: the url's host is the one.
    auto seeded_by_url = load(base + "  redis: { mode: cluster, url: \"redis://10.0.0.2:7000\" }\n");
    EXPECT_TRUE(seeded_by_url->store.redis.nodes.empty());
    EXPECT_EQ(load(base + "  redis: { flush_interval: 0ms }\n")->store.redis.flush_interval, 0);
    EXPECT_THROW(load(base + "  redis: { flush_interval: -1ms }\n"), ConfigError);
}

}  // namespace
}  // namespace tokengate::config
