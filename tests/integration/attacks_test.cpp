// Attacks from issue 14, through the binary: raw client sockets, and a raw upstream that
// misbehaves on purpose. Each test failed on the build before that issue's fixes.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.hpp"
#include "scripted_upstream.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

const std::pair<std::string, std::string> k_auth = {"Authorization", "Bearer k1"};

std::string chat_with_max_tokens(const std::string& max_tokens) {
    return R"({"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":)" + max_tokens + "}";
}

int status_of(const std::string& raw) { return raw.rfind("HTTP/1.1 ", 0) == 0 ? std::stoi(raw.substr(9, 3)) : 0; }

// --- 1. Limiter overflow -------------------------------------------------------------------

const std::string k_tight_tokens = R"(
routes:
  - { path: /v1/chat/completions, upstreams: [mock] }
tiers:
  t:
    limits:
      - { name: tokens, algorithm: token_bucket, capacity: 50, rate: 0.5/s, unit: cost }
tenants:
  - { id: acme, tier: t, keys: ["k1"] }
)";

TEST(Attacks, MaxTokensOf2To64CannotEraseDebt) {
    GatewayUnderTest gw(k_tight_tokens, "", 1e6);
    // 1 input + 48 output units, and the upstream really generates them: 1 unit left.
    auto spend = gw.request(Request{
        "POST", "/v1/chat/completions", {k_auth, {"x-mock-completion-tokens", "2400"}}, chat_with_max_tokens("2400")});
    ASSERT_EQ(spend.status, 200) << spend.body;
    ASSERT_TRUE(gw.wait_settled(1));
    auto huge =
        gw.request(Request{"POST", "/v1/chat/completions", {k_auth}, chat_with_max_tokens("18446744073709551615")});
    EXPECT_EQ(huge.status, 429) << huge.body;
    EXPECT_EQ(json::parse(huge.body)["error"]["code"], "request_too_large_for_limit");
    EXPECT_TRUE(huge.header("retry-after").empty()) << "it can never pass";
    // The debt is still there: an ordinary request (11 units) is refused.
    auto next = gw.request(Request{"POST", "/v1/chat/completions", {k_auth}, chat_with_max_tokens("500")});
    EXPECT_EQ(next.status, 429) << next.body;
    EXPECT_EQ(json::parse(next.body)["error"]["code"], "rate_limit_exceeded");

    json in = {{"key", "k1"}, {"body", json::parse(chat_with_max_tokens("18446744073709551615"))}};
    auto explained = json::parse(gw.admin(Request{"POST", "/admin/explain", {}, in.dump()}).body);
    EXPECT_FALSE(explained["allowed"].get<bool>()) << explained.dump();
    for (const auto& l : explained["limits"]) EXPECT_GE(l["reset_s"].get<double>(), 0) << explained.dump();
}

TEST(Attacks, AWideLimitAdmitsOrdinaryRequests) {
    // capacity 1e10 at 1/s: 317 years to fill, past an int64 of nanoseconds.
    GatewayUnderTest gw(R"(
routes:
  - { path: /v1/chat/completions, upstreams: [mock] }
tiers:
  t:
    limits:
      - { name: tokens, algorithm: token_bucket, capacity: 10000000000, rate: 1/s, unit: cost }
tenants:
  - { id: acme, tier: t, keys: ["k1"] }
)");
    for (int i = 0; i < 3; ++i) {
        auto r = gw.request(Request{"POST", "/v1/chat/completions", {k_auth}, chat_with_max_tokens("100")});
        EXPECT_EQ(r.status, 200) << r.body;
        EXPECT_EQ(r.header("x-ratelimit-limit-tokens"), "10000000000");
    }
}

TEST(Attacks, CheckRefusesLimitsBeyondTheLimitersRange) {
    TempDir dir;
    int i = 0;
    for (const std::string limit : {"capacity: 10000000000000000, rate: 1/s", "capacity: 10, rate: 10000000000000/s"}) {
        auto out = dir.path() + "/out" + std::to_string(i++) + ".txt";
        std::ofstream(dir.path() + "/bad.yaml") << "upstreams:\n  - { name: u, url: http://127.0.0.1:1 }\nroutes:\n"
                                                   "  - { path: /v1/x, upstreams: [u] }\ntenants: []\n"
                                                   "global_limits:\n  - { name: g, algorithm: token_bucket, " +
                                                       limit + " }\n";
        Process check({gateway_binary(), "check", "-c", dir.path() + "/bad.yaml"}, out);
        EXPECT_EQ(check.wait(10s), 1) << limit;
        EXPECT_NE(read_file(out).find("bad.yaml:7:"), std::string::npos) << read_file(out);
        EXPECT_NE(read_file(out).find("supported"), std::string::npos) << read_file(out);
    }
}

