// SPEC §21's API keys and tenants made at run time, through the binary: made, used at once,
// listed without the secret, revoked and expired at once, kept as hashes in auth.keys_file
// across SIGHUP, SIGTERM and SIGKILL, with an audit line per change; tenants on a tier, and
// removed with their keys; two gateways on one Redis seeing each other's changes within 1 s;
// and the admin API's bad input.

#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <iostream>
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
    "tiers:\n  pro: { limits: [ { name: rpm, algorithm: token_bucket, capacity: 2, rate: 1/h, unit: requests } ] }\n"
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

Response make_tenant(const GatewayUnderTest& gw, const json& body) {
    return gw.admin({"POST", "/admin/tenants", {}, body.dump()});
}

TEST(RunTimeTenants, MadeOnATierGivenKeysKeptAndRemovedWithThem) {
    GatewayUnderTest gw(k_config);
    auto made = make_tenant(gw, {{"id", "initech"}, {"tier", "pro"}});
    ASSERT_EQ(made.status, 201) << made.body;
    EXPECT_EQ(json::parse(made.body)["tier"], "pro");
    auto key = make_key(gw, "initech", {{"name", "first"}});
    ASSERT_EQ(key.status, 201) << key.body;
    std::string secret = json::parse(key.body)["key"];
    // The tier's limits, in initech's own buckets.
    EXPECT_EQ(chat(gw, secret), 200);
    EXPECT_EQ(chat(gw, secret), 200);
    EXPECT_EQ(chat(gw, secret), 429) << "pro's capacity of 2";
    auto lines = gw.access_lines("/v1/chat/completions", 3);
    ASSERT_EQ(lines.size(), 3u);
    for (const auto& line : lines) EXPECT_EQ(json::parse(line)["tenant"], "initech");
    ASSERT_TRUE(gw.log_contains("\"action\":\"tenant_made\"")) << gw.log();
    auto state = gw.admin({"GET", "/admin/tenants/initech", {}, ""});
    ASSERT_EQ(state.status, 200) << state.body;
    EXPECT_EQ(json::parse(state.body)["limits"][0]["name"], "rpm");
    EXPECT_LT(json::parse(state.body)["limits"][0]["remaining"].get<double>(), 1.0);
    // Listed beside the config's; kept through a reload and a crash.
    auto listed = json::parse(gw.admin({"GET", "/admin/tenants", {}, ""}).body)["tenants"];
    ASSERT_EQ(listed.size(), 3u) << listed.dump();
    EXPECT_EQ(listed[2]["id"], "initech");
    EXPECT_EQ(listed[2]["made"], "run_time");
    EXPECT_EQ(listed[0]["made"], "config");
    ::kill(gw.gateway().pid(), SIGHUP);
    ASSERT_TRUE(gw.log_contains("reload")) << gw.log();
    ASSERT_TRUE(gw.restart(SIGKILL)) << gw.log();
    EXPECT_EQ(chat(gw, secret), 200) << "a fresh bucket after the crash, the same tenant and key";
    EXPECT_NE(read_file(gw.dir() + "/keys.json").find("\"initech\""), std::string::npos);
    // Twice, or over a config tenant: 409. Removing it revokes its keys.
    EXPECT_EQ(make_tenant(gw, {{"id", "initech"}, {"tier", "pro"}}).status, 409);
    EXPECT_EQ(make_tenant(gw, {{"id", "acme"}, {"tier", "pro"}}).status, 409);
    EXPECT_EQ(gw.admin({"DELETE", "/admin/tenants/acme", {}, ""}).status, 409) << "the config's: removed there";
    auto removed = gw.admin({"DELETE", "/admin/tenants/initech", {}, ""});
    ASSERT_EQ(removed.status, 200) << removed.body;
    EXPECT_EQ(json::parse(removed.body)["keys_revoked"], 1);
    EXPECT_EQ(chat(gw, secret), 401);
    EXPECT_EQ(gw.admin({"GET", "/admin/tenants/initech", {}, ""}).status, 404);
    EXPECT_EQ(make_key(gw, "initech", {{"name", "x"}}).status, 404);
    EXPECT_EQ(gw.admin({"DELETE", "/admin/tenants/initech", {}, ""}).status, 404);
    ASSERT_TRUE(gw.log_contains("\"action\":\"tenant_removed\"")) << gw.log();
    EXPECT_EQ(read_file(gw.dir() + "/keys.json").find("\"initech\""), std::string::npos);
}

