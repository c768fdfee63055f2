#include "tokengate/proxy/forward.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <array>
#include <string>
#include <vector>

namespace tokengate::proxy {

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);
constexpr std::size_t k_relay_chunk = 16 * 1024;
constexpr std::uint32_t k_upstream_header_limit = 64 * 1024;

std::chrono::nanoseconds ns(core::Nanos n) { return std::chrono::nanoseconds(n); }

bool is_connection_failure(const beast::error_code& ec) {
    return ec == net::error::connection_reset || ec == net::error::connection_refused ||
           ec == net::error::broken_pipe || ec == http::error::end_of_stream || ec == net::error::eof;
}

}  // namespace

void strip_hop_by_hop(http::fields& fields) {
    std::vector<std::string> named;
    auto [first, last] = fields.equal_range(http::field::connection);
    for (auto it = first; it != last; ++it) {
        std::string_view v = it->value();
        std::size_t start = 0;
        while (start <= v.size()) {
            auto comma = v.find(',', start);
            auto token = v.substr(start, comma == std::string_view::npos ? v.size() - start : comma - start);
            while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
            while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
            if (!token.empty()) named.emplace_back(token);
            if (comma == std::string_view::npos) break;
            start = comma + 1;
        }
    }
    for (const auto& name : named) fields.erase(name);
    for (auto f : {http::field::connection, http::field::keep_alive, http::field::proxy_authenticate,
                   http::field::proxy_authorization, http::field::te, http::field::trailer,
                   http::field::transfer_encoding, http::field::upgrade, http::field::proxy_connection})
        fields.erase(f);
}

net::awaitable<ForwardResult> forward(ConnectionPool& pool, UpstreamHealth& health,
                                      http::request<http::string_body>& request, ClientSide client,
                                      std::shared_ptr<ExchangeWatch> watch, const ForwardHooks& hooks,
                                      const core::Clock& clock) {
    ForwardResult result;
    const auto& cfg = pool.config();
    auto fail_upstream = [&](ForwardOutcome outcome) {
        health.record_failure(cfg, clock.now());
        result.outcome = watch->client_gone ? ForwardOutcome::client_gone : outcome;
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
        if (watch->client_gone) {
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
        watch->active = conn.get();

        conn->stream.expires_after(ns(cfg.first_byte_timeout));
        auto [wec, written] = co_await http::async_write(conn->stream, request, k_use);
        parser.emplace();
        parser->header_limit(k_upstream_header_limit);
        parser->body_limit(boost::none);
        if (client.head_request) parser->skip(true);
        beast::error_code rec = wec;
        if (!wec) std::tie(rec, std::ignore) = co_await http::async_read_header(conn->stream, conn->buffer, *parser, k_use);
        if (!rec) break;

        watch->active = nullptr;
        bool was_reused = conn->reused;
        pool.release(std::move(conn), false);
        if (watch->client_gone) {
            result.outcome = ForwardOutcome::client_gone;
            co_return result;
        }
        // A pooled connection may have been closed by the upstream just as we reused it.
        if (was_reused && attempt == 0 && is_connection_failure(rec)) continue;
        co_return fail_upstream(outcome_of(rec));
    }

    result.first_byte_at = clock.now();
    result.response_started = true;
    auto& response = parser->get();
    result.status = response.result_int();
    bool upstream_keep_alive = response.keep_alive();
    bool has_length = parser->content_length().has_value();
    bool body_follows = !parser->is_done();
    strip_hop_by_hop(response.base());
    response.version(client.version);
    if (body_follows && !has_length) {
        if (client.version >= 11) response.chunked(true);
        else client.keep_alive = false;  // HTTP/1.0: the body ends when the connection closes
    }
    response.keep_alive(client.keep_alive);
    if (hooks.decorate) hooks.decorate(response.base());

    http::serializer<false, http::buffer_body> serializer{response};
    // When body bytes came with the head (a JSON completion usually does), the head leaves
    // with the first body piece in one send: one segment and one wakeup of the client fewer.
    // Otherwise (a stream still generating) the head goes at once, so the client sees it early.
    bool head_alone = client.head_request || (body_follows && conn->buffer.size() == 0);
    if (head_alone) {
        client.stream.expires_after(ns(cfg.stream_idle_timeout));
        auto [hec, hn] = co_await http::async_write_header(client.stream, serializer, k_use);
        if (hec) {
            watch->active = nullptr;
            pool.release(std::move(conn), false);
            result.outcome = ForwardOutcome::client_gone;
            co_return result;
        }
    }

    std::array<char, k_relay_chunk> chunk;
    bool upstream_failed = false;
    bool client_failed = false;
    while (!client.head_request) {
        if (!parser->is_done()) {
            response.body().data = chunk.data();
            response.body().size = chunk.size();
            conn->stream.expires_after(ns(cfg.stream_idle_timeout));
            auto [rec, rn] = co_await http::async_read_some(conn->stream, conn->buffer, *parser, k_use);
            if (rec && rec != http::error::need_buffer) {
                upstream_failed = true;
                break;
            }
            std::size_t got = chunk.size() - response.body().size;
            bool last = parser->is_done();
            std::string_view out(chunk.data(), got);
            if (hooks.on_chunk) out = hooks.on_chunk(out, last);
            // Nothing to send yet (only chunk framing was parsed, or the hook holds a partial
            // event): an empty buffer with more=true would make the chunked serializer emit its
            // terminating chunk, so read on instead.
            if (out.empty() && !last) continue;
            response.body().data = const_cast<char*>(out.data());
            response.body().size = out.size();
            response.body().more = !last;
            result.body_bytes += out.size();
        } else {
            response.body().data = nullptr;
            response.body().size = 0;
            response.body().more = false;
        }
        client.stream.expires_after(ns(cfg.stream_idle_timeout));
        auto [wec, wn] = co_await http::async_write(client.stream, serializer, k_use);
        if (wec && wec != http::error::need_buffer) {
            client_failed = true;
            break;
        }
        if (serializer.is_done()) break;
    }

    watch->active = nullptr;
    if (upstream_failed && !watch->client_gone) {
        health.record_failure(cfg, clock.now());
        pool.release(std::move(conn), false);
        result.outcome = ForwardOutcome::upstream_broken;
        co_return result;
    }
    if (client_failed || watch->client_gone) {
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
