#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "harness.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include "tokengate/core/sha256.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using steady = std::chrono::steady_clock;

const std::string k_key = "test-key-1";
const std::pair<std::string, std::string> k_auth = {"Authorization", "Bearer " + k_key};

const std::string k_basic = R"(
routes:
  - { path: /v1/chat/completions, upstreams: [mock] }
  - { path: /v1/completions, upstreams: [mock] }
  - { path: /v1/models, upstreams: [mock] }
  - { path: /dead/v1/chat/completions, upstreams: [dead] }
tiers:
  small:
    limits:
      - { name: requests, algorithm: token_bucket, capacity: 3, rate: 0.1/s }
  big:
    limits:
      - { name: requests, algorithm: token_bucket, capacity: 1000, rate: 100/s }
tenants:
  - { id: limited, tier: small, keys: ["limited-key"] }
  - { id: acme, tier: big, keys: ["test-key-1"] }
)";

Request chat(const std::string& body, std::vector<std::pair<std::string, std::string>> headers = {k_auth}) {
    return Request{"POST", "/v1/chat/completions", std::move(headers), body};
}

TEST(Gateway, ProxiesJsonWithRateLimitHeaders) {
    GatewayUnderTest gw(k_basic);
    auto r = gw.request(chat(chat_body("llama3-8b", "Hello there", 5, false)));
    ASSERT_EQ(r.status, 200) << r.body << gw.log();
    auto body = json::parse(r.body);
    EXPECT_EQ(body["object"], "chat.completion");
    EXPECT_EQ(body["usage"]["completion_tokens"], 5);
    EXPECT_EQ(body["choices"][0]["message"]["content"], "The quick brown fox jumps");
    EXPECT_EQ(r.header("x-ratelimit-limit"), "1000");
    EXPECT_EQ(r.header("x-ratelimit-remaining"), "999");
    EXPECT_EQ(r.header("x-ratelimit-limit-requests"), "1000");
    EXPECT_EQ(r.header("x-ratelimit-remaining-requests"), "999");
    EXPECT_EQ(r.header("x-ratelimit-reset-requests"), "10ms");
    EXPECT_FALSE(r.header("x-ratelimit-reset").empty());
    EXPECT_EQ(r.header("x-request-id").size(), 32u);
    EXPECT_EQ(r.header("content-type"), "application/json");
}

TEST(Gateway, ApiKeyHeaderAndKeepAlive) {
    GatewayUnderTest gw(k_basic);
    RawClient c(gw.port());
    std::string req = "GET /v1/models HTTP/1.1\r\nHost: x\r\nx-api-key: test-key-1\r\n\r\n";
    ASSERT_TRUE(c.send_all(req));
    auto first = c.read_some(5s, "mock-model");
    EXPECT_NE(first.find("HTTP/1.1 200"), std::string::npos) << first;
    ASSERT_TRUE(c.send_all(req)) << "the connection stays open";
    auto second = c.read_some(5s, "mock-model");
    EXPECT_NE(second.find("HTTP/1.1 200"), std::string::npos) << second;
}

TEST(Gateway, StreamsSseInOrderBeforeTheUpstreamFinishes) {
    GatewayUnderTest gw(k_basic, "", /*mock tokens/s*/ 20);
    RawClient c(gw.port());
    auto body = chat_body("llama3-8b", "Hello", 20, true);
    ASSERT_TRUE(c.send_all(raw_post("/v1/chat/completions", "test-key-1", body)));
    auto start = steady::now();
    auto head = c.read_some(10s, "\"The\"");
    auto first_token_at = steady::now() - start;
    ASSERT_NE(head.find("HTTP/1.1 200"), std::string::npos) << head;
    EXPECT_NE(head.find("text/event-stream"), std::string::npos);
    EXPECT_NE(head.find("x-ratelimit-remaining-requests: 999"), std::string::npos) << head;
    auto rest = c.read_some(20s, "0\r\n\r\n");
    auto done_at = steady::now() - start;
    auto all = head + rest;
    // 20 tokens at 20/s take about a second upstream; the first must not wait for the last.
    EXPECT_LT(first_token_at, done_at - 500ms);
    std::vector<std::string> words = {"\"The\"", "\" quick\"", "\" brown\"", "\" fox\"", "\" jumps\"", "[DONE]"};
    std::size_t pos = 0;
    for (const auto& w : words) {
        auto at = all.find(w, pos);
        ASSERT_NE(at, std::string::npos) << w << " missing or out of order in " << all;
        pos = at;
    }
}