TEST(RunTimeTenants, BadBodiesAreClearFourHundreds) {
    GatewayUnderTest gw(k_config);
    for (const auto& bad : std::vector<json>{
             json::array(), json{}, json{{"id", "x"}}, json{{"tier", "pro"}}, json{{"id", 7}, {"tier", "pro"}},
             json{{"id", ""}, {"tier", "pro"}}, json{{"id", "a/b"}, {"tier", "pro"}},
             json{{"id", "a b"}, {"tier", "pro"}}, json{{"id", std::string(129, 'x')}, {"tier", "pro"}},
             json{{"id", "x"}, {"tier", 3}}, json{{"id", "x"}, {"tier", "pro"}, {"keys", 1}}}) {
        auto r = make_tenant(gw, bad);
        EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.body;
        EXPECT_TRUE(json::parse(r.body, nullptr, false).contains("error")) << r.body;
    }
    auto unknown = make_tenant(gw, {{"id", "x"}, {"tier", "gold"}});
    EXPECT_EQ(unknown.status, 400);
    EXPECT_EQ(json::parse(unknown.body)["error"]["code"], "unknown_tier");
    EXPECT_EQ(gw.admin({"POST", "/admin/tenants", {}, "{not json"}).status, 400);
    EXPECT_EQ(gw.admin({"POST", "/admin/tenants", {}, std::string(2 << 20, 'x')}).status, 413);
    EXPECT_EQ(json::parse(gw.admin({"GET", "/admin/tenants", {}, ""}).body)["tenants"].size(), 2u) << "nothing made";
}

/// Two gateways sharing one Redis store, and so one book.
std::string shared_config(const RedisServer& redis) {
    return "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
           "tiers:\n  pro: { limits: [ { name: rpm, algorithm: token_bucket, capacity: 100, rate: 100/min } ] }\n"
           "tenants:\n  - { id: acme, keys: [\"acme-key\"] }\n"
           "store:\n  backend: redis\n  redis: { url: \"" +
           redis.url() + "\", prefix: \"tgkeys:\", on_error: fail_closed }\n";
}

/// How long until `gw` answers `key` with `status`, asking every 20 ms; 10 s if it never does.
std::chrono::milliseconds until(const GatewayUnderTest& gw, const std::string& key, int status) {
    auto start = std::chrono::steady_clock::now();
    while (chat(gw, key) != status && std::chrono::steady_clock::now() - start < 10s) std::this_thread::sleep_for(20ms);
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
}

