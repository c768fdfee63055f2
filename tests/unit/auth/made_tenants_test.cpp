#include <gtest/gtest.h>

#include "tokengate/auth/made_tenants.hpp"
#include "tokengate/config/loader.hpp"

namespace tokengate::auth {
namespace {

std::shared_ptr<const config::GatewayConfig> two_tiers() {
    return config::load_config_text(R"(
upstreams: [ { name: up, url: "http://127.0.0.1:8000" } ]
routes: [ { path: /v1/models, upstreams: [up] } ]
tiers:
  pro: { priority: critical, limits: [ { name: rpm, algorithm: token_bucket, capacity: 5, rate: 5/min } ] }
  free: { priority: sheddable, limits: [ { name: rpm, algorithm: token_bucket, capacity: 1, rate: 1/min } ] }
tenants: [ { id: demo, keys: ["demo-key"] } ]
)",
                                    "inline.yaml");
}

TEST(MadeTenants, ATenantIsItsTiersSettingsUnderItsOwnIdBuiltOnce) {
    auto cfg = two_tiers();
    MadeTenants made(*cfg);
    const auto* initech = made.get("initech", "pro");
    ASSERT_NE(initech, nullptr);
    EXPECT_EQ(initech->id, "initech");
    EXPECT_EQ(initech->tier, "pro");
    EXPECT_EQ(initech->priority, config::Priority::critical);
    ASSERT_EQ(initech->limits.size(), 1u);
    EXPECT_EQ(initech->limits[0].capacity, 5);
    EXPECT_TRUE(initech->key_digests.empty());
    EXPECT_EQ(made.get("initech", "pro"), initech) << "the same one again: a request may hold it";
    const auto* downgraded = made.get("initech", "free");
    ASSERT_NE(downgraded, nullptr);
    EXPECT_NE(downgraded, initech);
    EXPECT_EQ(downgraded->limits[0].capacity, 1);
    EXPECT_EQ(initech->limits[0].capacity, 5) << "the first is untouched";
}

TEST(MadeTenants, NoTierNoTenantAndABound) {
    auto cfg = two_tiers();
    MadeTenants made(*cfg);
    EXPECT_EQ(made.get("initech", "gold"), nullptr);
    EXPECT_EQ(made.get("initech", ""), nullptr);
    for (std::size_t i = 0; i < MadeTenants::k_max; ++i) ASSERT_NE(made.get("t" + std::to_string(i), "free"), nullptr);
    EXPECT_EQ(made.get("one-more", "free"), nullptr) << "past k_max: refused, not grown";
    EXPECT_NE(made.get("t7", "free"), nullptr) << "those made stay";
}

}  // namespace
}  // namespace tokengate::auth
