#include <gtest/gtest.h>

#include "tokengate/auth/key_table.hpp"
#include "tokengate/config/loader.hpp"
#include "tokengate/core/sha256.hpp"

namespace tokengate::auth {
namespace {

std::shared_ptr<const config::GatewayConfig> two_tenants() {
    std::string hashed = "sha256:" + core::sha256_hex("acme-secret");
    return config::load_config_text(R"(
upstreams: [ { name: up, url: "http://127.0.0.1:8000" } ]
routes: [ { path: /v1/models, upstreams: [up] } ]
tenants:
  - { id: demo, keys: ["demo-key"] }
  - { id: acme, keys: [")" + hashed + R"("] }
)",
                                    "inline.yaml");
}

TEST(ExtractKey, BearerThenApiKeyHeader) {
    EXPECT_EQ(extract_key("Bearer abc", ""), "abc");
    EXPECT_EQ(extract_key("bearer   abc  ", ""), "abc");
    EXPECT_EQ(extract_key("", "xyz"), "xyz");
    EXPECT_EQ(extract_key("Basic Zm9v", "xyz"), "xyz");
    EXPECT_EQ(extract_key("Bearer ", ""), "");
    EXPECT_EQ(extract_key("", ""), "");
}

TEST(KeyTable, PlainAndHashedKeys) {
    auto cfg = two_tenants();
    KeyTable keys(*cfg);
    auto demo = keys.authenticate("demo-key");
    ASSERT_TRUE(demo);
    EXPECT_EQ(demo->tenant->id, "demo");
    EXPECT_EQ(demo->key_id, core::sha256_hex("demo-key").substr(0, 12));
    auto acme = keys.authenticate("acme-secret");
    ASSERT_TRUE(acme);
    EXPECT_EQ(acme->tenant->id, "acme");
}

TEST(KeyTable, UnknownAndEmptyKeysFail) {
    auto cfg = two_tenants();
    KeyTable keys(*cfg);
    EXPECT_FALSE(keys.authenticate(""));
    EXPECT_FALSE(keys.authenticate("demo-key "));
    EXPECT_FALSE(keys.authenticate("sha256:" + core::sha256_hex("acme-secret")));
}

}  // namespace
}  // namespace tokengate::auth
