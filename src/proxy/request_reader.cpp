#include "tokengate/proxy/request_reader.hpp"

#include <boost/beast/core/string.hpp>

#include "tokengate/proxy/wire.hpp"

namespace tokengate::proxy {

namespace {

std::string_view view_of(const boost::beast::flat_buffer& buffer) {
    auto data = buffer.data();
    return {static_cast<const char*>(data.data()), data.size()};
}

std::string_view trimmed(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

}  // namespace

RequestErrorText describe(RequestError error) {
    switch (error) {
        case RequestError::header_too_large:
            return {431, "headers_too_large", "The request headers exceed the gateway's limit."};
        case RequestError::body_too_large:
            return {413, "request_too_large", "The request body exceeds the gateway's limit."};
        case RequestError::obs_fold: return {400, "invalid_http", "Folded header lines (obs-fold) are not accepted."};
        case RequestError::bad_transfer_encoding:
            return {400, "invalid_http", "Transfer-Encoding must end with chunked."};
        case RequestError::unsupported_transfer_coding:
            return {501, "invalid_http", "Only the chunked transfer coding is supported."};
        case RequestError::bad_host: return {400, "invalid_http", "An HTTP/1.1 request needs exactly one Host header."};
        case RequestError::malformed:
        case RequestError::none: break;
    }
    return {400, "invalid_http", "Malformed HTTP request."};
}

std::optional<std::size_t> header_section_end(std::string_view bytes, std::size_t from) {
    auto at = bytes.find("\r\n\r\n", from);
    if (at == std::string_view::npos) return std::nullopt;
    return at + 4;
}

bool has_obs_fold(std::string_view head) {
    // Every CRLF but the blank line's: a space or tab after it continues the line before.
    for (auto i = head.find("\r\n"); i != std::string_view::npos && i + 2 < head.size(); i = head.find("\r\n", i + 2))
        if (head[i + 2] == ' ' || head[i + 2] == '\t') return true;
    return false;
}

RequestReader::RequestReader(std::size_t max_header_bytes, std::size_t max_body_bytes)
    : max_header_bytes_(max_header_bytes) {
    parser_.header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(max_header_bytes, UINT32_MAX)));
    parser_.body_limit(max_body_bytes);
}

RequestReader::Progress RequestReader::fail(RequestError e) {
    error_ = e;
    return Progress::failed;
}

RequestReader::Progress RequestReader::feed(boost::beast::flat_buffer& buffer) {
    if (error_ != RequestError::none) return Progress::failed;
    if (!parser_.is_header_done()) return feed_header(buffer);
    boost::beast::error_code ec;
    wire::put_buffered(parser_, buffer, ec);
    if (ec) return fail(ec == http::error::body_limit ? RequestError::body_too_large : RequestError::malformed);
    return parser_.is_done() ? Progress::done : Progress::need_more;
}

RequestReader::Progress RequestReader::feed_header(boost::beast::flat_buffer& buffer) {
    // RFC 9112 §2.2: empty lines before a request line are ignored (a client may send a CRLF
    // after a body it thought needed one).
    while (scanned_ == 0 && view_of(buffer).starts_with("\r\n")) buffer.consume(2);
    auto bytes = view_of(buffer);
    // Resume the search where the last one stopped (three bytes back, for a split "\r\n\r\n").
    auto end = header_section_end(bytes, scanned_ >= 3 ? scanned_ - 3 : 0);
    if (!end) {
        scanned_ = bytes.size();
        return bytes.size() > max_header_bytes_ ? fail(RequestError::header_too_large) : Progress::need_more;
    }
    if (*end > max_header_bytes_) return fail(RequestError::header_too_large);
    if (has_obs_fold(bytes.substr(0, *end))) return fail(RequestError::obs_fold);
    boost::beast::error_code ec;
    parser_.eager(false);
    auto used = parser_.put(boost::asio::buffer(bytes.data(), *end), ec);
    buffer.consume(used);
    if (ec == http::error::body_limit) return fail(RequestError::body_too_large);
    if (ec == http::error::header_limit) return fail(RequestError::header_too_large);
    if (ec || !parser_.is_header_done()) return fail(RequestError::malformed);
    if (auto e = check_head(); e != RequestError::none) return fail(e);
    if (parser_.chunked())
        for (const auto& f : parser_.get().base())
            chunked_head_.emplace_back(std::string(f.name_string()), std::string(f.value()));
    parser_.eager(true);
    return parser_.is_done() ? Progress::done : Progress::header_done;
}

RequestError RequestReader::check_head() const {
    const auto& head = parser_.get();
    if (count_fields(head, http::field::transfer_encoding) > 0) {
        // Beast frames by chunked only when it is the final coding; any other final coding
        // leaves the body's end unknown (RFC 9112 §6.3: 400, then close).
        if (!parser_.chunked()) return RequestError::bad_transfer_encoding;
        if (!boost::beast::iequals(trimmed(first_field(head, http::field::transfer_encoding)), "chunked"))
            return RequestError::unsupported_transfer_coding;
    }
    auto hosts = count_fields(head, http::field::host);
    if (hosts > 1 || (head.version() >= 11 && hosts == 0)) return RequestError::bad_host;
    // One field line, two values ("Host: a, b"): which one the request is for is ambiguous.
    if (hosts == 1 && first_field(head, http::field::host).find(',') != std::string_view::npos)
        return RequestError::bad_host;
    return RequestError::none;
}

ClientRequest RequestReader::release() {
    auto message = parser_.release();
    if (message.chunked()) {
        // Trailer fields came after the body; they are not part of the head that goes on.
        for (auto it = message.begin(); it != message.end();) it = message.erase(it);
        for (const auto& [name, value] : chunked_head_) message.insert(name, value);
    }
    return message;
}

}  // namespace tokengate::proxy
