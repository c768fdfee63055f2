// SPEC §21's API keys made at run time, through the binary: made, used at once, listed
// without the secret, revoked and expired at once, kept as hashes in auth.keys_file across
// SIGHUP, SIGTERM and SIGKILL, with an audit line per change; and the admin API's bad input.

#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <thread>

#include "harness.hpp"
#include "tokengate/core/calendar.hpp"
#include "tokengate/core/sha256.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const std::string k_config =
    "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
    "tenants:\n  - { id: acme, keys: [\"acme-key\"] }\n  - { id: globex, keys: [\"globex-key\"] }\n"
    "auth: { keys_file: keys.json }\n";

int chat(const GatewayUnderTest& gw, const std::string& key) {
    return gw
        .request({"POST", "/v1/chat/completions", {{"Authorization", "Bearer " + key}}, chat_body("m", "hi", 8, false)})
        .status;
}

Response make_key(const GatewayUnderTest& gw, const std::string& tenant, const json& body) {
    return gw.admin({"POST", "/admin/tenants/" + tenant + "/keys", {}, body.dump()});
}

TEST(RunTimeKeys, AKeyWorksAtOnceIsListedWithoutItsSecretAndIsRevokedAtOnce) {
    GatewayUnderTest gw(k_config);
    auto made = make_key(gw, "acme", {{"name", "ci runner"}});
    ASSERT_EQ(made.status, 201) << made.body;
    auto m = json::parse(made.body);
    std::string secret = m["key"];
    EXPECT_EQ(secret.rfind("tg-", 0), 0u);
    EXPECT_EQ(secret.size(), 3u + 43u) << "32 random bytes in base64url";
    std::string id = m["id"];
    EXPECT_EQ(id, core::sha256_hex(secret).substr(0, 12));
    EXPECT_EQ(chat(gw, secret), 200);
    // The access line names it as it names any key.
    auto lines = gw.access_lines("/v1/chat/completions", 1);
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(json::parse(lines[0])["key_id"], id);
    EXPECT_EQ(json::parse(lines[0])["tenant"], "acme");
    // Listed, without the secret; another tenant's list does not have it.
    auto list = gw.admin({"GET", "/admin/tenants/acme/keys", {}, ""});
    ASSERT_EQ(list.status, 200);
    EXPECT_EQ(list.body.find(secret), std::string::npos);
    auto keys = json::parse(list.body)["keys"];
    ASSERT_EQ(keys.size(), 1u);
    EXPECT_EQ(keys[0]["id"], id);
    EXPECT_EQ(keys[0]["name"], "ci runner");
    EXPECT_FALSE(keys[0].contains("key"));
    EXPECT_TRUE(keys[0]["expires"].is_null());
    EXPECT_TRUE(keys[0]["last_used"].is_string()) << "used once";
    EXPECT_EQ(json::parse(gw.admin({"GET", "/admin/tenants/globex/keys", {}, ""}).body)["keys"].size(), 0u);
    // The file holds its hash only.
    auto file = read_file(gw.dir() + "/keys.json");
    EXPECT_EQ(file.find(secret), std::string::npos);
    EXPECT_NE(file.find(core::sha256_hex(secret)), std::string::npos);
    // Revoked: refused on the next request.
    auto revoked = gw.admin({"DELETE", "/admin/keys/" + id, {}, ""});
    EXPECT_EQ(revoked.status, 200) << revoked.body;
    EXPECT_EQ(chat(gw, secret), 401);
    EXPECT_EQ(gw.admin({"DELETE", "/admin/keys/" + id, {}, ""}).status, 404);
    EXPECT_EQ(read_file(gw.dir() + "/keys.json").find(core::sha256_hex(secret)), std::string::npos);
    // One audit line a change, and the secret in no log.
    ASSERT_TRUE(gw.log_contains("\"action\":\"key_revoked\"")) << gw.log();
    EXPECT_NE(gw.log().find("\"action\":\"key_made\""), std::string::npos);
    EXPECT_EQ(gw.log().find(secret), std::string::npos);
    EXPECT_EQ(chat(gw, "acme-key"), 200) << "the config's keys are untouched";
}