TEST(Gateway, MissingOrUnknownKeyIs401EvenOnUnknownPath) {
    GatewayUnderTest gw(k_basic);
    auto none = gw.request(chat(chat_body("m", "x", 1, false), {}));
    EXPECT_EQ(none.status, 401);
    auto err = json::parse(none.body)["error"];
    EXPECT_EQ(err["code"], "invalid_api_key");
    EXPECT_EQ(err["type"], "invalid_request_error");
    EXPECT_TRUE(err["param"].is_null());
    auto wrong = gw.request(chat(chat_body("m", "x", 1, false), {{"Authorization", "Bearer nope"}}));
    EXPECT_EQ(wrong.status, 401);
    EXPECT_EQ(gw.request(Request{"GET", "/nowhere", {}, ""}).status, 401);
    auto not_found = gw.request(Request{"GET", "/nowhere", {k_auth}, ""});
    EXPECT_EQ(not_found.status, 404);
    EXPECT_EQ(json::parse(not_found.body)["error"]["code"], "not_found");
    ASSERT_TRUE(gw.log_contains("\"status\":404"));
    EXPECT_EQ(gw.log().find("test-key-1"), std::string::npos) << "keys are never logged";
}

TEST(Gateway, RateLimitedAfterCapacityWithRetryAfter) {
    GatewayUnderTest gw(k_basic);
    auto req = chat(chat_body("llama3-8b", "x", 1, false), {{"Authorization", "Bearer limited-key"}});
    for (int i = 0; i < 3; ++i) {
        auto ok = gw.request(req);
        ASSERT_EQ(ok.status, 200) << i << ok.body;
        EXPECT_EQ(ok.header("x-ratelimit-remaining-requests"), std::to_string(2 - i));
    }
    auto refused = gw.request(req);
    ASSERT_EQ(refused.status, 429);
    auto err = json::parse(refused.body)["error"];
    EXPECT_EQ(err["code"], "rate_limit_exceeded");
    EXPECT_EQ(err["type"], "requests");
    // One request per 10 s refills; the three requests took well under a second.
    auto retry = std::stoi(refused.header("retry-after"));
    EXPECT_GE(retry, 9);
    EXPECT_LE(retry, 10);
    // The exact wait in milliseconds, within the whole seconds Retry-After rounds up to.
    auto retry_ms = std::stol(refused.header("retry-after-ms"));
    EXPECT_GT(retry_ms, (retry - 1) * 1000L);
    EXPECT_LE(retry_ms, retry * 1000L);
    EXPECT_EQ(refused.header("x-ratelimit-remaining-requests"), "0");
    EXPECT_EQ(refused.header("x-ratelimit-limit-requests"), "3");
    EXPECT_EQ(refused.header("ratelimit-policy"), "\"requests\";q=3;w=30");
    EXPECT_FALSE(refused.header("x-ratelimit-reset").empty());
    auto other = gw.request(chat(chat_body("llama3-8b", "x", 1, false)));
    EXPECT_EQ(other.status, 200) << "another tenant is unaffected";
}

TEST(Gateway, UpstreamDownIs502) {
    GatewayUnderTest gw(k_basic);
    auto r = gw.request(Request{"POST", "/dead/v1/chat/completions", {k_auth}, chat_body("m", "x", 1, false)});
    EXPECT_EQ(r.status, 502) << r.body;
    EXPECT_EQ(json::parse(r.body)["error"]["code"], "upstream_unavailable");
    EXPECT_EQ(r.header("x-ratelimit-limit-requests"), "1000") << "an admitted request carries its headers";
}

TEST(Gateway, SlowUpstreamIs504) {
    GatewayUnderTest gw(k_basic, "", 1000, "    timeouts: { first_byte: 300ms }\n");
    auto req = chat(chat_body("m", "x", 1, false), {k_auth, {"x-mock-delay-ms", "5000"}});
    auto start = steady::now();
    auto r = gw.request(req);
    EXPECT_EQ(r.status, 504) << r.body;
    EXPECT_EQ(json::parse(r.body)["error"]["code"], "upstream_timeout");
    EXPECT_LT(steady::now() - start, 4s);
}