TEST(RunTimeKeys, TwoGatewaysOnOneRedisSeeAChangeWithinASecond) {
    REQUIRE_REDIS();
    RedisServer redis;
    GatewayUnderTest a(shared_config(redis)), b(shared_config(redis));
    ASSERT_EQ(make_tenant(a, {{"id", "initech"}, {"tier", "pro"}}).status, 201);
    auto made = make_key(a, "initech", {{"name", "shared"}});
    ASSERT_EQ(made.status, 201) << made.body;
    std::string secret = json::parse(made.body)["key"], id = json::parse(made.body)["id"];
    EXPECT_EQ(chat(a, secret), 200) << "at once where it was made";
    auto seen = until(b, secret, 200);
    EXPECT_LT(seen, 1s) << "the other replica took " << seen.count() << " ms";
    // b lists it and revokes it; a refuses it within the second.
    auto listed = json::parse(b.admin({"GET", "/admin/tenants/initech/keys", {}, ""}).body)["keys"];
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0]["id"], id);
    ASSERT_EQ(b.admin({"DELETE", "/admin/keys/" + id, {}, ""}).status, 200);
    EXPECT_EQ(chat(b, secret), 401) << "at once where it was revoked";
    auto refused = until(a, secret, 401);
    EXPECT_LT(refused, 1s) << "the other replica took " << refused.count() << " ms";
    std::cout << "another replica: a new key works after " << seen.count() << " ms, a revoked one fails after "
              << refused.count() << " ms\n";
    // Redis holds hashes only; a replica started afterwards has the book from it.
    auto again = json::parse(make_key(b, "initech", {{"name", "second"}}).body)["key"].get<std::string>();
    auto book = redis.command({"HGETALL", "tgkeys:{auth}:keys"});
    EXPECT_EQ(book.find(again), std::string::npos);
    EXPECT_NE(book.find(core::sha256_hex(again)), std::string::npos) << book;
    GatewayUnderTest c(shared_config(redis));
    EXPECT_LT(until(c, again, 200), 1s);
    // When a key was last used travels too: a never used it, c did (shared every 5 s).
    bool heard = false;
    for (auto deadline = std::chrono::steady_clock::now() + 15s; !heard && std::chrono::steady_clock::now() < deadline;
         std::this_thread::sleep_for(200ms)) {
        auto keys = json::parse(a.admin({"GET", "/admin/tenants/initech/keys", {}, ""}).body)["keys"];
        heard = keys.size() == 1 && keys[0]["last_used"].is_string();
    }
    EXPECT_TRUE(heard) << "a never heard that c used the key";
    // A tenant removed on one replica: its keys fail on every replica.
    ASSERT_EQ(c.admin({"DELETE", "/admin/tenants/initech", {}, ""}).status, 200);
    EXPECT_LT(until(a, again, 401), 1s);
    EXPECT_LT(until(b, again, 401), 1s);
    EXPECT_EQ(redis.command({"HLEN", "tgkeys:{auth}:keys"}), ":0\r\n");
    EXPECT_EQ(make_tenant(a, {{"id", "initech"}, {"tier", "pro"}}).status, 201);
    EXPECT_EQ(make_tenant(b, {{"id", "initech"}, {"tier", "pro"}}).status, 409) << "made on a already";
    // Whatever else is written there is left out, never trusted: a replica keeps serving.
    redis.commands({{"HSET", "tgkeys:{auth}:keys", "bogus", R"({"tenant":1,"sha256":"zz"})"},
                    {"HSET", "tgkeys:{auth}:keys", "huge", std::string(1 << 20, '[')},
                    {"HSET", "tgkeys:{auth}:tenants", "evil", "not json"},
                    {"INCR", "tgkeys:{auth}:version"}});
    ASSERT_TRUE(a.log_contains("3 entries are not keys or tenants")) << a.log();
    EXPECT_EQ(chat(a, "acme-key"), 200);
    auto after = json::parse(a.admin({"GET", "/admin/tenants", {}, ""}).body)["tenants"];
    ASSERT_EQ(after.size(), 2u) << after.dump();
    EXPECT_EQ(after[1]["id"], "initech");
}

TEST(RunTimeKeys, WithRedisAwayAChangeIsA503AndTheKnownKeysKeepWorking) {
    REQUIRE_REDIS();
    auto redis = std::make_unique<RedisServer>();
    auto cfg = shared_config(*redis);
    cfg.replace(cfg.find("fail_closed"), 11, "fail_open");
    GatewayUnderTest gw(cfg);
    ASSERT_EQ(make_tenant(gw, {{"id", "initech"}, {"tier", "pro"}}).status, 201);
    std::string secret = json::parse(make_key(gw, "initech", {{"name", "k"}}).body)["key"];
    redis.reset();
    auto r = make_key(gw, "initech", {{"name", "while away"}});
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_EQ(json::parse(r.body)["error"]["code"], "redis_unavailable");
    EXPECT_EQ(gw.admin({"POST", "/admin/tenants", {}, R"({"id":"x","tier":"pro"})"}).status, 503);
    EXPECT_EQ(chat(gw, secret), 200) << "the book this replica read stays in force";
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
