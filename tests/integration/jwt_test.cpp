// SPEC §21's JWTs through the binary: tokens signed by npm's jose (tests/sdk/jwt.mjs), one key
// pair per accepted algorithm, and every refusal a client can provoke, none of them logged with
// its token.

#include <gtest/gtest.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* k_jose = "jose@6.2.17";
constexpr const char* k_issuer = "https://idp.example.com/";

/// jwks.json, rotated.json and tokens.json made by jose in `dir`; the tokens, or why not.
json make_tokens(const std::string& dir, std::string& skip) {
    auto shared = fs::path(TOKENGATE_BUILD_DIR) / "jose";
    skip = npm_install_once(shared.string(), k_jose, "jose/package.json");
    if (!skip.empty()) return {};
    auto script = fs::path(TOKENGATE_SOURCE_DIR) / "tests/sdk/jwt.mjs";
    auto out = capture("node '" + script.string() + "' '" + (shared / "node_modules/jose").string() + "' '" + dir +
                       "' " + k_issuer + " tokengate 2>&1");
    auto parsed = json::parse(read_file(dir + "/tokens.json"), nullptr, false);
    if (parsed.is_discarded()) return {{"failed", out}};
    return parsed;
}

#define MAKE_TOKENS(tokens, dir)                                                         \
    std::string skip;                                                                    \
    auto tokens = make_tokens(dir, skip);                                                \
    if (!skip.empty()) {                                                                 \
        if (std::getenv("TOKENGATE_REQUIRE_NPM")) FAIL() << "jose is missing: " << skip; \
        GTEST_SKIP() << "JWT test skipped: " << skip;                                    \
    }                                                                                    \
    ASSERT_FALSE(tokens.contains("failed")) << tokens.dump(2)

/// `jwks` is a file, or `url:` and the URL to fetch it from every second.
std::string config(const std::string& jwks) {
    auto source =
        jwks.rfind("url:", 0) == 0 ? "jwks_url: " + jwks.substr(4) + "\n    jwks_refresh: 1s" : "jwks_file: " + jwks;
    return "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
           "tiers:\n  pro: { limits: [ { name: rpm, algorithm: token_bucket, capacity: 1000, rate: 1000/min, "
           "unit: requests } ] }\n"
           "tenants:\n  - { id: acme, tier: pro, keys: [\"acme-key\"] }\n"
           "auth:\n  jwt:\n    issuer: " +
           std::string(k_issuer) + "\n    audiences: [ tokengate ]\n    " + source +
           "\n    tenant_claim: org\n    tier_claim: plan\n    leeway: 30s\n";
}

/// `cfg` with tier pro's one limit, `name`, at 2 requests an hour (`extra` added to it).
std::string with_two_requests_an_hour(std::string cfg, const std::string& name, const std::string& extra) {
    cfg.replace(cfg.find("tiers:"), cfg.find("tenants:") - cfg.find("tiers:"),
                "tiers:\n  pro: { limits: [ { name: " + name +
                    ", algorithm: token_bucket, capacity: 2, rate: 1/h, unit: requests" + extra + " } ] }\n");
    return cfg;
}

Response chat(const GatewayUnderTest& gw, const std::string& bearer) {
    return gw.request({"POST",
                       "/v1/chat/completions",
                       {{"Authorization", "Bearer " + bearer}, {"Content-Type", "application/json"}},
                       chat_body("m", "hello", 8, false)});
}

std::string message(const Response& r) {
    auto body = json::parse(r.body, nullptr, false);
    return body.is_discarded() ? r.body : body["error"].value("message", std::string());
}