TEST(RunTimeKeys, AnExpiredKeyIsRefused) {
    GatewayUnderTest gw(k_config);
    auto soon = core::rfc3339(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch() + 3s)
            .count());
    auto made = make_key(gw, "acme", {{"name", "short"}, {"expires", soon}});
    ASSERT_EQ(made.status, 201) << made.body;
    std::string secret = json::parse(made.body)["key"];
    EXPECT_EQ(json::parse(made.body)["expires"], soon);
    EXPECT_EQ(chat(gw, secret), 200);
    bool refused = false;
    for (auto deadline = std::chrono::steady_clock::now() + 15s;
         !refused && std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(200ms))
        refused = chat(gw, secret) == 401;
    EXPECT_TRUE(refused);
}

TEST(RunTimeKeys, KeysSurviveSighupSigtermAndSigkill) {
    GatewayUnderTest gw(k_config);
    auto kept = json::parse(make_key(gw, "acme", {{"name", "kept"}}).body)["key"].get<std::string>();
    auto gone_made = json::parse(make_key(gw, "globex", {{"name", "gone"}}).body);
    auto gone = gone_made["key"].get<std::string>();
    ASSERT_EQ(gw.admin({"DELETE", "/admin/keys/" + gone_made["id"].get<std::string>(), {}, ""}).status, 200);
    ::kill(gw.gateway().pid(), SIGHUP);
    ASSERT_TRUE(gw.log_contains("reload")) << gw.log();
    EXPECT_EQ(chat(gw, kept), 200);
    for (int signal : {SIGTERM, SIGKILL}) {
        ASSERT_TRUE(gw.restart(signal)) << gw.log();
        EXPECT_EQ(chat(gw, kept), 200) << "after signal " << signal;
        EXPECT_EQ(chat(gw, gone), 401) << "after signal " << signal;
    }
    auto list = json::parse(gw.admin({"GET", "/admin/tenants/acme/keys", {}, ""}).body)["keys"];
    ASSERT_EQ(list.size(), 1u);
    EXPECT_EQ(list[0]["name"], "kept");
}

TEST(RunTimeKeys, BadAdminCallsAreClearFourHundreds) {
    GatewayUnderTest gw(k_config);
    auto code = [](const Response& r) { return json::parse(r.body, nullptr, false).value("error", json::object()); };
    EXPECT_EQ(make_key(gw, "nobody", {{"name", "x"}}).status, 404);
    for (const auto& bad :
         std::vector<json>{json::array(), json{{"name", 42}}, json{{"name", ""}}, json{{"name", std::string(200, 'n')}},
                           json{{"name", "x"}, {"tier", "pro"}}, json{{"name", "x"}, {"expires", "tomorrow"}},
                           json{{"name", "x"}, {"expires", "2001-01-01T00:00:00Z"}},
                           json{{"name", "x"}, {"expires", 1.8e9}}, json{}}) {
        auto r = make_key(gw, "acme", bad);
        EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.body;
        EXPECT_FALSE(code(r).empty()) << r.body;
    }
    EXPECT_EQ(gw.admin({"POST", "/admin/tenants/acme/keys", {}, "{not json"}).status, 400);
    EXPECT_EQ(gw.admin({"POST", "/admin/tenants/acme/keys", {}, std::string(2 << 20, 'x')}).status, 413);
    EXPECT_EQ(gw.admin({"DELETE", "/admin/keys/nope", {}, ""}).status, 404);
    // Without the admin token: 401, and nothing made.
    auto anonymous = send_request(gw.admin_port(), {"POST", "/admin/tenants/acme/keys", {}, R"({"name":"x"})"});
    EXPECT_EQ(anonymous.status, 401);
    EXPECT_EQ(json::parse(gw.admin({"GET", "/admin/tenants/acme/keys", {}, ""}).body)["keys"].size(), 0u);
}

TEST(RunTimeKeys, WithoutAKeysFileTheApiSaysSo) {
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "tenants:\n  - { id: acme, keys: [\"acme-key\"] }\n");
    auto r = make_key(gw, "acme", {{"name", "x"}});
    EXPECT_EQ(r.status, 409);
    EXPECT_NE(r.body.find("auth.keys_file"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace tokengate::testing
