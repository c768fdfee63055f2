#include "tokengate/proxy/forward.hpp"

#include "tokengate/proxy/wire.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <span>
#include <string>
#include <vector>

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

}  // namespace

net::awaitable<ForwardResult> forward(ConnectionPool& pool, UpstreamHealth& health,
                                      const UpstreamRequest& request, ClientSide client,
                                      ExchangeWatch& watch, const ForwardHooks& hooks,
                                      const core::Clock& clock) {
    ForwardResult result;
    const auto& cfg = pool.config();
    auto fail_upstream = [&](ForwardOutcome outcome) {
        health.record_failure(cfg, clock.now());
        result.outcome = watch.client_gone ? ForwardOutcome::client_gone : outcome;
        return result;
    };
    auto outcome_of = [](const beast::error_code& ec) {
        return ec == beast::error::timeout ? ForwardOutcome::upstream_timeout
                                           : ForwardOutcome::upstream_unavailable;
    };

    std::unique_ptr<UpstreamConnection> conn;
    std::optional<http::response_parser<http::buffer_body>> parser;
    for (int attempt = 0;; ++attempt) {
        auto acquired = co_await pool.acquire(attempt > 0);
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
        auto [wec, written] = co_await net::async_write(conn->stream, request_bytes, k_use);
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
    auto& response = parser->get();
    result.status = response.result_int();
    bool upstream_keep_alive = response.keep_alive();
    bool body_follows = !parser->is_done();
    bool chunked = false;
    if (body_follows && !parser->content_length()) {
        if (client.version >= 11) chunked = true;  // re-framed: the upstream's framing is hop-by-hop
        else client.keep_alive = false;            // HTTP/1.0: the body ends when the connection closes
    }
    std::string head;
    head.reserve(1024);
    wire::status_line(head, client.version, result.status, response.reason());
    wire::forwardable_fields(head, response.base(), hooks.replaced);
    if (chunked) head.append("Transfer-Encoding: chunked\r\n");
    wire::connection(head, client.version, client.keep_alive);
    if (hooks.decorate) hooks.decorate(response.base(), head);
    head.append(wire::k_crlf);

    // Sends what is pending — the head if not yet sent, a body piece, the last chunk — in one
    // write: with the body bytes that came with the head (a JSON completion usually does), head
    // and body leave in one segment, one wakeup of the client fewer.
    bool head_sent = false;
    char size_line[24];
    auto send = [&](std::string_view piece, bool last) {
        std::array<net::const_buffer, 5> out{};
        std::size_t n = 0;
        if (!head_sent) out[n++] = net::buffer(head);
        if (chunked && !piece.empty()) out[n++] = net::buffer(wire::chunk_size_line(piece.size(), size_line));
        if (!piece.empty()) out[n++] = net::buffer(piece);
        if (chunked && !piece.empty()) out[n++] = net::buffer(wire::k_crlf);
        if (chunked && last) out[n++] = net::buffer(wire::k_last_chunk);
        head_sent = true;
        result.body_bytes += piece.size();
        client.stream.expires_after(ns(cfg.stream_idle_timeout));
        return net::async_write(client.stream, out, k_use);
    };

    bool upstream_failed = false;
    bool client_failed = false;
    // A stream still generating gets its head at once, so the client sees the response begin.
    if (client.head_request || (body_follows && conn->buffer.size() == 0)) {
        auto [ec, n] = co_await send({}, false);
        client_failed = static_cast<bool>(ec);
    }
    // The relay buffer lives with the connection: a 16 KiB array in this coroutine's frame made
    // every request allocate a 17 KiB frame.
    std::span<char> chunk(conn->relay_buffer.get(), UpstreamConnection::k_relay_size);
    while (!client_failed && !client.head_request && !parser->is_done()) {
        response.body().data = chunk.data();
        response.body().size = chunk.size();
        conn->stream.expires_after(ns(cfg.stream_idle_timeout));
        // One read often brings several upstream chunks (SSE events); Beast's parser yields one
        // per call. Take in everything buffered, so they leave in one send, not one each; read
        // only when that gave no body byte. (Not http::async_read_some: it feeds the parser in
        // the way Beast 1.81 asserts on, see wire::put_buffered.)
        beast::error_code drain_error;
        wire::put_buffered(*parser, conn->buffer, drain_error);
        while (!drain_error && !parser->is_done() && response.body().size == chunk.size()) {
            // Unparsed bytes pile up only in a chunk line or trailers that never end.
            if (conn->buffer.size() >= k_upstream_header_limit) {
                drain_error = http::error::buffer_overflow;
                break;
            }
            auto room = conn->buffer.capacity() - conn->buffer.size();
            auto [rec, rn] = co_await conn->stream.async_read_some(conn->buffer.prepare(room >= 4096 ? room : 16384), k_use);
            if (rec == net::error::eof && parser->got_some()) {
                parser->put_eof(drain_error);  // completes a body that ends with the connection
                break;
            }
            if (rec) {
                drain_error = rec;
                break;
            }
            conn->buffer.commit(rn);
            wire::put_buffered(*parser, conn->buffer, drain_error);
        }
        bool last = parser->is_done();
        std::string_view piece(chunk.data(), chunk.size() - response.body().size);
        if (drain_error && piece.empty()) {
            upstream_failed = true;
            break;
        }
        if (hooks.on_chunk) piece = hooks.on_chunk(piece, last);
        // Nothing to send yet (only chunk framing was parsed, or the hook holds a partial event).
        if (piece.empty() && !last) {
            if (!drain_error) continue;
            upstream_failed = true;
            break;
        }
        auto [wec, wn] = co_await send(piece, last);
        client_failed = static_cast<bool>(wec);
        if (drain_error) {  // what came before the bad bytes went on; the stream ends here
            upstream_failed = true;
            break;
        }
    }
    if (!head_sent && !upstream_failed && !client_failed) {  // a response without a body
        auto [ec, n] = co_await send({}, true);
        client_failed = static_cast<bool>(ec);
    }
    result.response_started = head_sent;

    watch.active = nullptr;
    if (upstream_failed && !watch.client_gone) {
        health.record_failure(cfg, clock.now());
        pool.release(std::move(conn), false);
        // Nothing reached the client yet (the head waited for the body): it can still get a 502.
        result.outcome = head_sent ? ForwardOutcome::upstream_broken : ForwardOutcome::upstream_unavailable;
        co_return result;
    }
    if (client_failed || watch.client_gone) {
        pool.release(std::move(conn), false);
        result.outcome = ForwardOutcome::client_gone;
        co_return result;
    }
    if (result.status >= 500) health.record_failure(cfg, clock.now());
    else health.record_success();
    pool.release(std::move(conn), upstream_keep_alive && parser->is_done() && !client.head_request);
    result.outcome = ForwardOutcome::completed;
    co_return result;
}

}  // namespace tokengate::proxy
