#include "jwks_watch.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>

#include "services.hpp"
#include "tokengate/auth/jwt.hpp"
#include "tokengate/proxy/timed_stream.hpp"
#include "tokengate/tls/context.hpp"

namespace tokengate::server {

namespace http = beast::http;

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);
constexpr auto k_fetch_timeout = std::chrono::seconds(10);
// After a failure: soon, but not in a loop against a provider that is down.
constexpr core::Nanos k_retry = 10 * core::k_nanos_per_second;

struct Fetched {
    std::optional<auth::KeySet> keys;
    std::string why;  // when there are none
};

/// One GET of the JWKS, connect to last byte within k_fetch_timeout, at most 1 MiB.
net::awaitable<Fetched> fetch(const config::JwtConfig& jwt, std::shared_ptr<tls::ClientContext> tls) {
    auto ex = co_await net::this_coro::executor;
    proxy::TimedStream stream(ex);
    stream.expires_after(k_fetch_timeout);
    net::ip::tcp::resolver resolver(ex);
    auto [rec, endpoints] = co_await resolver.async_resolve(jwt.jwks_host, std::to_string(jwt.jwks_port), k_use);
    if (rec) co_return Fetched{{}, "resolve: " + rec.message()};
    auto [cec, endpoint] = co_await stream.async_connect(endpoints, k_use);
    if (cec) co_return Fetched{{}, "connect: " + cec.message()};
    if (jwt.jwks_https) {
        bool resumed = false;
        if (auto hec = co_await stream.tls_connect(tls, jwt.jwks_host, resumed))
            co_return Fetched{{}, "TLS: " + hec.message()};
    }
    http::request<http::empty_body> req{http::verb::get, jwt.jwks_path, 11};
    req.set(http::field::host, jwt.jwks_host + ":" + std::to_string(jwt.jwks_port));
    req.set(http::field::user_agent, "tokengate");
    req.set(http::field::accept, "application/json");
    req.keep_alive(false);
    auto [wec, wn] = co_await http::async_write(stream, req, k_use);
    if (wec) co_return Fetched{{}, "write: " + wec.message()};
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(auth::k_max_jwks_bytes);
    parser.header_limit(64 * 1024);
    auto [rdec, rn] = co_await http::async_read(stream, buffer, parser, k_use);
    if (rdec == http::error::body_limit) co_return Fetched{{}, "the JWKS is over 1 MiB"};
    if (rdec) co_return Fetched{{}, "read: " + rdec.message()};
    const auto& res = parser.get();
    if (res.result() != http::status::ok) co_return Fetched{{}, "HTTP " + std::to_string(res.result_int())};
    auto keys = auth::read_jwks(res.body());
    if (auto* why = std::get_if<std::string>(&keys)) co_return Fetched{{}, *why};
    co_return Fetched{std::move(std::get<auth::KeySet>(keys)), {}};
}

}  // namespace

net::awaitable<void> watch_jwks(Services& services) {
    auto ex = co_await net::this_coro::executor;
    net::steady_timer timer(ex);
    std::string url;  // the one the schedule and the TLS context are for
    std::shared_ptr<tls::ClientContext> tls;
    core::Nanos next = 0;
    bool failing = false;
    std::string last_why;  // logged once while the same failure repeats
    for (;;) {
        auto rt = services.runtime.get();
        if (rt->jwt && !rt->jwt->policy().jwks_url.empty()) {
            const auto& jwt = rt->jwt->policy();
            if (jwt.jwks_url != url) {  // a new URL (or the first): fetch it now
                url = jwt.jwks_url;
                tls = jwt.jwks_https
                          ? std::make_shared<tls::ClientContext>(config::ClientTlsConfig{}, rt->config->source_path)
                          : nullptr;
                next = 0;
                failing = false;
                last_why.clear();
            }
            // A reload made a new issuer: it holds the keys already fetched from this URL.
            if (services.clock.now() >= next) {
                auto fetched = co_await fetch(jwt, tls);
                auto now = services.clock.now();
                if (fetched.keys) {
                    auto count = fetched.keys->size();
                    // The runtime of the moment: a reload during the fetch made another issuer.
                    auto current = services.runtime.get();
                    if (current->jwt && current->jwt->policy().jwks_url == url)
                        current->jwt->install(std::move(*fetched.keys));
                    if (failing) spdlog::info("auth.jwt: the JWKS at {} is readable again", url);
                    spdlog::debug("auth.jwt: {} keys from {}", count, url);
                    failing = false;
                    last_why.clear();
                    next = now + jwt.jwks_refresh;
                } else {
                    if (fetched.why != last_why)
                        spdlog::warn("auth.jwt: cannot read the JWKS at {} ({}); {}", url, fetched.why,
                                     rt->jwt->verifier() ? "the keys read before stay" : "no key to verify with yet");
                    failing = true;
                    last_why = fetched.why;
                    next = now + std::min(k_retry, jwt.jwks_refresh);
                }
            }
        }
        timer.expires_after(std::chrono::milliseconds(250));
        if (auto [ec] = co_await timer.async_wait(k_use); ec) co_return;
    }
}

}  // namespace tokengate::server
