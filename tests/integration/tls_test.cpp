// SPEC §16 through the binary, with certificates made here by the openssl command: HTTPS for
// clients (curl, the OpenAI SDK, a certificate reload under load), https upstreams (verified,
// resumed, refused), rediss:// and what `check` says of bad files.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

int run(const std::string& command) { return std::system(command.c_str()); }

/// Everything a test needs, made with `openssl` in a directory of its own: a CA; two
/// certificates for localhost and 127.0.0.1 that it signed (CN "first", CN "second"); a CA
/// nobody trusts; a certificate that expired (signed under faketime).
class Certificates {
public:
    Certificates() {
        auto in = [&](const std::string& cmd) {
            if (run("cd " + dir() + " && " + cmd + " > openssl.log 2>&1") != 0)
                throw std::runtime_error("openssl failed: " + cmd + "\n" + read_file(dir() + "/openssl.log"));
        };
        const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
        in("openssl req -x509 " + ec + " -keyout ca.key -out ca.pem -days 30 -subj /CN=tokengate-test-ca");
        in("openssl req -x509 " + ec + " -keyout other-ca.key -out other-ca.pem -days 30 -subj /CN=untrusted-ca");
        std::ofstream(dir() + "/san.ext") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
        std::ofstream(dir() + "/elsewhere.ext") << "subjectAltName=DNS:elsewhere.example\n";
        std::ofstream(dir() + "/client.ext") << "extendedKeyUsage=clientAuth\n";
        // first, second: for localhost; elsewhere: a name that is not; client: mutual TLS.
        for (const std::string name : {"first", "second", "elsewhere", "client"}) {
            auto ext = name == "elsewhere" || name == "client" ? name + ".ext" : std::string("san.ext");
            in("openssl req " + ec + " -keyout " + name + ".key -out " + name + ".csr -subj /CN=" + name);
            in("openssl x509 -req -in " + name + ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -extfile " +
               ext + " -out " + name + ".pem");
        }
        // libfaketime preloaded, not the faketime wrapper: the wrapper leaves a named semaphore
        // per run in /dev/shm, and once pids wrap a new run collides with one ("sem_open: File
        // exists"), as a fresh-clone CI run did.
        in("env LD_PRELOAD=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 FAKETIME='@2020-01-01 00:00:00' "
           "openssl x509 -req -in first.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile san.ext "
           "-out expired.pem");
    }
    std::string path(const std::string& file) const { return dir() + "/" + file; }
    const std::string& dir() const { return dir_.path(); }

private:
    TempDir dir_;
};

/// One HTTPS exchange on a connection of its own, with OpenSSL as a client would: the server
/// verified against `ca` for "localhost", the request sent, the response read to the close.
struct TlsExchange {
    bool ok = false;
    std::string error;
    std::string peer_cn;
    std::string response;
    int status() const { return response.size() > 12 ? std::atoi(response.c_str() + 9) : 0; }
};

class TlsConnection {
public:
    TlsConnection(unsigned short port, const std::string& ca) {
        ctx_ = SSL_CTX_new(TLS_client_method());
        SSL_CTX_load_verify_locations(ctx_, ca.c_str(), nullptr);
        SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        timeval tv{10, 0};
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(port);
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
            error_ = "connect failed";
            return;
        }
        ssl_ = SSL_new(ctx_);
        SSL_set_fd(ssl_, fd_);
        SSL_set_tlsext_host_name(ssl_, "localhost");
        SSL_set1_host(ssl_, "localhost");
        if (SSL_connect(ssl_) != 1) {
            const char* reason = ERR_reason_error_string(ERR_get_error());
            error_ = "handshake failed: " + std::string(reason ? reason : "?");
            return;
        }
        X509* cert = SSL_get1_peer_certificate(ssl_);
        char cn[256] = {};
        if (cert) X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
        X509_free(cert);
        peer_cn_ = cn;
    }
    ~TlsConnection() {
        if (ssl_) SSL_free(ssl_);
        if (fd_ >= 0) ::close(fd_);
        SSL_CTX_free(ctx_);
    }
    bool ok() const { return error_.empty(); }
    const std::string& error() const { return error_; }
    const std::string& peer_cn() const { return peer_cn_; }

    /// Sends `request` and reads one response whose body has a Content-Length.
    std::string exchange(const std::string& request) {
        if (SSL_write(ssl_, request.data(), static_cast<int>(request.size())) <= 0) return "";
        std::string in;
        char buf[16384];
        for (;;) {
            auto head_end = in.find("\r\n\r\n");
            if (head_end != std::string::npos) {
                auto cl = in.find("Content-Length: ");
                if (cl != std::string::npos && cl < head_end &&
                    in.size() >= head_end + 4 + std::stoul(in.substr(cl + 16)))
                    return in;
            }
            int n = SSL_read(ssl_, buf, sizeof buf);
            if (n <= 0) return in;
            in.append(buf, n);
        }
    }