// --- 2. Request smuggling ------------------------------------------------------------------

TEST(Attacks, ABodyWhoseEndIsUnknownIsRefusedNotSmuggled) {
    ScriptedUpstream up([](const std::string& head, const std::string&) {
        return ScriptedUpstream::Reply{http_ok("for:" + target_of(head))};
    });
    GatewayUnderTest gw(
        "routes:\n  - { path_prefix: /raw/, upstreams: [scripted] }\ntenants:\n  - { id: acme, keys: [\"k1\"] }\n", "",
        1000, up.yaml());
    const std::string smuggled = "GET /raw/SMUGGLED HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n\r\n";
    for (const std::string te : {"Transfer-Encoding: gzip\r\n", "Transfer-Encoding: chunked, identity\r\n",
                                 "Transfer-Encoding: identity\r\n chunked\r\n", "Transfer-Encoding:\r\n chunked\r\n",
                                 "Transfer-Encoding: gzip, chunked\r\n"}) {
        RawClient c(gw.port());
        ASSERT_TRUE(c.send_all("POST /raw/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n" + te + "\r\n" +
                               std::to_string(smuggled.size()) + "\r\n" + smuggled + "\r\n0\r\n\r\n"));
        auto reply = c.read_some(5s, "\r\n\r\n");
        int status = status_of(reply);
        EXPECT_TRUE(status == 400 || status == 501) << te << reply;
        EXPECT_TRUE(c.wait_closed(5s)) << te << ": the connection is closed after a framing error";
    }
    for (const auto& head : up.heads()) EXPECT_EQ(head.find("SMUGGLED"), std::string::npos) << head;
    EXPECT_TRUE(up.heads().empty()) << "nothing was forwarded";
}

TEST(Attacks, HostMustAppearOnceInHttp11) {
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/models, upstreams: [mock] }\ntenants:\n  - { id: acme, keys: [\"k1\"] }\n");
    for (const std::string hosts : {"", "Host: a\r\nHost: b\r\n"}) {
        RawClient c(gw.port());
        ASSERT_TRUE(c.send_all("GET /v1/models HTTP/1.1\r\n" + hosts + "Authorization: Bearer k1\r\n\r\n"));
        EXPECT_EQ(status_of(c.read_some(5s, "\r\n\r\n")), 400) << hosts;
    }
    RawClient ok(gw.port());
    ASSERT_TRUE(ok.send_all("GET /v1/models HTTP/1.0\r\nAuthorization: Bearer k1\r\n\r\n"));
    EXPECT_EQ(status_of(ok.read_some(5s, "\r\n\r\n").replace(5, 3, "1.1")), 200) << "HTTP/1.0 needs no Host";
}

