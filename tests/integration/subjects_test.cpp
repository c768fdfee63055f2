// SPEC §21's end users through the binary: `per: subject` limits keyed by a header, the body's
// `user`, or nothing (the "(none)" subject); the bound on subjects a tenant; the subject in the
// access log and /admin/explain and never in a metric. (A JWT's `sub`: jwt_test.cpp.)

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using nlohmann::json;

const std::string k_config =
    "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
    "tiers:\n"
    "  pro:\n"
    "    limits:\n"
    "      - { name: per-user, algorithm: token_bucket, capacity: 2, rate: 1/h, unit: requests, per: subject }\n"
    "      - { name: tenant-rpm, algorithm: token_bucket, capacity: 1000, rate: 1000/min, unit: requests }\n"
    "tenants:\n  - { id: acme, tier: pro, keys: [\"acme-key\"] }\n"
    "auth:\n  subject: { header: X-End-User, body_field: user, max_per_tenant: 3 }\n";

Response chat(const GatewayUnderTest& gw, const std::string& header_user, const std::string& body_user = "") {
    json body = json::parse(chat_body("m", "hello", 8, false));
    if (!body_user.empty()) body["user"] = body_user;
    std::vector<std::pair<std::string, std::string>> headers = {{"Authorization", "Bearer acme-key"},
                                                                {"Content-Type", "application/json"}};
    if (!header_user.empty()) headers.emplace_back("X-End-User", header_user);
    return gw.request({"POST", "/v1/chat/completions", headers, body.dump()});
}

std::vector<int> statuses(const GatewayUnderTest& gw, int n, const std::string& header_user,
                          const std::string& body_user = "") {
    std::vector<int> out;
    for (int i = 0; i < n; ++i) out.push_back(chat(gw, header_user, body_user).status);
    return out;
}

TEST(Subjects, EachEndUserHasItsOwnBucketFromAHeaderTheBodyOrNone) {
    GatewayUnderTest gw(k_config);
    EXPECT_EQ(statuses(gw, 3, "alice"), (std::vector<int>{200, 200, 429}));
    auto refused = chat(gw, "alice");
    EXPECT_EQ(refused.status, 429);
    EXPECT_NE(refused.body.find("per-user"), std::string::npos) << refused.body;
    EXPECT_EQ(statuses(gw, 3, "", "bob"), (std::vector<int>{200, 200, 429})) << "the body's user";
    // A header names the user before the body does.
    EXPECT_EQ(chat(gw, "carol", "bob").status, 200);
    // Nobody named: one shared "(none)" subject.
    EXPECT_EQ(statuses(gw, 3, ""), (std::vector<int>{200, 200, 429}));
    // An id too long to be one is refused, not cut to collide with another.
    auto long_id = chat(gw, std::string(300, 'x'));
    EXPECT_EQ(long_id.status, 400);
    EXPECT_EQ(json::parse(long_id.body)["error"]["code"], "invalid_subject");

    auto lines = gw.access_lines("/v1/chat/completions", 12);
    std::map<std::string, int> by_subject;
    for (const auto& text : lines) {
        auto line = json::parse(text);
        by_subject[line.value("subject", std::string("-"))]++;
        if (line.value("status", 0) == 429) {
            EXPECT_EQ(line["rejected_by"], "tenant:per-user") << text;
        }
    }
    EXPECT_EQ(by_subject["alice"], 4);
    EXPECT_EQ(by_subject["bob"], 3);
    EXPECT_EQ(by_subject["carol"], 1);
    EXPECT_EQ(by_subject["-"], 3) << "no subject named: none in the line";
    // Never a metric label.
    auto metrics = gw.metrics_after(12);
    for (const auto* who : {"alice", "bob", "carol", "(none)"}) EXPECT_EQ(metrics.find(who), std::string::npos) << who;
    // /admin/explain names it, from the body as the data plane reads it.
    json body = json::parse(chat_body("m", "hi", 8, false));
    body["user"] = "dave";
    auto explained = gw.admin({"POST", "/admin/explain", {}, json{{"key", "acme-key"}, {"body", body}}.dump()});
    ASSERT_EQ(explained.status, 200) << explained.body;
    auto e = json::parse(explained.body);
    EXPECT_EQ(e["subject"], "dave");
    bool shown = false;
    for (const auto& l : e["limits"])
        if (l.value("name", "") == "per-user") shown = true;
    EXPECT_TRUE(shown) << explained.body;
}

TEST(Subjects, ATenantKeepsItsMostRecentSubjectsOnly) {
    GatewayUnderTest gw(k_config);  // max_per_tenant: 3
    EXPECT_EQ(statuses(gw, 3, "u1"), (std::vector<int>{200, 200, 429}));
    EXPECT_EQ(chat(gw, "u2").status, 200);
    EXPECT_EQ(chat(gw, "u3").status, 200);
    EXPECT_EQ(chat(gw, "u1").status, 429) << "still kept: u1, u2, u3";
    // A fourth pushes out the least recently seen (u2), not u1 whose refusal was just now.
    EXPECT_EQ(chat(gw, "u4").status, 200);
    EXPECT_EQ(statuses(gw, 2, "u2"), (std::vector<int>{200, 200})) << "u2 was forgotten: a fresh bucket";
    // u2's return pushed out u3; u1 was seen before u4 and goes next.
    EXPECT_EQ(chat(gw, "u5").status, 200);
    EXPECT_EQ(statuses(gw, 3, "u1"), (std::vector<int>{200, 200, 429}));
}

}  // namespace
}  // namespace tokengate::testing