private:
    SSL_CTX* ctx_ = nullptr;
    SSL* ssl_ = nullptr;
    int fd_ = -1;
    std::string error_;
    std::string peer_cn_;
};

TlsExchange https_exchange(unsigned short port, const std::string& ca, const std::string& request) {
    TlsExchange out;
    TlsConnection c(port, ca);
    out.peer_cn = c.peer_cn();
    if (!c.ok()) {
        out.error = c.error();
        return out;
    }
    out.response = c.exchange(request);
    out.ok = out.status() != 0;
    if (!out.ok) out.error = "no response";
    return out;
}

std::string chat_request(const std::string& body, const std::string& connection = "close") {
    return "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer k1\r\n"
           "Content-Type: application/json\r\nConnection: " +
           connection + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

const std::string k_routes =
    "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n  - { path: /v1/models, upstreams: [mock] }\n"
    "tenants:\n  - id: acme\n    keys: [\"k1\"]\n    limits:\n"
    "      - { name: requests, algorithm: token_bucket, capacity: 100000, rate: 10000/s }\n";

std::string server_tls(const Certificates& certs, const std::string& extra = "") {
    return "  tls: { cert: " + certs.path("first.pem") + ", key: " + certs.path("first.key") + extra + " }\n";
}

double metric(const GatewayUnderTest& gw, const std::string& name) {
    return metric_total(gw.admin(Request{"GET", "/metrics", {}, ""}).body, name);
}

std::string metric_line(const std::string& metrics, const std::string& series) {
    auto at = metrics.find("\n" + series + " ");
    return at == std::string::npos ? "" : metrics.substr(at + 1, metrics.find('\n', at + 1) - at - 1);
}

TEST(Tls, CurlOverHttpsGetsJsonAndAStream) {
    Certificates certs;
    GatewayUnderTest gw(k_routes, server_tls(certs));
    auto curl = "curl -s --cacert " + certs.path("ca.pem") + " https://localhost:" + std::to_string(gw.port()) +
                "/v1/chat/completions -H 'Authorization: Bearer k1' -H 'Content-Type: application/json' ";
    auto json_reply = capture(curl + "-d '" + chat_body("m", "hello there", 5, false) + "'");
    auto parsed = nlohmann::json::parse(json_reply, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << json_reply;
    EXPECT_EQ(parsed["usage"]["completion_tokens"], 5) << json_reply;
    auto stream = capture(curl + "-N -d '" + chat_body("m", "hello there", 5, true) + "'");
    EXPECT_NE(stream.find("data: {"), std::string::npos) << stream;
    EXPECT_NE(stream.find("data: [DONE]"), std::string::npos) << stream;
    auto m = gw.metrics_after(2);
    EXPECT_EQ(metric_total(m, "tokengate_tls_handshakes_total"), 2) << m;
    EXPECT_EQ(metric_total(m, "tokengate_tls_handshake_failures_total"), 0) << m;
    // The certificate was made for 30 days: its expiry, for an alert to watch.
    auto expires = metric_total(m, "tokengate_tls_certificate_not_after_seconds");
    auto now = static_cast<double>(std::time(nullptr));
    EXPECT_GT(expires, now + 29 * 86400.0) << m;
    EXPECT_LT(expires, now + 31 * 86400.0) << m;
}

TEST(Tls, MinVersionAndAlpnAreWhatTheClientGets) {
    Certificates certs;
    GatewayUnderTest gw(k_routes, server_tls(certs, ", min_version: \"1.3\""));
    auto s_client = [&](const std::string& options) {
        return capture("openssl s_client -connect 127.0.0.1:" + std::to_string(gw.port()) + " -CAfile " +
                       certs.path("ca.pem") + " " + options + " < /dev/null 2>&1");
    };
    auto tls13 = s_client("-tls1_3 -alpn h2,http/1.1");
    EXPECT_NE(tls13.find("New, TLSv1.3, Cipher is "), std::string::npos) << tls13;
    EXPECT_NE(tls13.find("ALPN protocol: http/1.1"), std::string::npos) << tls13;  // never h2: not spoken
    EXPECT_NE(tls13.find("Verify return code: 0 (ok)"), std::string::npos) << tls13;
    auto tls12 = s_client("-tls1_2");
    EXPECT_NE(tls12.find("New, (NONE), Cipher is (NONE)"), std::string::npos) << tls12;
    EXPECT_NE(tls12.find("alert protocol version"), std::string::npos) << tls12;
    // Counted once the gateway has sent its alert and closed: possibly just after the client
    // read it.
    std::string counted;
    for (auto deadline = steady::now() + 5s; counted.empty() && steady::now() < deadline;
         std::this_thread::sleep_for(20ms))
        counted = metric_line(gw.admin(Request{"GET", "/metrics", {}, ""}).body,
                              "tokengate_tls_handshake_failures_total{reason=\"protocol\"}");
    EXPECT_EQ(counted, "tokengate_tls_handshake_failures_total{reason=\"protocol\"} 1");
}

TEST(Tls, TheOpenAiSdkOverHttpsJsonAndStream) {
    auto shared = fs::path(TOKENGATE_BUILD_DIR) / "openai-sdk";
    fs::create_directories(shared);
    auto skip = npm_install_once(shared.string(), "openai@4.95.0", "openai/package.json");
    if (!skip.empty()) GTEST_SKIP() << skip;
    Certificates certs;
    GatewayUnderTest gw(k_routes, server_tls(certs));
    auto script = certs.path("sdk.js");
    std::ofstream(script) << R"(const OpenAI = require('openai');
(async () => {
  const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'k1' });
  const r = await client.chat.completions.create({ model: 'm', max_tokens: 4,
    messages: [{ role: 'user', content: 'hello' }] });
  const s = await client.chat.completions.create({ model: 'm', max_tokens: 4, stream: true,
    messages: [{ role: 'user', content: 'hello' }] });
  let chunks = 0, text = '';
  for await (const c of s) { chunks++; text += (c.choices[0] && c.choices[0].delta.content) || ''; }
  console.log(JSON.stringify({ completion_tokens: r.usage.completion_tokens,
    content: r.choices[0].message.content, chunks, text }));
})().catch((e) => { console.log(JSON.stringify({ error: String(e) })); process.exit(1); });
)";
    auto out =
        capture("NODE_PATH=" + (shared / "node_modules").string() + " NODE_EXTRA_CA_CERTS=" + certs.path("ca.pem") +
                " node " + script + " https://localhost:" + std::to_string(gw.port()) + "/v1 2>&1");
    auto result = nlohmann::json::parse(out, nullptr, false);
    ASSERT_FALSE(result.is_discarded()) << out;
    ASSERT_FALSE(result.contains("error")) << out;
    EXPECT_EQ(result["completion_tokens"], 4) << out;
    EXPECT_FALSE(result["content"].get<std::string>().empty()) << out;
    EXPECT_GE(result["chunks"].get<int>(), 4) << out;
    EXPECT_FALSE(result["text"].get<std::string>().empty()) << out;
}

