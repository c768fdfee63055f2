#include <gtest/gtest.h>

#include "tokengate/classify/classify.hpp"
#include "tokengate/config/loader.hpp"

namespace tokengate::classify {
namespace {

std::shared_ptr<const config::GatewayConfig> sample() {
    return config::load_config_text(R"(
upstreams: [ { name: up, url: "http://127.0.0.1:8000" } ]
routes:
  - path: /v1/chat/completions
    models: ["llama3-70b*"]
    upstreams: [up]
    limits: [ { name: big-route, algorithm: token_bucket, capacity: 10, rate: 1/s } ]
  - { path: /v1/chat/completions, upstreams: [up] }
  - { path_prefix: /v1/, upstreams: [up] }
tiers:
  free:
    limits:
      - { name: requests, algorithm: token_bucket, capacity: 10, rate: 1/s }
      - { name: big-tokens, algorithm: token_bucket, capacity: 100, rate: 1/s, unit: cost, models: ["llama3-70b*"] }
tenants: [ { id: t1, tier: free, keys: ["k1"] } ]
ip_limits: [ { name: per-ip, algorithm: token_bucket, capacity: 100, rate: 100/min } ]
global_limits: [ { name: gpu, algorithm: leaky_bucket, capacity: 500, rate: 100/s, unit: cost } ]
)",
                                    "inline.yaml");
}

TEST(MatchRoute, PathThenModel) {
    auto cfg = sample();
    EXPECT_EQ(match_route(*cfg, "/v1/chat/completions", "llama3-70b-instruct"), 0u);
    EXPECT_EQ(match_route(*cfg, "/v1/chat/completions", "llama3-8b"), 1u);
    EXPECT_EQ(match_route(*cfg, "/v1/models", ""), 2u);
    EXPECT_FALSE(match_route(*cfg, "/health", ""));
}

TEST(ApplicableLimits, EveryLevelWithModelFilters) {
    auto cfg = sample();
    auto big = applicable_limits(*cfg, {&cfg->tenants[0], "10.0.0.1", 0, "llama3-70b", config::Amounts{21}, {}});
    ASSERT_EQ(big.size(), 5u);
    EXPECT_EQ(big[0].key, "tenant:requests:t1");
    EXPECT_DOUBLE_EQ(big[0].amount, 1);
    EXPECT_EQ(big[1].key, "tenant:big-tokens:t1");
    EXPECT_DOUBLE_EQ(big[1].amount, 21);
    EXPECT_EQ(big[2].key, "ip:per-ip:10.0.0.1");
    EXPECT_EQ(big[3].key, "route:big-route:/v1/chat/completions");
    EXPECT_EQ(big[4].key, "global:gpu:*");
    EXPECT_DOUBLE_EQ(big[4].amount, 21);
    auto small = applicable_limits(*cfg, {&cfg->tenants[0], "10.0.0.1", 1, "llama3-8b", config::Amounts{2}, {}});
    EXPECT_EQ(small.size(), 3u) << "no per-model tenant limit, no route limit";
}

}  // namespace
}  // namespace tokengate::classify

namespace tokengate::classify {
namespace {

TEST(Classify, BucketKeysAreSpelledInOnePlace) {
    EXPECT_EQ(bucket_key(config::Level::tenant, "tokens", "acme"), "tenant:tokens:acme");
    EXPECT_EQ(bucket_key(config::Level::global, "gpu", "*"), "global:gpu:*");
    config::TenantConfig tenant;
    tenant.id = "acme";
    tenant.limits.resize(2);
    tenant.limits[0].name = "tokens";
    tenant.limits[1].name = "requests";
    auto charges = tenant_charges(tenant);
    ASSERT_EQ(charges.size(), 2u);
    EXPECT_EQ(charges[1].key, "tenant:requests:acme");
    EXPECT_EQ(charges[1].amount, 0) << "a view charges nothing";
}

}  // namespace
}  // namespace tokengate::classify
