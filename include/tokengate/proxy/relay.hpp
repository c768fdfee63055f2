#pragma once

// The relay: a response whose head has been read goes to the client, re-framed, body piece by
// piece with backpressure. A template on both streams, so that the unit tests run it on
// beast::test::stream byte for byte; the gateway runs it on TimedStream.

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>

#include "tokengate/core/clock.hpp"
#include "tokengate/core/function_ref.hpp"
#include "tokengate/core/recycled.hpp"
#include "tokengate/proxy/message.hpp"
#include "tokengate/proxy/timed_stream.hpp"
#include "tokengate/proxy/wire.hpp"

namespace tokengate::proxy {

namespace http = beast::http;

/// What a stream sends without waiting (TimedStream::write_now); other streams (the tests')
/// send nothing that way, and every byte goes by their asynchronous write.
template <class Stream>
std::size_t write_now(Stream&, std::span<const net::const_buffer>, beast::error_code&) {
    return 0;
}
inline std::size_t write_now(TimedStream& stream, std::span<const net::const_buffer> buffers, beast::error_code& ec) {
    return stream.write_now(buffers, ec);
}

/// Writes all of `buffers`: what the socket takes at once, then the rest asynchronously.
/// Completes with the error and the bytes written, as net::async_write with as_tuple does.
template <class Stream, std::size_t N>
net::awaitable<std::tuple<beast::error_code, std::size_t>> write_all(Stream& stream,
                                                                     std::array<net::const_buffer, N> buffers) {
    beast::error_code ec;
    std::size_t sent = write_now(stream, buffers, ec);
    if (ec || sent == net::buffer_size(buffers)) co_return std::make_tuple(ec, sent);
    beast::buffers_suffix<std::array<net::const_buffer, N>> rest(buffers);
    rest.consume(sent);
    auto [wec, more] = co_await net::async_write(stream, rest, net::as_tuple(net::use_awaitable));
    co_return std::make_tuple(wec, sent + more);
}

/// The exchange's say in the relay. Views of callables the caller keeps (none is copied per
/// request): each must outlive the forward.
struct ForwardHooks {
    /// Sees the upstream's response head and appends the gateway's own fields to the head
    /// that goes to the client.
    core::FunctionRef<void(const UpstreamResponseHead&, core::RecycledString& head)> decorate;
    /// Upstream response fields the gateway's own replace (not forwarded).
    wire::FieldFilter replaced = nullptr;
    /// Sees every body chunk and returns the bytes to send on: the same, or fewer (it may hold
    /// back a partial event or drop one). The view must stay valid until the next call. `last`
    /// comes with the final piece. Only a response without Content-Length may change size.
    core::FunctionRef<std::string_view(std::string_view data, bool last)> on_chunk;
    /// Asked after each piece (but the last) went to the client, and may wait (a shared budget
    /// charged on Redis): bytes to send now (events on_chunk held back), and whether the
    /// response ends with them (the upstream's rest is not read; its connection is dropped,
    /// which cancels its request).
    struct Next {
        std::string_view bytes;
        bool end = false;
    };
    core::FunctionRef<net::awaitable<Next>()> after_piece;
    /// Asked with the upstream's final status before anything is relayed: true turns the
    /// response away unread (the request goes to another upstream, SPEC §22's retry).
    core::FunctionRef<bool(unsigned status)> retry_elsewhere;
};

struct RelayOptions {
    unsigned version = 11;  // the client's
    bool keep_alive = true;
    bool head_request = false;
    core::Nanos idle_timeout = 0;  // per read from the upstream, per write to the client
    /// Unparsed upstream bytes pile up only in a chunk line or trailers that never end.
    std::size_t max_unparsed = 64 * 1024;
};

struct Relayed {
    bool head_sent = false;
    bool upstream_failed = false;  // bad bytes, a reset or a timeout from the upstream
    bool client_failed = false;    // a write to the client failed
    bool stopped = false;          // `stop` ended the response before the upstream did
    std::uint64_t body_bytes = 0;
};

/// Deadlines: TimedStream has them; an in-memory test stream needs none.
inline void set_deadline(TimedStream& stream, core::Nanos timeout) {
    stream.expires_after(std::chrono::nanoseconds(timeout));
}
template <class Stream>
void set_deadline(Stream&, core::Nanos) {}

/// Builds the client's head from the upstream's: status, forwardable fields, the framing the
/// client gets (chunked when the body has no length and the client speaks HTTP/1.1), and the
/// hook's own fields.
core::RecycledString client_head(const UpstreamResponseParser& parser, RelayOptions& options, bool& chunked,
                                 const ForwardHooks& hooks);

template <class Upstream, class Client>
net::awaitable<Relayed> relay(Upstream& upstream, beast::flat_buffer& buffer, UpstreamResponseParser& parser,
                              std::span<char> chunk, Client& client, RelayOptions options, const ForwardHooks& hooks) {
    constexpr auto use = net::as_tuple(net::use_awaitable);
    Relayed out;
    auto& response = parser.get();
    bool body_follows = !parser.is_done();
    bool chunked = false;
    auto head = client_head(parser, options, chunked, hooks);

    // Sends what is pending — the head if not yet sent, a body piece, the last chunk — in one
    // write: with the body bytes that came with the head (a JSON completion usually does), head
    // and body leave in one segment, one wakeup of the client fewer.
    char size_line[24];
    auto send = [&](std::string_view piece, bool last) {
        std::array<net::const_buffer, 5> pieces{};
        std::size_t n = 0;
        if (!out.head_sent) pieces[n++] = net::buffer(head);
        if (chunked && !piece.empty()) pieces[n++] = net::buffer(wire::chunk_size_line(piece.size(), size_line));
        if (!piece.empty()) pieces[n++] = net::buffer(piece);
        if (chunked && !piece.empty()) pieces[n++] = net::buffer(wire::k_crlf);
        if (chunked && last) pieces[n++] = net::buffer(wire::k_last_chunk);
        out.head_sent = true;
        out.body_bytes += piece.size();
        set_deadline(client, options.idle_timeout);
        // The array goes by value into the operation (a view of it would outlive it).
        return write_all(client, pieces);
    };

    // A stream still generating gets its head at once, so the client sees the response begin.
    if (options.head_request || (body_follows && buffer.size() == 0)) {
        auto [ec, n] = co_await send({}, false);
        out.client_failed = static_cast<bool>(ec);
    }
    while (!out.client_failed && !options.head_request && !parser.is_done()) {
        response.body().data = chunk.data();
        response.body().size = chunk.size();
        set_deadline(upstream, options.idle_timeout);
        // One read often brings several upstream chunks (SSE events); Beast's parser yields one
        // per call. Take in everything buffered, so they leave in one send, not one each; read
        // only when that gave no body byte. (Not http::async_read_some: it feeds the parser in
        // the way Beast 1.81 asserts on, see wire::put_buffered.)
        beast::error_code bad;
        wire::put_buffered(parser, buffer, bad);
        while (!bad && !parser.is_done() && response.body().size == chunk.size()) {
            if (buffer.size() >= options.max_unparsed) {
                bad = http::error::buffer_overflow;
                break;
            }
            auto room = buffer.capacity() - buffer.size();
            auto [rec, rn] = co_await upstream.async_read_some(buffer.prepare(room >= 4096 ? room : 16384), use);
            if (rec == net::error::eof && parser.got_some()) {
                parser.put_eof(bad);  // completes a body that ends with the connection
                break;
            }
            if (rec) {
                bad = rec;
                break;
            }
            buffer.commit(rn);
            wire::put_buffered(parser, buffer, bad);
        }
        bool last = parser.is_done();
        std::string_view piece(chunk.data(), chunk.size() - response.body().size);
        if (bad && piece.empty()) {
            out.upstream_failed = true;
            break;
        }
        if (hooks.on_chunk) piece = hooks.on_chunk(piece, last);
        // Nothing to send yet (only chunk framing was parsed, or the hook holds a partial event).
        if (piece.empty() && !last) {
            if (!bad) continue;
            out.upstream_failed = true;
            break;
        }
        auto [wec, wn] = co_await send(piece, last);
        out.client_failed = static_cast<bool>(wec);
        if (bad) {  // what came before the bad bytes went on; the stream ends here
            out.upstream_failed = true;
            break;
        }
        if (!last && !out.client_failed && hooks.after_piece) {
            auto next = co_await hooks.after_piece();
            if (!next.bytes.empty() || next.end) {
                auto [sec, sn] = co_await send(next.bytes, next.end);
                out.client_failed = static_cast<bool>(sec);
            }
            if (next.end) {
                out.stopped = true;
                break;
            }
        }
    }
    if (!out.head_sent && !out.upstream_failed && !out.client_failed) {  // a response without a body
        auto [ec, n] = co_await send({}, true);
        out.client_failed = static_cast<bool>(ec);
    }
    co_return out;
}

}  // namespace tokengate::proxy