TEST(Tls, PlainHttpToTheHttpsPortIsA400AndThePlainListenerBesideItServes) {
    Certificates certs;
    auto plain = free_port();
    GatewayUnderTest gw(k_routes, server_tls(certs, ", plain_listen: 127.0.0.1:" + std::to_string(plain)));
    RawClient c(gw.port());
    ASSERT_TRUE(c.connected());
    c.send_all(raw_post("/v1/chat/completions", "k1", chat_body("m", "hi", 1, false)));
    auto answer = c.read_some(5s, "}}");
    EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
    EXPECT_NE(answer.find("plain_http_to_https_port"), std::string::npos) << answer;
    EXPECT_TRUE(c.wait_closed(5s));
    ASSERT_TRUE(wait_for_port(plain));
    auto r = send_request(plain, Request{"POST",
                                         "/v1/chat/completions",
                                         {{"Authorization", "Bearer k1"}, {"Content-Type", "application/json"}},
                                         chat_body("m", "hi", 1, false)});
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(metric_line(gw.admin(Request{"GET", "/metrics", {}, ""}).body,
                          "tokengate_tls_handshake_failures_total{reason=\"plain_http\"}"),
              "tokengate_tls_handshake_failures_total{reason=\"plain_http\"} 1");
}

TEST(Tls, SlowAndGarbageHandshakesAreClosedByTheHeaderTimeoutWithoutKeepingASlot) {
    Certificates certs;
    // Three connections at most: slots the bad handshakes kept would refuse the last request.
    GatewayUnderTest gw(k_routes, server_tls(certs) + "  timeouts: { header: 1s }\n  max_connections: 3\n");
    std::vector<std::unique_ptr<RawClient>> bad;
    for (int i = 0; i < 2; ++i) bad.push_back(std::make_unique<RawClient>(gw.port()));  // say nothing
    bad.push_back(std::make_unique<RawClient>(gw.port()));
    bad.back()->send_all(std::string("\x16\x03\x01\x00\xff", 5) + "a ClientHello that never ends");
    for (auto& c : bad) EXPECT_TRUE(c->wait_closed(8s));
    // A session frees its slot just after its socket closes: give the last one a moment.
    std::this_thread::sleep_for(200ms);
    auto r = https_exchange(gw.port(), certs.path("ca.pem"), chat_request(chat_body("m", "hi", 1, false)));
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.status(), 200) << r.response;
    // Garbage that is not TLS at all fails the handshake at once.
    RawClient junk(gw.port());
    junk.send_all(std::string("\x16\x03\x01\x00\x05", 5) + std::string(5, '\xff'));
    EXPECT_TRUE(junk.wait_closed(5s));
    auto m = gw.admin(Request{"GET", "/metrics", {}, ""}).body;
    EXPECT_EQ(metric_total(m, "tokengate_tls_handshake_failures_total"), 4) << m;
    EXPECT_NE(metric_line(m, "tokengate_tls_handshake_failures_total{reason=\"timeout\"}"), "") << m;
    EXPECT_NE(metric_line(m, "tokengate_tls_handshake_failures_total{reason=\"protocol\"}"), "") << m;
    // Four failures of two reasons: a line per reason a second (SPEC §17), not four.
    auto log = gw.log();
    std::size_t lines = 0;
    for (auto at = log.find("TLS handshake from 127.0.0.1 failed"); at != std::string::npos;
         at = log.find("TLS handshake from 127.0.0.1 failed", at + 1))
        ++lines;
    EXPECT_GE(lines, 1u) << log;
    EXPECT_LE(lines, 2u) << log;
    EXPECT_NE(log.find("failed (protocol)"), std::string::npos) << log;
}