TEST(Gateway, AReloadedUpstreamTimeoutAppliesToTheConnectionsItKeeps) {
    // One worker: every request meets the pool the first one made.
    GatewayUnderTest gw(k_basic, "  threads: 1\n", 1000, "    timeouts: { first_byte: 300ms }\n");
    auto slow = chat(chat_body("m", "x", 1, false), {k_auth, {"x-mock-delay-ms", "1000"}});
    ASSERT_EQ(gw.request(chat(chat_body("m", "x", 1, false), {k_auth})).status, 200);  // a pooled connection
    EXPECT_EQ(gw.request(slow).status, 504);
    ASSERT_EQ(gw.request(chat(chat_body("m", "x", 1, false), {k_auth})).status, 200);
    auto path = gw.dir() + "/gateway.yaml";
    auto yaml = read_file(path);
    auto at = yaml.find("first_byte: 300ms");
    ASSERT_NE(at, std::string::npos) << yaml;
    yaml.replace(at, 17, "first_byte: 10s");
    std::ofstream(path + ".tmp") << yaml;
    std::rename((path + ".tmp").c_str(), path.c_str());
    ASSERT_EQ(gw.admin(Request{"POST", "/admin/reload", {}, ""}).status, 200);
    auto r = gw.request(slow);
    EXPECT_EQ(r.status, 200) << "the reload's 10 s applies, not the 300 ms it replaced: " << r.body;
}

TEST(Gateway, UpstreamErrorsAreRelayedAsTheyAre) {
    GatewayUnderTest gw(k_basic);
    auto r = gw.request(chat(chat_body("m", "x", 1, false), {k_auth, {"x-mock-status", "503"}}));
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(json::parse(r.body)["error"]["message"], "mock failure requested");
}

TEST(Gateway, BodyTooLargeIs413) {
    GatewayUnderTest gw(k_basic, "  max_body_bytes: 1KiB\n");
    auto r = gw.request(chat(chat_body("m", std::string(2000, 'a'), 1, false)));
    EXPECT_EQ(r.status, 413);
    EXPECT_EQ(json::parse(r.body)["error"]["code"], "request_too_large");
}

TEST(Gateway, HugeHeaderIs431) {
    GatewayUnderTest gw(k_basic, "  max_header_bytes: 2KiB\n");
    auto r = gw.request(Request{"GET", "/v1/models", {k_auth, {"X-Padding", std::string(4000, 'p')}}, ""});
    EXPECT_EQ(r.status, 431);
    EXPECT_EQ(json::parse(r.body)["error"]["code"], "headers_too_large");
}

TEST(Gateway, BadBodiesAre400) {
    GatewayUnderTest gw(k_basic);
    auto not_json = gw.request(chat("{not json"));
    EXPECT_EQ(not_json.status, 400);
    EXPECT_EQ(json::parse(not_json.body)["error"]["code"], "invalid_json");
    auto wrong_type = gw.request(chat(R"({"model":"m","messages":[],"max_tokens":"x"})"));
    EXPECT_EQ(wrong_type.status, 400);
    EXPECT_EQ(json::parse(wrong_type.body)["error"]["code"], "invalid_body");
}