TEST(Attacks, ChunkedTrailerFieldsAreNotForwardedAsHeaders) {
    ScriptedUpstream up([](const std::string& head, const std::string&) {
        return ScriptedUpstream::Reply{http_ok("for:" + target_of(head))};
    });
    GatewayUnderTest gw(
        "routes:\n  - { path_prefix: /raw/, upstreams: [scripted] }\ntenants:\n  - { id: acme, keys: [\"k1\"] }\n", "",
        1000, up.yaml());
    RawClient c(gw.port());
    ASSERT_TRUE(
        c.send_all("POST /raw/t HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "2\r\n{}\r\n0\r\nX-Evil: 1\r\nX-Api-Key: other\r\n\r\n"));
    auto reply = c.read_some(5s, "for:/raw/t");
    EXPECT_EQ(status_of(reply), 200) << reply;
    ASSERT_EQ(up.heads().size(), 1u);
    EXPECT_EQ(up.heads()[0].find("X-Evil"), std::string::npos) << up.heads()[0];
    EXPECT_NE(up.heads()[0].find("Content-Length: 2"), std::string::npos) << up.heads()[0];
}

// --- 3. Upstream response desync -----------------------------------------------------------

const std::string k_two_tenants =
    "routes:\n  - { path_prefix: /raw/, upstreams: [scripted] }\n"
    "tenants:\n  - { id: alice, keys: [\"ka\"] }\n  - { id: bob, keys: [\"kb\"] }\n";

TEST(Attacks, BytesAfterAResponseNeverReachTheNextRequest) {
    // Alice's upstream answer is followed, 100 ms later, by a second response nobody asked for.
    ScriptedUpstream up([](const std::string& head, const std::string&) {
        ScriptedUpstream::Reply r{http_ok("for:" + target_of(head))};
        if (head.find("/raw/alice") != std::string::npos) {
            r.later = http_ok("POISON meant for nobody");
            r.later_ms = 100;
        }
        return r;
    });
    GatewayUnderTest gw(k_two_tenants, "", 1000, up.yaml());
    for (int round = 0; round < 10; ++round) {
        auto a =
            gw.request(Request{"POST", "/raw/alice" + std::to_string(round), {{"Authorization", "Bearer ka"}}, "{}"});
        EXPECT_EQ(a.body, "for:/raw/alice" + std::to_string(round));
        std::this_thread::sleep_for(150ms);  // the late bytes are in the pooled connection now
        auto b =
            gw.request(Request{"POST", "/raw/bob" + std::to_string(round), {{"Authorization", "Bearer kb"}}, "{}"});
        EXPECT_EQ(b.status, 200) << "round " << round;
        EXPECT_EQ(b.body, "for:/raw/bob" + std::to_string(round)) << "round " << round;
    }
}

TEST(Attacks, InterimResponsesAreNotFinal) {
    ScriptedUpstream up([](const std::string& head, const std::string&) {
        return ScriptedUpstream::Reply{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" +
                                       http_ok("for:" + target_of(head))};
    });
    GatewayUnderTest gw(k_two_tenants, "", 1000, up.yaml());
    for (int i = 0; i < 3; ++i) {
        auto r = gw.request(Request{"POST", "/raw/n" + std::to_string(i), {{"Authorization", "Bearer ka"}}, "{}"});
        EXPECT_EQ(r.status, 200) << i;
        EXPECT_EQ(r.body, "for:/raw/n" + std::to_string(i)) << i;
    }
    EXPECT_TRUE(gw.log_contains("\"status\":200"));
    EXPECT_EQ(gw.log().find("\"status\":100"), std::string::npos);
    EXPECT_EQ(gw.log().find("\"status\":103"), std::string::npos);
}

TEST(Attacks, AChunkedResponseDrippedByteByByteIsRelayed) {
    // Beast 1.81 asserted on a last chunk re-parsed from 4 bytes: this aborted a build with
    // assertions (the ASan one) until the relay fed its parser through wire::put_buffered.
    ScriptedUpstream up([](const std::string&, const std::string&) {
        return ScriptedUpstream::Reply{
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
            "2\r\nok\r\n0\r\nX-Trailer: 1\r\n\r\n",
            "", 0, true};
    });
    GatewayUnderTest gw(k_two_tenants, "", 1000, up.yaml());
    auto r = gw.request(Request{"POST", "/raw/drip", {{"Authorization", "Bearer ka"}}, "{}"});
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "ok");
    EXPECT_EQ(gw.request(Request{"POST", "/raw/again", {{"Authorization", "Bearer ka"}}, "{}"}).body, "ok");
}

TEST(Attacks, EndlessInterimResponsesAre502) {
    std::string flood;
    for (int i = 0; i < 20; ++i) flood += "HTTP/1.1 103 Early Hints\r\n\r\n";
    ScriptedUpstream up([&](const std::string&, const std::string&) { return ScriptedUpstream::Reply{flood}; });
    GatewayUnderTest gw(k_two_tenants, "", 1000, up.yaml());
    auto r = gw.request(Request{"POST", "/raw/x", {{"Authorization", "Bearer ka"}}, "{}"});
    EXPECT_EQ(r.status, 502) << r.body;
}

// --- 4. Metric label bombs ------------------------------------------------------------------

TEST(Attacks, HugeModelNamesCannotInflateMetrics) {
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\ntenants:\n  - { id: acme, keys: [\"k1\"] }\n",
        "", 1e6);
    for (int i = 0; i < 150; ++i) {
        std::string model = std::to_string(i) + std::string(200 * 1024, 'm');  // 150 distinct names
        auto r = gw.request(Request{"POST", "/v1/chat/completions", {k_auth}, chat_body(model, "hi", 1, false)});
        ASSERT_EQ(r.status, 200) << i << r.body.substr(0, 200);
    }
    auto metrics = gw.metrics_after(150);
    EXPECT_LT(metrics.size(), 256u * 1024) << "was 60 MB: every label carried the whole name";
    EXPECT_NE(metrics.find("model=\"_other\""), std::string::npos)
        << "past 64 models a tenant's tokens share one series";
    std::size_t series = 0;
    for (auto at = metrics.find("\ntokengate_tokens_total{"); at != std::string::npos;
         at = metrics.find("\ntokengate_tokens_total{", at + 1))
        ++series;
    EXPECT_LE(series, 2u * 65) << "64 models and _other, prompt and completion each";
}

// --- 5. Path tricks ---------------------------------------------------------------------------

TEST(Attacks, EverySpellingOfARoutedPathMeetsItsLimit) {
    ScriptedUpstream up([](const std::string& head, const std::string&) {
        return ScriptedUpstream::Reply{http_ok("for:" + target_of(head))};
    });
    GatewayUnderTest gw(R"(
routes:
  - path: /v1/chat/completions
    upstreams: [scripted]
    limits: [ { name: chat-rps, algorithm: token_bucket, capacity: 1, rate: 0.001/s } ]
  - { path_prefix: /v1/, upstreams: [scripted] }
tenants:
  - { id: acme, keys: ["k1"] }
)",
                        "", 1000, up.yaml());
    auto first = gw.request(Request{"POST", "/v1/chat/completions?trace=1", {k_auth}, "{}"});
    ASSERT_EQ(first.status, 200) << first.body;
    EXPECT_EQ(first.body, "for:/v1/chat/completions?trace=1");
    for (const std::string path :
         {"/v1/%63hat/completions", "/v1/./chat/completions", "/v1//chat/completions", "/v1/chat/completions/",
          "/v1/chat/completions;x", "/v1/x/../chat/completions", "/v1/%2e/chat/completions"}) {
        auto r = gw.request(Request{"POST", path, {k_auth}, "{}"});
        EXPECT_EQ(r.status, 429) << path << ": the exact route's limit applies";
        EXPECT_EQ(r.header("x-ratelimit-limit"), "1") << path;
    }
    for (const std::string path :
         {"/v1/chat%2Fcompletions", "/v1/chat/completions%00", "/v1/chat/completions%20", "/v1/a%5Cb"}) {
        auto r = gw.request(Request{"POST", path, {k_auth}, "{}"});
        EXPECT_EQ(r.status, 400) << path;
        EXPECT_EQ(json::parse(r.body)["error"]["code"], "invalid_path") << path;
    }
    // Another path under the prefix route is forwarded in its normalised spelling.
    auto other = gw.request(Request{"POST", "/v1//%65mbeddings/./", {k_auth}, "{}"});
    EXPECT_EQ(other.status, 200);
    EXPECT_EQ(other.body, "for:/v1/embeddings");
    for (const auto& head : up.heads()) EXPECT_EQ(target_of(head).find("//"), std::string::npos) << head;
}

// --- 6. Smaller ones ---------------------------------------------------------------------------

TEST(Attacks, ForwardedForAddressesAreNormalisedBeforeBucketing) {
    GatewayUnderTest gw(R"(
routes:
  - { path: /v1/chat/completions, upstreams: [mock] }
tenants:
  - { id: acme, keys: ["k1"] }
ip_limits:
  - { name: per-ip, algorithm: token_bucket, capacity: 1, rate: 0.001/s }
)",
                        "  trusted_proxies: [127.0.0.1/32]\n");
    auto first = gw.request(Request{"POST",
                                    "/v1/chat/completions",
                                    {k_auth, {"X-Forwarded-For", "::ffff:1.2.3.4"}},
                                    chat_body("m", "hi", 1, false)});
    EXPECT_EQ(first.status, 200) << first.body;
    for (const std::string spelling : {"1.2.3.4", "0:0:0:0:0:ffff:102:304", "::FFFF:1.2.3.4"}) {
        auto r = gw.request(Request{
            "POST", "/v1/chat/completions", {k_auth, {"X-Forwarded-For", spelling}}, chat_body("m", "hi", 1, false)});
        EXPECT_EQ(r.status, 429) << spelling << ": the same client, the same bucket";
    }
}