TEST(Tls, HttpsUpstreamIsVerifiedPooledAndResumed) {
    Certificates certs;
    GatewayUnderTest gw(k_routes, "", 1000, "    tls: { ca_file: " + certs.path("ca.pem") + " }\n", {},
                        std::make_pair(certs.path("first.pem"), certs.path("first.key")));
    auto chat = [&](const std::string& delay) {
        return gw.request(Request{"POST",
                                  "/v1/chat/completions",
                                  {{"Authorization", "Bearer k1"}, {"x-mock-delay-ms", delay}},
                                  chat_body("m", "hi", 2, false)});
    };
    EXPECT_EQ(chat("0").status, 200);
    // Two at once: one reuses the pooled connection, the other opens a second one, offering
    // the session the first handshake left.
    std::thread second([&] { EXPECT_EQ(chat("300").status, 200); });
    EXPECT_EQ(chat("300").status, 200);
    second.join();
    for (int i = 0; i < 5; ++i) EXPECT_EQ(chat("0").status, 200);
    auto m = gw.metrics_after(7);
    auto count = [](const std::string& text, const std::string& series) {
        auto line = metric_line(text, series);
        return line.empty() ? 0.0 : std::stod(line.substr(line.rfind(' ') + 1));
    };
    auto full = count(m, "tokengate_upstream_tls_handshakes_total{upstream=\"mock\",result=\"full\"}");
    auto resumed = count(m, "tokengate_upstream_tls_handshakes_total{upstream=\"mock\",result=\"resumed\"}");
    // One full handshake; every later connection (one or two, as the two workers share the
    // load) resumed its session. Seven requests, pooled: no more than three connections.
    EXPECT_EQ(full, 1) << m;
    EXPECT_GE(resumed, 1) << m;
    EXPECT_LE(full + resumed, 3) << m;
    // The mock counted the same, plus this curl's own handshake.
    auto mock = capture("curl -s --cacert " + certs.path("ca.pem") +
                        " https://localhost:" + std::to_string(gw.mock_port()) + "/metrics");
    EXPECT_EQ(count(mock, "mock_tls_handshakes_total"), full + resumed + 1) << mock;
    EXPECT_EQ(count(mock, "mock_tls_resumed_total"), resumed) << mock;
}

