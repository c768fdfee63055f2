#include "tokengate/proxy/forward.hpp"

#include "tokengate/proxy/wire.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <span>
#include <string>

namespace tokengate::proxy {

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);
constexpr std::uint32_t k_upstream_header_limit = 64 * 1024;
// 103 Early Hints may come more than once; an upstream that sends more than this is broken.
constexpr int k_max_interim_responses = 8;

std::chrono::nanoseconds ns(core::Nanos n) { return std::chrono::nanoseconds(n); }

bool is_connection_failure(const beast::error_code& ec) {
    return ec == net::error::connection_reset || ec == net::error::connection_refused ||
           ec == net::error::broken_pipe || ec == http::error::end_of_stream || ec == net::error::eof;
}

struct Ending {
    ConnectionPool& pool;
    UpstreamHealth& health;
    std::unique_ptr<UpstreamConnection> conn;
    core::Nanos now;
};

/// What a relayed exchange comes to: its outcome, the upstream's health, and its connection
/// back to the pool (only when the response ended as HTTP says and may be followed) or closed.
ForwardOutcome after_relay(const Relayed& relayed, bool client_gone, unsigned status, bool reusable, Ending end) {
    const auto& cfg = end.pool.config();
    if (relayed.upstream_failed && !client_gone) {
        end.health.record_failure(cfg, end.now);
        end.pool.release(std::move(end.conn), false);
        // Nothing reached the client yet (the head waited for the body): it can still get a 502.
        return relayed.head_sent ? ForwardOutcome::upstream_broken : ForwardOutcome::upstream_unavailable;
    }
    if (relayed.client_failed || client_gone) {
        end.pool.release(std::move(end.conn), false);
        return ForwardOutcome::client_gone;
    }
    if (status >= 500) end.health.record_failure(cfg, end.now);
    else end.health.record_success();
    end.pool.release(std::move(end.conn), reusable);
    return ForwardOutcome::completed;
}

}  // namespace

core::RecycledString client_head(const UpstreamResponseParser& parser, RelayOptions& options, bool& chunked,
                                 const ForwardHooks& hooks) {
    const auto& response = parser.get();
    chunked = false;
    if (!parser.is_done() && !parser.content_length()) {
        if (options.version >= 11) chunked = true;  // re-framed: the upstream's framing is hop-by-hop
        else options.keep_alive = false;            // HTTP/1.0: the body ends when the connection closes
    }
    core::RecycledString head;
    head.reserve(1024);
    wire::status_line(head, options.version, response.result_int(), response.reason());
    wire::forwardable_fields(head, response.base(), hooks.replaced);
    if (chunked) head.append("Transfer-Encoding: chunked\r\n");
    wire::connection(head, options.version, options.keep_alive);
    if (hooks.decorate) hooks.decorate(response.base(), head);
    head.append(wire::k_crlf);
    return head;
}

net::awaitable<ForwardResult> forward(ConnectionPool& pool, UpstreamHealth& health, const UpstreamRequest& request,
                                      ClientSide client, ExchangeWatch& watch, const ForwardHooks& hooks,
                                      const core::Clock& clock) {
    ForwardResult result;
    const auto& cfg = pool.config();
    auto fail_upstream = [&](ForwardOutcome outcome) {
        health.record_failure(cfg, clock.now());
        result.outcome = watch.client_gone ? ForwardOutcome::client_gone : outcome;
        return result;
    };
    auto outcome_of = [](const beast::error_code& ec) {
        return ec == beast::error::timeout ? ForwardOutcome::upstream_timeout : ForwardOutcome::upstream_unavailable;
    };

    std::unique_ptr<UpstreamConnection> conn;
    std::optional<UpstreamResponseParser> parser;
    for (int attempt = 0;; ++attempt) {
        auto acquired = co_await pool.acquire(attempt > 0);
        result.tls.count(acquired.handshake);
        if (!acquired.tls_failure.empty()) result.tls.failure = std::move(acquired.tls_failure);
        if (watch.client_gone) {
            if (acquired.connection) pool.release(std::move(acquired.connection), false);
            result.outcome = ForwardOutcome::client_gone;
            co_return result;
        }
        if (acquired.pool_exhausted) {  // our own connection limit, not a sick upstream: no ejection
            result.outcome = ForwardOutcome::upstream_timeout;
            co_return result;
        }
        if (acquired.ec) co_return fail_upstream(outcome_of(acquired.ec));
        conn = std::move(acquired.connection);
        watch.active = conn.get();

        conn->stream.expires_after(ns(cfg.first_byte_timeout));
        std::array<net::const_buffer, 2> request_bytes = {net::buffer(request.head), net::buffer(request.body)};
        auto [wec, written] = co_await write_all(conn->stream, request_bytes);
        beast::error_code rec = wec;
        // 1xx responses are interim (RFC 9110 §15.2): each is dropped and the final one read,
        // all under the one first-byte deadline. Relayed as final, a 100 would end this
        // exchange and leave the real response on the connection for the next request.
        for (int interim = 0; !rec; ++interim) {
            parser.emplace();
            parser->header_limit(k_upstream_header_limit);
            parser->body_limit(boost::none);
            if (client.head_request) parser->skip(true);
            std::tie(rec, std::ignore) = co_await http::async_read_header(conn->stream, conn->buffer, *parser, k_use);
            auto status = parser->get().result_int();
            if (rec || status >= 200) break;
            // 101 would switch protocols, which no request of ours asks for.
            if (status == 101 || interim == k_max_interim_responses) rec = http::error::bad_status;
        }
        if (!rec) break;

        watch.active = nullptr;
        bool was_reused = conn->reused;
        pool.release(std::move(conn), false);
        if (watch.client_gone) {
            result.outcome = ForwardOutcome::client_gone;
            co_return result;
        }
        // A pooled connection may have been closed by the upstream just as we reused it.
        if (was_reused && attempt == 0 && is_connection_failure(rec)) continue;
        co_return fail_upstream(outcome_of(rec));
    }

    result.first_byte_at = clock.now();
    result.status = parser->get().result_int();
    if (hooks.retry_elsewhere && hooks.retry_elsewhere(result.status)) {
        watch.active = nullptr;
        // The refusal's body is not read: the connection goes, not back to the pool.
        if (result.status >= 500) health.record_failure(cfg, clock.now());
        else health.record_success();
        pool.release(std::move(conn), false);
        result.outcome = watch.client_gone ? ForwardOutcome::client_gone : ForwardOutcome::retry_elsewhere;
        co_return result;
    }
    bool upstream_keep_alive = parser->get().keep_alive();
    // The relay buffer lives with the connection: a 16 KiB array in this coroutine's frame made
    // every request allocate a 17 KiB frame.
    std::span<char> chunk(conn->relay_buffer.get(), UpstreamConnection::k_relay_size);
    RelayOptions options{client.version, client.keep_alive, client.head_request, cfg.stream_idle_timeout,
                         k_upstream_header_limit};
    auto relayed = co_await relay(conn->stream, conn->buffer, *parser, chunk, client.stream, options, hooks);
    result.body_bytes = relayed.body_bytes;
    result.response_started = relayed.head_sent;
    result.stopped = relayed.stopped;
    watch.active = nullptr;
    bool reusable = upstream_keep_alive && parser->is_done() && !client.head_request;
    result.outcome =
        after_relay(relayed, watch.client_gone, result.status, reusable, {pool, health, std::move(conn), clock.now()});
    co_return result;
}

}  // namespace tokengate::proxy