TEST(Gateway, GarbageOnOneSocketDoesNotHurtTheNextClient) {
    GatewayUnderTest gw(k_basic);
    {
        RawClient garbage(gw.port());
        static constexpr char k_tls_hello[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 garbage\r\n\r\n";
        garbage.send_all(std::string(k_tls_hello, sizeof k_tls_hello - 1));
        auto reply = garbage.read_some(3s);
        EXPECT_TRUE(reply.empty() || reply.find("400") != std::string::npos) << reply;
    }
    {
        RawClient half(gw.port());
        half.send_all("POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"mod");
    }
    auto r = gw.request(Request{"GET", "/v1/models", {k_auth}, ""});
    EXPECT_EQ(r.status, 200);
}

/// Reads until `needle` was seen `times` times (or 10 s passed).
std::string read_until_count(RawClient& c, const std::string& needle, int times) {
    std::string got;
    auto deadline = steady::now() + 10s;
    auto count = [&] {
        int n = 0;
        for (auto at = got.find(needle); at != std::string::npos; at = got.find(needle, at + 1)) ++n;
        return n;
    };
    while (count() < times && steady::now() < deadline && !c.peer_closed()) got += c.read_some(200ms);
    return got;
}

TEST(Gateway, RequestsArriveWholePipelinedChunkedSplitOrAfter100Continue) {
    GatewayUnderTest gw(k_basic);
    auto body = chat_body("llama3-8b", "Hello there", 5, false);
    {  // two requests in one segment: two answers, in order
        RawClient c(gw.port());
        c.send_all(raw_post("/v1/chat/completions", k_key, body, "X-Request-Id: first\r\n") +
                   raw_post("/v1/chat/completions", k_key, body, "X-Request-Id: second\r\n"));
        auto got = read_until_count(c, "\"usage\"", 2);
        auto first = got.find("X-Request-Id: first");
        auto second = got.find("X-Request-Id: second");
        ASSERT_NE(first, std::string::npos) << got;
        ASSERT_NE(second, std::string::npos) << got;
        EXPECT_LT(first, second);
        EXPECT_EQ(got.rfind("HTTP/1.1 200 OK", 0), 0u) << got;
        EXPECT_NE(got.find("HTTP/1.1 200 OK", first), std::string::npos) << got;
    }
    {  // a chunked request body
        RawClient c(gw.port());
        std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + k_key +
                           "\r\nTransfer-Encoding: chunked\r\n\r\n";
        auto half = body.size() / 2;
        std::ostringstream chunks;
        chunks << std::hex << half << "\r\n"
               << body.substr(0, half) << "\r\n"
               << (body.size() - half) << "\r\n"
               << body.substr(half) << "\r\n0\r\n\r\n";
        c.send_all(head + chunks.str());
        auto got = read_until_count(c, "\"usage\"", 1);
        EXPECT_EQ(got.rfind("HTTP/1.1 200 OK", 0), 0u) << got;
    }
    {  // the head, then the body a moment later
        RawClient c(gw.port());
        auto whole = raw_post("/v1/chat/completions", k_key, body);
        auto cut = whole.find("\r\n\r\n") + 10;
        c.send_all(whole.substr(0, cut));
        EXPECT_EQ(c.read_some(300ms), "") << "nothing is answered before the body is complete";
        c.send_all(whole.substr(cut));
        auto got = read_until_count(c, "\"usage\"", 1);
        EXPECT_EQ(got.rfind("HTTP/1.1 200 OK", 0), 0u) << got;
    }
    {  // Expect: 100-continue: the go-ahead first, the answer after the body
        RawClient c(gw.port());
        auto whole = raw_post("/v1/chat/completions", k_key, body, "Expect: 100-continue\r\n");
        auto end_of_head = whole.find("\r\n\r\n") + 4;
        c.send_all(whole.substr(0, end_of_head));
        auto go_ahead = c.read_some(5s, "\r\n\r\n");
        EXPECT_EQ(go_ahead, "HTTP/1.1 100 Continue\r\n\r\n");
        c.send_all(whole.substr(end_of_head));
        auto got = read_until_count(c, "\"usage\"", 1);
        EXPECT_EQ(got.rfind("HTTP/1.1 200 OK", 0), 0u) << got;
    }
}

TEST(Gateway, ClientDisconnectCancelsTheUpstreamRequest) {
    GatewayUnderTest gw(k_basic, "", /*tokens/s*/ 10);
    {
        RawClient c(gw.port());
        auto body = chat_body("m", "x", 60, true);
        c.send_all(raw_post("/v1/chat/completions", "test-key-1", body));
        auto first = c.read_some(5s, "\"The\"");
        ASSERT_NE(first.find("\"The\""), std::string::npos);
    }  // the client goes away after the first token of a six-second stream
    bool cancelled = false;
    for (int i = 0; i < 100 && !cancelled; ++i) {
        auto metrics = send_request(gw.mock_port(), Request{"GET", "/metrics", {}, ""}).body;
        cancelled = metrics.find("mock_cancelled_total 1") != std::string::npos &&
                    metrics.find("vllm:num_requests_running 0") != std::string::npos;
        if (!cancelled) std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(cancelled) << "the upstream still generates for a client that left";
}

TEST(Gateway, NonStreamingClientDisconnectAlsoCancels) {
    GatewayUnderTest gw(k_basic, "", 1000);
    {
        RawClient c(gw.port());
        auto body = chat_body("m", "x", 1, false);
        c.send_all(raw_post("/v1/chat/completions", "test-key-1", body, "x-mock-delay-ms: 10000\r\n"));
        std::this_thread::sleep_for(300ms);
    }
    bool cancelled = false;
    for (int i = 0; i < 100 && !cancelled; ++i) {
        auto metrics = send_request(gw.mock_port(), Request{"GET", "/metrics", {}, ""}).body;
        cancelled = metrics.find("mock_cancelled_total 1") != std::string::npos;
        if (!cancelled) std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(cancelled);
}

/// A one-shot upstream that records the request it receives.
class CapturingUpstream {
public:
    CapturingUpstream() : port_(free_port()) {
        listener_ = std::thread([this] {
            int fd = listen_loopback(port_, 4);
            ready_.set_value();
            int c = ::accept(fd, nullptr, nullptr);
            std::string got;
            char buf[8192];
            while (got.find("\r\n\r\n") == std::string::npos) {
                auto n = ::recv(c, buf, sizeof buf, 0);
                if (n <= 0) break;
                got.append(buf, static_cast<std::size_t>(n));
            }
            std::string reply =
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
                "Connection: close\r\nX-Upstream-Only: yes\r\n\r\n{}";
            ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
            ::close(c);
            ::close(fd);
            request_.set_value(got);
        });
        ready_.get_future().wait();
    }
    ~CapturingUpstream() { listener_.join(); }
    unsigned short port() const { return port_; }
    std::string request() { return request_.get_future().get(); }

private:
    unsigned short port_;
    std::thread listener_;
    std::promise<void> ready_;
    std::promise<std::string> request_;
};

TEST(Gateway, RewritesHeadersForTheUpstream) {
    CapturingUpstream upstream;
    ::setenv("TOKENGATE_TEST_UPSTREAM_KEY", "upstream-secret", 1);
    std::string cfg =
        "routes:\n  - { path: /v1/chat/completions, upstreams: [capture] }\n"
        "tenants:\n  - { id: acme, keys: [\"test-key-1\"] }\n";
    GatewayUnderTest gw(cfg, "", 1000,
                        "  - name: capture\n    url: http://127.0.0.1:" + std::to_string(upstream.port()) +
                            "/base\n    api_key_env: TOKENGATE_TEST_UPSTREAM_KEY\n");
    auto r = gw.request(chat(chat_body("m", "x", 1, false), {k_auth,
                                                             {"X-Request-Id", "req-abc-123"},
                                                             {"X-Forwarded-For", "203.0.113.9"},
                                                             {"Connection", "keep-alive, X-Hop"},
                                                             {"X-Hop", "secret-hop"}}));
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-upstream-only"), "yes");
    EXPECT_EQ(r.header("x-request-id"), "req-abc-123");
    auto seen = upstream.request();
    EXPECT_NE(seen.find("POST /base/v1/chat/completions HTTP/1.1"), std::string::npos) << seen;
    EXPECT_EQ(seen.find("test-key-1"), std::string::npos) << "the client key never reaches the upstream";
    EXPECT_NE(seen.find("Authorization: Bearer upstream-secret"), std::string::npos) << seen;
    EXPECT_NE(seen.find("X-Forwarded-For: 203.0.113.9, 127.0.0.1"), std::string::npos) << seen;
    EXPECT_NE(seen.find("X-Request-Id: req-abc-123"), std::string::npos) << seen;
    EXPECT_EQ(seen.find("secret-hop"), std::string::npos) << "headers named by Connection are hop-by-hop";
}

TEST(Gateway, SigtermDrainsInFlightStreamsThenExits) {
    GatewayUnderTest gw(k_basic, "  drain_timeout: 10s\n", /*tokens/s*/ 20);
    RawClient streaming(gw.port());
    auto body = chat_body("m", "x", 20, true);
    streaming.send_all(raw_post("/v1/chat/completions", "test-key-1", body));
    ASSERT_NE(streaming.read_some(5s, "\"The\"").find("\"The\""), std::string::npos);
    RawClient idle(gw.port());
    ASSERT_TRUE(idle.connected());
    ::kill(gw.gateway().pid(), SIGTERM);
    EXPECT_TRUE(idle.wait_closed(5s)) << "idle keep-alive connections are closed at once";
    auto rest = streaming.read_some(10s, "[DONE]");
    EXPECT_NE(rest.find("[DONE]"), std::string::npos) << "the in-flight stream finishes";
    EXPECT_EQ(gw.gateway().wait(15s), 0);
    EXPECT_FALSE(wait_for_port(gw.port(), 300ms)) << "the listener is closed";
}

TEST(Cli, CheckReportsFileLineAndColumn) {
    TempDir temp;
    const auto& dir = temp.path();
    std::ofstream(dir + "/bad.yaml") << "upstreams:\n  - { name: up, url: \"http://127.0.0.1:1\" }\n"
                                        "routes:\n  - { path: /v1/x, upstreams: [up] }\n"
                                        "tenants:\n  - { id: t, keys: [k], tier: nope }\n";
    Process check({TOKENGATE_BINARY, "check", "-c", dir + "/bad.yaml"}, dir + "/out.txt");
    EXPECT_EQ(check.wait(10s), 1);
    auto out = read_file(dir + "/out.txt");
    EXPECT_NE(out.find(dir + "/bad.yaml:6:31: unknown tier 'nope'"), std::string::npos) << out;
}

TEST(Cli, CheckLoadsEveryTokenizerAndNamesTheOneItCannot) {
    TempDir temp;
    const auto& dir = temp.path();
    // A tokenizer.json that parses but is not byte-level BPE (a WordPiece model, as BERT's).
    std::ofstream(dir + "/bert.json") << R"({"model": {"type": "WordPiece", "vocab": {"a": 0}},
        "pre_tokenizer": {"type": "ByteLevel"}})";
    std::ofstream(dir + "/broken.json") << R"({"model": {"type": "BPE", "vocab": )";
    auto config = [&](const std::string& file) {
        return "upstreams:\n  - { name: up, url: \"http://127.0.0.1:1\" }\n"
               "routes:\n  - { path: /v1/x, upstreams: [up] }\n"
               "models:\n  bert: { tokenizer: " +
               file +
               " }\n"
               "tenants:\n  - { id: t, keys: [k] }\n";
    };
    for (const auto& [file, says] : {std::pair{"bert.json", "its model is WordPiece, not BPE"},
                                     std::pair{"broken.json", "cannot read tokenizer"}}) {
        std::ofstream(dir + "/gw.yaml") << config(file);
        Process check({TOKENGATE_BINARY, "check", "-c", dir + "/gw.yaml"}, dir + "/out.txt");
        EXPECT_EQ(check.wait(10s), 1);
        auto out = read_file(dir + "/out.txt");
        EXPECT_NE(out.find(dir + "/gw.yaml:6:22: "), std::string::npos) << out;
        EXPECT_NE(out.find(dir + "/" + file), std::string::npos) << "names the file: " << out;
        EXPECT_NE(out.find(says), std::string::npos) << out;
    }
    // And the gateway refuses to start on it, as check said.
    Process serve({TOKENGATE_BINARY, "serve", "-c", dir + "/gw.yaml"}, dir + "/serve.txt");
    EXPECT_EQ(serve.wait(10s), 1);
    EXPECT_NE(read_file(dir + "/serve.txt").find("cannot read tokenizer"), std::string::npos);
}

TEST(Cli, HashKeyPrintsSha256Form) {
    TempDir temp;
    const auto& dir = temp.path();
    Process p({TOKENGATE_BINARY, "hash-key", "test"}, dir + "/out.txt");
    EXPECT_EQ(p.wait(10s), 0);
    EXPECT_EQ(read_file(dir + "/out.txt"), "sha256:" + core::sha256_hex("test") + "\n");
}

}  // namespace
}  // namespace tokengate::testing