TEST(Tls, AnUpstreamCertificateThatFailsVerificationIs502WithTheReasonInTheLog) {
    Certificates certs;
    GatewayUnderTest gw(k_routes, "", 1000, "    tls: { ca_file: " + certs.path("other-ca.pem") + " }\n", {},
                        std::make_pair(certs.path("first.pem"), certs.path("first.key")));
    for (int i = 0; i < 3; ++i) {
        auto r = gw.request(
            Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 2, false)});
        EXPECT_EQ(r.status, 502) << r.body;
        EXPECT_NE(r.body.find("upstream_unavailable"), std::string::npos) << r.body;
    }
    EXPECT_TRUE(gw.log_contains(
        "upstream mock: TLS handshake failed: certificate verification failed: unable to get local issuer certificate"))
        << gw.log();
    EXPECT_TRUE(gw.wait_settled(3));  // every refund made
    EXPECT_EQ(metric_line(gw.admin(Request{"GET", "/metrics", {}, ""}).body,
                          "tokengate_upstream_tls_handshakes_total{upstream=\"mock\",result=\"failed\"}"),
              "tokengate_upstream_tls_handshakes_total{upstream=\"mock\",result=\"failed\"} 3");
}

TEST(Tls, AnUpstreamIsCheckedByNameAndGetsTheClientCertificateItAsksFor) {
    Certificates certs;
    auto chat = [](const GatewayUnderTest& gw) {
        return gw.request(
            Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 2, false)});
    };
    {  // a certificate for another name, from a CA we trust: still refused
        GatewayUnderTest gw(k_routes, "", 1000, "    tls: { ca_file: " + certs.path("ca.pem") + " }\n", {},
                            std::make_pair(certs.path("elsewhere.pem"), certs.path("elsewhere.key")));
        EXPECT_EQ(chat(gw).status, 502);
        EXPECT_TRUE(gw.log_contains("certificate verification failed: hostname mismatch")) << gw.log();
    }
    // An upstream that wants a client certificate: a mock of its own with --tls-client-ca,
    // configured as a second upstream beside the harness's. With a client certificate
    // configured it answers; without one, the handshake fails.
    auto mock_port = free_port();
    Process mock(
        {gateway_binary(), "mock-upstream", "--port", std::to_string(mock_port), "--tokens-per-s", "0", "--tls-cert",
         certs.path("first.pem"), "--tls-key", certs.path("first.key"), "--tls-client-ca", certs.path("ca.pem")},
        certs.path("mock.log"));
    ASSERT_TRUE(wait_for_output(mock, certs.path("mock.log"), "listening on"));
    auto through = [&](const std::string& client) {
        GatewayUnderTest gw(
            "routes:\n  - { path: /v1/chat/completions, upstreams: [mtls] }\n"
            "tenants:\n  - { id: acme, keys: [\"k1\"] }\n",
            "", 1000,
            "  - name: mtls\n    url: https://localhost:" + std::to_string(mock_port) +
                "\n    tls: { ca_file: " + certs.path("ca.pem") + client + " }\n");
        auto r = chat(gw);
        return std::make_pair(r.status, gw.log());
    };
    auto with = through(", client_cert: " + certs.path("client.pem") + ", client_key: " + certs.path("client.key"));
    EXPECT_EQ(with.first, 200) << with.second;
    // TLS 1.3 refuses a missing client certificate after the client's side of the handshake
    // is done: the refusal arrives as the response would, and is a 502 all the same.
    auto without = through("");
    EXPECT_EQ(without.first, 502) << without.second;
}