TEST(Attacks, AnUntrustedClientCannotClaimAnAddressUpstream) {
    ScriptedUpstream up([](const std::string& head, const std::string&) {
        return ScriptedUpstream::Reply{http_ok("for:" + target_of(head))};
    });
    GatewayUnderTest gw(
        "routes:\n  - { path_prefix: /raw/, upstreams: [scripted] }\ntenants:\n  - { id: acme, keys: [\"k1\"] }\n", "",
        1000, up.yaml());
    auto r =
        gw.request(Request{"POST", "/raw/x", {k_auth, {"X-Real-IP", "6.6.6.6"}, {"Forwarded", "for=6.6.6.6"}}, "{}"});
    ASSERT_EQ(r.status, 200);
    auto heads = up.heads();
    ASSERT_EQ(heads.size(), 1u);
    const auto& head = heads[0];
    EXPECT_EQ(head.find("6.6.6.6"), std::string::npos) << head;
    EXPECT_NE(head.find("X-Real-IP: 127.0.0.1\r\n"), std::string::npos) << head;
}

TEST(Attacks, DiagnosticsGoToStderrNotTheAccessLog) {
    TempDir dir;
    auto port = free_port();
    auto admin_port = free_port();  // not the default 9090, which a running demo may hold
    auto write_config = [&](const std::string& extra) {
        std::ofstream(dir.path() + "/gw.yaml")
            << "server:\n  listen: 127.0.0.1:" << port << "\nadmin:\n  listen: 127.0.0.1:" << admin_port
            << "\nupstreams:\n  - { name: u, url: http://127.0.0.1:1 }\nroutes:\n"
               "  - { path: /v1/x, upstreams: [u] }\ntenants: []\n"
            << extra;
    };
    write_config("");
    Process gw({gateway_binary(), "serve", "-c", dir.path() + "/gw.yaml"}, dir.path() + "/stdout.txt",
               dir.path() + "/stderr.txt");
    ASSERT_TRUE(wait_for_output(gw, dir.path() + "/stderr.txt", "listening on"))
        << read_file(dir.path() + "/stderr.txt");
    write_config("bogus_key: 1\n");
    ::kill(gw.pid(), SIGHUP);
    ASSERT_TRUE(wait_for_output(gw, dir.path() + "/stderr.txt", "reload")) << read_file(dir.path() + "/stdout.txt");
    send_request(port, Request{"GET", "/v1/x", {}, ""});  // one access line (401) on stdout
    EXPECT_EQ(gw.stop(SIGTERM), 0);
    auto out = read_file(dir.path() + "/stdout.txt");
    std::istringstream lines(out);
    std::string line;
    int count = 0;
    while (std::getline(lines, line)) {
        ++count;
        EXPECT_TRUE(json::accept(line)) << "stdout holds only access lines: " << line;
    }
    EXPECT_EQ(count, 1) << out;
}

TEST(Attacks, AdminAcceptsAnyCaseOfBearerAndAnswersAnOversizedBodyWith413) {
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\ntenants:\n  - { id: acme, keys: [\"k1\"] }\n");
    for (const std::string scheme : {"Bearer ", "bearer ", "BEARER "}) {
        auto r = send_request(
            gw.admin_port(),
            Request{"GET", "/admin/tenants/acme", {{"Authorization", scheme + GatewayUnderTest::admin_token}}, ""});
        EXPECT_EQ(r.status, 200) << scheme;
    }
    auto big = gw.admin(Request{"POST", "/admin/explain", {}, std::string(2 * 1024 * 1024, ' ')});
    EXPECT_EQ(big.status, 413);
    EXPECT_EQ(json::parse(big.body)["error"]["code"], "request_too_large");
}

}  // namespace
}  // namespace tokengate::testing