TEST(Jwt, EveryAlgorithmSignedByJoseIsAccepted) {
    TempDir dir;
    MAKE_TOKENS(tokens, dir.path());
    GatewayUnderTest gw(config(dir.path() + "/jwks.json"));
    for (const auto* alg : {"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"}) {
        auto r = chat(gw, tokens[std::string("valid_") + alg]);
        EXPECT_EQ(r.status, 200) << alg << ": " << r.body;
    }
    // An API key still works beside them, and a token naming its audience in a list.
    EXPECT_EQ(chat(gw, "acme-key").status, 200);
    EXPECT_EQ(chat(gw, tokens["audience_list"]).status, 200);
    EXPECT_EQ(chat(gw, tokens["within_leeway"]).status, 200) << "expired 5 s ago, within the 30 s leeway";
    auto lines = gw.access_lines("/v1/chat/completions", 10);
    ASSERT_EQ(lines.size(), 10u);
    int by_token = 0;
    for (const auto& text : lines) {
        auto line = json::parse(text);
        EXPECT_EQ(line["tenant"], "acme");
        if (line["key_id"].get<std::string>().rfind("jwt-", 0) == 0) {
            ++by_token;
            EXPECT_EQ(line["subject"], "user-1") << text;
        } else {
            EXPECT_FALSE(line.contains("subject")) << "a key names no end user: " << text;
        }
    }
    EXPECT_EQ(by_token, 9);
    // /admin/explain names the subject too.
    auto explained =
        gw.admin({"POST",
                  "/admin/explain",
                  {},
                  json{{"key", tokens["valid_ES256"]}, {"body", json::parse(chat_body("m", "hi", 8, false))}}.dump()});
    ASSERT_EQ(explained.status, 200) << explained.body;
    EXPECT_EQ(json::parse(explained.body)["subject"], "user-1");
}

TEST(Jwt, TheTokensSubIsTheEndUserBeforeAnyHeader) {
    TempDir dir;
    MAKE_TOKENS(tokens, dir.path());
    // Two requests an end user, counted per subject; the header is named too, and loses to sub.
    auto cfg = with_two_requests_an_hour(config(dir.path() + "/jwks.json"), "per-user", ", per: subject");
    cfg += "  subject: { header: X-End-User }\n";
    GatewayUnderTest gw(cfg);
    auto as = [&](const std::string& token, const std::string& header_user) {
        return gw
            .request({"POST",
                      "/v1/chat/completions",
                      {{"Authorization", "Bearer " + token}, {"X-End-User", header_user}},
                      chat_body("m", "hello", 8, false)})
            .status;
    };
    EXPECT_EQ(as(tokens["valid_RS256"], "mallory"), 200);
    EXPECT_EQ(as(tokens["valid_ES256"], "trudy"), 200) << "another token, the same sub";
    EXPECT_EQ(as(tokens["valid_EdDSA"], "someone-new"), 429) << "user-1 has used its two";
    // A token without sub: the header names the end user.
    EXPECT_EQ(as(tokens["no_subject"], "mallory"), 200);
    auto lines = gw.access_lines("/v1/chat/completions", 4);
    ASSERT_EQ(lines.size(), 4u);
    std::map<std::string, int> subjects;
    for (const auto& l : lines) subjects[json::parse(l).value("subject", "-")]++;
    EXPECT_EQ(subjects["user-1"], 3);
    EXPECT_EQ(subjects["mallory"], 1);
}

TEST(Jwt, AnUnknownTenantGetsTheTierItsTokenClaims) {
    TempDir dir;
    MAKE_TOKENS(tokens, dir.path());
    GatewayUnderTest gw(with_two_requests_an_hour(config(dir.path() + "/jwks.json"), "rpm", ""));
    // initech is in no config: its token's plan (pro) gives it pro's limits, under its own id.
    std::string token = tokens["claimed_tier"];
    EXPECT_EQ(chat(gw, token).status, 200);
    EXPECT_EQ(chat(gw, token).status, 200);
    auto third = chat(gw, token);
    EXPECT_EQ(third.status, 429) << "pro's capacity of 2, charged to initech: " << third.body;
    EXPECT_EQ(chat(gw, "acme-key").status, 200) << "acme's own bucket, on the same tier";
    auto lines = gw.access_lines("/v1/chat/completions", 4);
    ASSERT_EQ(lines.size(), 4u);
    int initech = 0;  // in the order the workers wrote them
    for (const auto& line : lines) initech += json::parse(line)["tenant"] == "initech";
    EXPECT_EQ(initech, 3);
    auto explained = gw.admin({"POST",
                               "/admin/explain",
                               {},
                               json{{"key", token}, {"body", json::parse(chat_body("m", "hi", 8, false))}}.dump()});
    ASSERT_EQ(explained.status, 200) << explained.body;
    auto e = json::parse(explained.body);
    EXPECT_EQ(e["tenant"], "initech");
    EXPECT_EQ(e["limits"][0]["name"], "rpm");
}