TEST(Tls, ACertificateReloadUnderLoadFailsNoRequestAndKeepsOpenConnections) {
    Certificates certs;
    // The gateway reads its pair from files the test replaces, as an operator's renewal would.
    fs::copy_file(certs.path("first.pem"), certs.path("live.pem"));
    fs::copy_file(certs.path("first.key"), certs.path("live.key"));
    std::string tls = "  tls: { cert: " + certs.path("live.pem") + ", key: " + certs.path("live.key") + " }\n";
    GatewayUnderTest gw(k_routes, tls);
    auto request = chat_request(chat_body("m", "hi", 1, false), "keep-alive");

    TlsConnection kept(gw.port(), certs.path("ca.pem"));  // opened before the reload, used after it
    ASSERT_TRUE(kept.ok()) << kept.error();
    EXPECT_EQ(kept.peer_cn(), "first");
    ASSERT_EQ(kept.exchange(request).rfind("HTTP/1.1 200", 0), 0u);

    std::atomic<bool> stop{false};
    std::atomic<int> ok{0}, failed{0}, saw_first{0}, saw_second{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < 3; ++t)
        clients.emplace_back([&] {
            while (!stop) {
                auto r = https_exchange(gw.port(), certs.path("ca.pem"), chat_request(chat_body("m", "hi", 1, false)));
                if (r.ok && r.status() == 200) ++ok;
                else ++failed;
                if (r.peer_cn == "first") ++saw_first;
                if (r.peer_cn == "second") ++saw_second;
            }
        });
    auto wait_for = [](const std::function<bool()>& done) {
        for (auto deadline = steady::now() + 15s; steady::now() < deadline; std::this_thread::sleep_for(20ms))
            if (done()) return true;
        return false;
    };
    EXPECT_TRUE(wait_for([&] { return saw_first >= 20; }));
    // The renewal: the new pair written beside the old, renamed into place, then SIGHUP.
    fs::copy_file(certs.path("second.pem"), certs.path("next.pem"));
    fs::copy_file(certs.path("second.key"), certs.path("next.key"));
    fs::rename(certs.path("next.key"), certs.path("live.key"));
    fs::rename(certs.path("next.pem"), certs.path("live.pem"));
    ::kill(gw.gateway().pid(), SIGHUP);
    EXPECT_TRUE(wait_for([&] { return saw_second >= 20; }));
    // A pair that does not match is refused; the second one keeps serving.
    fs::copy_file(certs.path("first.key"), certs.path("live.key"), fs::copy_options::overwrite_existing);
    ::kill(gw.gateway().pid(), SIGHUP);
    EXPECT_TRUE(gw.log_contains("does not match the certificate")) << gw.log();
    int second_before = saw_second;
    EXPECT_TRUE(wait_for([&] { return saw_second >= second_before + 20; }));
    stop = true;
    for (auto& c : clients) c.join();

    EXPECT_EQ(failed, 0);
    EXPECT_GT(ok, 60);
    EXPECT_EQ(kept.exchange(request).rfind("HTTP/1.1 200", 0), 0u);  // the old connection was not dropped
    auto m = gw.admin(Request{"GET", "/metrics", {}, ""}).body;
    EXPECT_EQ(metric_line(m, "tokengate_config_reloads_total{result=\"success\"}"),
              "tokengate_config_reloads_total{result=\"success\"} 1");
    EXPECT_EQ(metric_line(m, "tokengate_config_reloads_total{result=\"failure\"}"),
              "tokengate_config_reloads_total{result=\"failure\"} 1");
}

