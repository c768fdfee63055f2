#pragma once

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/fields.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace tokengate::proxy::wire {

namespace http = boost::beast::http;

// HTTP/1.1 message heads written straight into one contiguous string. Beast's serializer hands
// the socket one buffer per header field (a dozen iovecs for a response with rate-limit
// headers) and walks them through nested buffer views; one string is one copy and one iovec.
// `Out` is std::string or, on the request path, core::RecycledString (instantiated in wire.cpp).

/// "HTTP/1.1 200 OK\r\n"; an empty reason takes the standard one.
template <class Out>
void status_line(Out& out, unsigned version, unsigned status, std::string_view reason = {});
/// "Name: value\r\n"
template <class Out>
void field(Out& out, std::string_view name, std::string_view value);
/// The Connection field this version needs to say `keep_alive` (none when it is the default).
template <class Out>
void connection(Out& out, unsigned version, bool keep_alive);
/// "Content-Length: n\r\n"
template <class Out>
void content_length(Out& out, std::size_t length);

/// Appends every field of `fields` except those a proxy must not forward (RFC 9110 §7.6.1:
/// hop-by-hop fields and those the Connection field names) and those `replaced` names.
/// The fields are http::fields or proxy::Fields.
using FieldFilter = bool (*)(http::field id, std::string_view name);
template <class Out, class Allocator>
void forwardable_fields(Out& out, const http::basic_fields<Allocator>& fields, FieldFilter replaced);

/// The chunk-size line of chunked transfer coding for `size` bytes: "1a2b\r\n".
std::string_view chunk_size_line(std::size_t size, char (&buffer)[24]);
inline constexpr std::string_view k_crlf = "\r\n";
inline constexpr std::string_view k_last_chunk = "0\r\n\r\n";

/// Feeds `parser` what `buffer` already holds, consuming what it takes, until the message is
/// done, the buffer runs dry, or the parser needs more bytes or a fresh body buffer (neither is
/// an error here). A parse error is left in `ec`. Parsing what has arrived costs no
/// asynchronous operation: a whole request, or every SSE event one read brought.
template <bool isRequest>
void put_buffered(http::basic_parser<isRequest>& parser, boost::beast::flat_buffer& buffer,
                  boost::beast::error_code& ec) {
    while (!parser.is_done() && buffer.size() > 0) {
        // Beast 1.81 asserts that a chunked body's last chunk is re-parsed from at least 5 bytes
        // ("0\r\n" kept unconsumed, plus its trailer section), which a client sending byte by byte
        // breaks. A chunked body cannot end in fewer than 5 buffered bytes, so wait for them.
        if (parser.is_header_done() && parser.chunked() && buffer.size() < 5) return;
        auto used = parser.put(buffer.data(), ec);
        buffer.consume(used);
        if (ec == http::error::need_more || ec == http::error::need_buffer) {
            ec = {};
            return;
        }
        if (ec || used == 0) return;
    }
}

}  // namespace tokengate::proxy::wire