TEST(Jwt, EveryBadTokenIsRefusedWithItsReasonAndNeverLogged) {
    TempDir dir;
    MAKE_TOKENS(tokens, dir.path());
    GatewayUnderTest gw(config(dir.path() + "/jwks.json"));
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"expired", "expired"},
        {"early", "not yet valid"},
        {"wrong_issuer", "wrong issuer"},
        {"wrong_audience", "wrong audience"},
        {"bad_signature", "bad signature"},
        {"alg_none", "alg none is refused"},
        {"hs256_public_key", "HMAC algorithms are refused"},
        {"unknown_kid", "unknown key id"},
        {"no_exp", "no exp claim"},
        {"duplicate_claim", "malformed claims"},
    };
    for (const auto& [name, reason] : cases) {
        auto r = chat(gw, tokens[name]);
        EXPECT_EQ(r.status, 401) << name << ": " << r.body;
        EXPECT_EQ(message(r), "Invalid token: " + reason + ".") << name;
        EXPECT_EQ(json::parse(r.body)["error"]["code"], "invalid_token") << name;
    }
    auto ghost = chat(gw, tokens["unknown_tenant"]);
    EXPECT_EQ(ghost.status, 403) << ghost.body;
    EXPECT_EQ(json::parse(ghost.body)["error"]["code"], "unknown_tenant");
    EXPECT_NE(message(ghost).find("tier claim names no tier"), std::string::npos) << ghost.body;
    auto tierless = chat(gw, tokens["no_tier"]);
    EXPECT_EQ(tierless.status, 403) << tierless.body;
    EXPECT_EQ(message(tierless), "The token's tenant is not known to this gateway.");
    // The log says why, and no token (nor any part of one) is anywhere in it.
    ASSERT_TRUE(gw.log_contains("Invalid token: malformed claims.")) << gw.log();
    auto lines = gw.access_lines("/v1/chat/completions", cases.size() + 2);
    EXPECT_EQ(lines.size(), cases.size() + 2);
    auto log = gw.log();
    for (const auto& [name, token] : tokens.items()) {
        std::string t = token;
        for (std::size_t at = 0, dot = 0; at < t.size(); at = dot + 1) {
            dot = t.find('.', at);
            if (dot == std::string::npos) dot = t.size();
            if (dot - at >= 16) {
                EXPECT_EQ(log.find(t.substr(at, dot - at)), std::string::npos) << name;
            }
        }
    }
}

TEST(Jwt, ARotatedJwksIsTakenOnReloadAndABadOneKeepsTheOldKeys) {
    TempDir dir;
    MAKE_TOKENS(tokens, dir.path());
    auto live = dir.path() + "/live.json";
    fs::copy_file(dir.path() + "/jwks.json", live);
    GatewayUnderTest gw(config(live));
    EXPECT_EQ(chat(gw, tokens["valid_RS256"]).status, 200);
    EXPECT_EQ(chat(gw, tokens["rotated"]).status, 401);
    // The issuer rotates: the new set replaces the file, then SIGHUP.
    fs::copy_file(dir.path() + "/rotated.json", live, fs::copy_options::overwrite_existing);
    ::kill(gw.gateway().pid(), SIGHUP);
    bool rotated = false;
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         !rotated && std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(50ms))
        rotated = chat(gw, tokens["rotated"]).status == 200;
    EXPECT_TRUE(rotated) << gw.log();
    auto old = chat(gw, tokens["valid_RS256"]);
    EXPECT_EQ(old.status, 401);
    EXPECT_EQ(message(old), "Invalid token: unknown key id.");
    // A file that is no JWKS: the reload fails, the keys it had stay.
    { std::ofstream(live, std::ios::trunc) << "{\"keys\": 42}"; }
    ::kill(gw.gateway().pid(), SIGHUP);
    EXPECT_TRUE(gw.log_contains("not a JWKS")) << gw.log();
    EXPECT_EQ(chat(gw, tokens["rotated"]).status, 200);
}

/// Process runs a path, not a name found on PATH.
std::string node_binary() {
    auto path = capture("command -v node");
    while (!path.empty() && path.back() == '\n') path.pop_back();
    return path;
}