TEST(Tls, TwoGatewaysShareAQuotaOverRediss) {
    REQUIRE_REDIS();
    Certificates certs;
    RedisServer redis({}, RedisServer::Tls{certs.path("first.pem"), certs.path("first.key"), certs.path("ca.pem")});
    auto config = [&](const std::string& ca) {
        return "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
               "tenants:\n  - id: acme\n    keys: [\"k1\"]\n    limits:\n"
               "      - { name: requests, algorithm: token_bucket, capacity: 6, rate: 6/min }\n"
               "store:\n  backend: redis\n  redis: { url: \"" +
               redis.url() + "\", prefix: \"tgtls:\", pool: 2, on_error: fail_closed, tls: { ca_file: " + ca + " } }\n";
    };
    GatewayUnderTest a(config(certs.path("ca.pem"))), b(config(certs.path("ca.pem")));
    int passed = 0, refused = 0;
    for (int i = 0; i < 12; ++i) {
        auto& gw = i % 2 ? b : a;
        auto r = gw.request(
            Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 1, false)});
        if (r.status == 200) ++passed;
        else if (r.status == 429) ++refused;
        else ADD_FAILURE() << r.status << " " << r.body;
    }
    EXPECT_EQ(passed, 6);
    EXPECT_EQ(refused, 6);
    EXPECT_EQ(metric(a, "tokengate_redis_fallback_decisions_total"), 0);
    // A Redis whose certificate we do not trust is never used: fail_closed answers 503.
    GatewayUnderTest untrusting(config(certs.path("other-ca.pem")));
    auto r = untrusting.request(
        Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 1, false)});
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_TRUE(untrusting.log_contains("TLS handshake: certificate verification failed")) << untrusting.log();
}

TEST(Tls, SentinelModeSpeaksTlsToTheSentinelsAndTheMasterTheyName) {
    REQUIRE_REDIS();
    Certificates certs;
    RedisServer::Tls tls{certs.path("first.pem"), certs.path("first.key"), certs.path("ca.pem")};
    RedisServer master({}, tls);
    RedisServer replica({"--tls-replication", "yes", "--replicaof", "127.0.0.1", std::to_string(master.port())}, tls);
    std::vector<std::unique_ptr<RedisSentinel>> sentinels;
    std::string nodes;
    for (int i = 0; i < 3; ++i) {
        sentinels.push_back(std::make_unique<RedisSentinel>("tlsmaster", master.port(), tls));
        nodes += (nodes.empty() ? "" : ", ") + std::string("\"127.0.0.1:") +
                 std::to_string(sentinels.back()->tls_port()) + "\"";
    }
    auto named = [&] { return sentinels[0]->master_port("tlsmaster") == master.port(); };
    for (auto deadline = steady::now() + 10s; !named() && steady::now() < deadline;) std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(named());
    GatewayUnderTest gw(
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "tenants:\n  - id: acme\n    keys: [\"k1\"]\n    limits:\n"
        "      - { name: requests, algorithm: token_bucket, capacity: 3, rate: 3/h }\n"
        "store:\n  backend: redis\n  redis:\n    mode: sentinel\n    master: tlsmaster\n    nodes: [" +
        nodes + "]\n    url: \"rediss:///0\"\n    tls: { ca_file: " + certs.path("ca.pem") +
        " }\n    on_error: fail_closed\n");
    std::vector<int> statuses;
    for (auto deadline = steady::now() + 10s; steady::now() < deadline; std::this_thread::sleep_for(50ms)) {
        auto r = gw.request(
            Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 1, false)});
        if (r.status != 503) {  // until the sentinels have named the master
            statuses.push_back(r.status);
            if (statuses.size() == 5) break;
        }
    }
    EXPECT_EQ(statuses, (std::vector<int>{200, 200, 200, 429, 429})) << gw.log();
    EXPECT_TRUE(gw.log_contains("redis 127.0.0.1:" + std::to_string(master.port()) + " connected (TLS)")) << gw.log();
    EXPECT_TRUE(gw.log_contains("redis 127.0.0.1:" + std::to_string(sentinels[0]->tls_port()) + " connected (TLS)"));
    // A clean exit: every connection and timer of sentinel mode closed before its event loop.
    EXPECT_EQ(gw.gateway().stop(SIGTERM), 0) << gw.log();
}

TEST(Tls, ClusterModeSpeaksTlsToEveryMaster) {
    REQUIRE_REDIS();
    Certificates certs;
    RedisCluster cluster(3, RedisServer::Tls{certs.path("first.pem"), certs.path("first.key"), certs.path("ca.pem")});
    // Two tenants whose keys are on different masters.
    std::vector<std::string> tenants;
    std::set<std::size_t> owners;
    for (int i = 0; tenants.size() < 2; ++i) {
        auto name = "t" + std::to_string(i);
        auto owner = cluster.owner_of("{tgc:t:" + name + "}tenant:requests:" + name);
        if (owner < cluster.size() && owners.insert(owner).second) tenants.push_back(name);
    }
    std::string config =
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "tiers:\n  hourly:\n    limits:\n"
        "      - { name: requests, algorithm: token_bucket, capacity: 3, rate: 3/h }\n"
        "tenants:\n";
    for (const auto& t : tenants) config += "  - { id: " + t + ", tier: hourly, keys: [\"k-" + t + "\"] }\n";
    config +=
        "store:\n  backend: redis\n  redis:\n    mode: cluster\n    prefix: \"tgc:\"\n    nodes: " + cluster.seeds() +
        "\n    url: \"rediss:///0\"\n    tls: { ca_file: " + certs.path("ca.pem") + " }\n    on_error: fail_closed\n";
    GatewayUnderTest gw(config);
    for (const auto& t : tenants) {
        std::vector<int> statuses;
        for (auto deadline = steady::now() + 10s; steady::now() < deadline && statuses.size() < 5;) {
            auto r = gw.request(Request{
                "POST", "/v1/chat/completions", {{"Authorization", "Bearer k-" + t}}, chat_body("m", "hi", 1, false)});
            if (r.status == 503) std::this_thread::sleep_for(50ms);  // until the slot map is known
            else statuses.push_back(r.status);
        }
        EXPECT_EQ(statuses, (std::vector<int>{200, 200, 200, 429, 429})) << t << "\n" << gw.log();
    }
    for (std::size_t i : owners)
        EXPECT_TRUE(gw.log_contains("redis 127.0.0.1:" + std::to_string(cluster.node(i).port()) + " connected (TLS)"))
            << gw.log();
    // A clean exit: every connection and timer of cluster mode closed before its event loop.
    EXPECT_EQ(gw.gateway().stop(SIGTERM), 0) << gw.log();
}

TEST(Tls, CheckNamesTheFileOfAnExpiredMismatchedOrMissingCertificate) {
    Certificates certs;
    auto check = [&](const std::string& tls) {
        auto path = certs.path("gateway.yaml");
        std::ofstream(path) << "server:\n  tls: " << tls
                            << "\nupstreams:\n  - { name: up, url: \"https://localhost:1\" }\n"
                               "routes:\n  - { path: /v1/chat/completions, upstreams: [up] }\n"
                               "tenants:\n  - { id: t1, keys: [\"k1\"] }\n";
        return capture(std::string(gateway_binary()) + " check -c " + path + " 2>&1; echo \"exit=$?\"");
    };
    auto pair = [&](const std::string& cert, const std::string& key) {
        return "{ cert: " + certs.path(cert) + ", key: " + certs.path(key) + " }";
    };
    auto out = check(pair("first.pem", "first.key"));
    EXPECT_NE(out.find(": OK"), std::string::npos) << out;
    EXPECT_NE(out.find("exit=0"), std::string::npos) << out;

    out = check(pair("expired.pem", "first.key"));
    // Signed a day after faketime's start, whose clock runs: a loaded machine adds a second or so.
    EXPECT_NE(out.find("gateway.yaml:2:16: the certificate in " + certs.path("expired.pem") +
                       " expired on 2020-01-02 00:00:0"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("exit=1"), std::string::npos) << out;

    out = check(pair("first.pem", "second.key"));
    EXPECT_NE(out.find(":2:" + std::to_string(16 + certs.path("first.pem").size() + 7) + ": the key " +
                       certs.path("second.key") + " does not match the certificate " + certs.path("first.pem")),
              std::string::npos)
        << out;

    out = check(pair("first.pem", "absent.key"));
    EXPECT_NE(out.find("cannot read key file " + certs.path("absent.key")), std::string::npos) << out;

    out = check(pair("first.pem", "ca.pem"));  // a certificate where the key should be
    EXPECT_NE(out.find("cannot load the private key " + certs.path("ca.pem")), std::string::npos) << out;
    EXPECT_NE(out.find("exit=1"), std::string::npos) << out;
}

}  // namespace
}  // namespace tokengate::testing