bool eventually(const std::function<bool()>& done, std::chrono::seconds within = 10s) {
    for (auto deadline = std::chrono::steady_clock::now() + within; std::chrono::steady_clock::now() < deadline;
         std::this_thread::sleep_for(50ms))
        if (done()) return true;
    return false;
}

TEST(Jwt, AJwksUrlIsFetchedRefreshedAndKeptWhileItsServerIsDown) {
    TempDir dir;
    MAKE_TOKENS(tokens, dir.path());
    auto served = dir.path() + "/served.json";
    // The provider is down when the gateway starts: JWT callers get 503 (retryable), keys work.
    HeldPort held;  // refused while the provider is down, and no other process's meanwhile
    auto server_port = held.port();
    GatewayUnderTest gw(config("url:http://127.0.0.1:" + std::to_string(server_port) + "/jwks"));
    auto early = chat(gw, tokens["valid_ES256"]);
    EXPECT_EQ(early.status, 503) << early.body;
    EXPECT_EQ(json::parse(early.body)["error"]["code"], "jwks_unavailable");
    EXPECT_EQ(early.header("retry-after"), "1");
    EXPECT_EQ(chat(gw, "acme-key").status, 200);
    EXPECT_TRUE(gw.log_contains("cannot read the JWKS at http://127.0.0.1:" + std::to_string(server_port))) << gw.log();
    // It comes up (on the port the config names): the keys are fetched within a retry.
    fs::copy_file(dir.path() + "/jwks.json", served);
    auto script = (fs::path(TOKENGATE_SOURCE_DIR) / "tests/sdk/jwks_server.mjs").string();
    Process server({node_binary(), script, std::to_string(server_port), served}, dir.path() + "/jwks-server.log");
    ASSERT_TRUE(wait_for_port(server_port));
    EXPECT_TRUE(eventually([&] { return chat(gw, tokens["valid_ES256"]).status == 200; }, 20s)) << gw.log();
    EXPECT_TRUE(gw.log_contains("is readable again")) << gw.log();
    // The provider rotates its keys: within a refresh the new key works and the old is gone.
    EXPECT_EQ(chat(gw, tokens["rotated"]).status, 401);
    fs::copy_file(dir.path() + "/rotated.json", served, fs::copy_options::overwrite_existing);
    EXPECT_TRUE(eventually([&] { return chat(gw, tokens["rotated"]).status == 200; })) << gw.log();
    EXPECT_EQ(message(chat(gw, tokens["valid_ES256"])), "Invalid token: unknown key id.");
    // It goes down again, then serves garbage: the keys fetched last stay.
    server.stop(SIGKILL);
    std::this_thread::sleep_for(2500ms);  // two refreshes
    EXPECT_EQ(chat(gw, tokens["rotated"]).status, 200);
    { std::ofstream(served, std::ios::trunc) << R"({"keys":[{"kty":"oct","k":"c2VjcmV0"}]})"; }
    Process again({node_binary(), script, std::to_string(server_port), served}, dir.path() + "/jwks-server.log");
    ASSERT_TRUE(wait_for_port(server_port));
    EXPECT_TRUE(gw.log_contains("holds no usable signing key")) << gw.log();
    EXPECT_EQ(chat(gw, tokens["rotated"]).status, 200);
}

TEST(Jwt, AConfigWithAnUnusableJwksIsRefusedAtItsLine) {
    TempDir dir;
    auto jwks = dir.path() + "/jwks.json";
    { std::ofstream(jwks) << R"({"keys":[{"kty":"oct","kid":"s","k":"c2VjcmV0"}]})"; }
    auto cfg = dir.path() + "/gateway.yaml";
    {
        std::ofstream(cfg)
            << "server: { listen: 127.0.0.1:1 }\nupstreams:\n  - { name: mock, url: http://127.0.0.1:1 }\n"
            << config(jwks);
    }
    auto out = capture(std::string(gateway_binary()) + " check -c '" + cfg + "' 2>&1");
    EXPECT_NE(out.find("holds no usable signing key (key 's': kty oct cannot verify"), std::string::npos) << out;
    EXPECT_NE(out.find("gateway.yaml:"), std::string::npos) << out;
}

}  // namespace
}  // namespace tokengate::testing
