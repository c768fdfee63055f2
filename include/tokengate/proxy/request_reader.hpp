#pragma once

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokengate/proxy/message.hpp"

namespace tokengate::proxy {

namespace http = boost::beast::http;

/// Why a client's request is refused before anything else reads it.
enum class RequestError {
    none,
    header_too_large,             // 431
    body_too_large,               // 413
    malformed,                    // 400: Beast could not parse it
    obs_fold,                     // 400: RFC 9112 §5.2, a folded field line
    bad_transfer_encoding,        // 400: RFC 9112 §6.3, a final coding other than chunked
    unsupported_transfer_coding,  // 501: RFC 9112 §6.1, a coding before chunked
    bad_host,                     // 400: RFC 9112 §3.2, no Host in HTTP/1.1, or several
};

struct RequestErrorText {
    unsigned status;
    std::string_view code;
    std::string_view message;
};
RequestErrorText describe(RequestError error);

/// Parses one request from bytes the caller reads, with no I/O of its own, so that what the
/// session does can be fuzzed byte for byte. The header section is parsed only once it is
/// whole (its raw bytes are checked for obs-fold, which Beast would join silently), and its
/// framing is checked before any body byte is read: a request Beast would take as bodiless
/// while a body follows (Transfer-Encoding: gzip) would smuggle that body in as a second
/// request. Chunked trailer fields are dropped, never merged into the head.
class RequestReader {
public:
    RequestReader(std::size_t max_header_bytes, std::size_t max_body_bytes);

    enum class Progress { need_more, header_done, done, failed };
    /// Takes what `buffer` holds (consuming it) up to the end of the header, or, once the
    /// header is done, up to the end of the message. `failed` leaves the reason in error().
    Progress feed(boost::beast::flat_buffer& buffer);

    bool header_done() const { return parser_.is_header_done(); }
    bool done() const { return parser_.is_done(); }
    RequestError error() const { return error_; }
    const ClientRequest& get() const { return parser_.get(); }
    /// The finished message (call once, after `done`).
    ClientRequest release();

private:
    Progress fail(RequestError e);
    Progress feed_header(boost::beast::flat_buffer& buffer);
    RequestError check_head() const;

    http::request_parser<RequestBody, core::RecyclingAllocator<char>> parser_;
    std::size_t max_header_bytes_;
    std::size_t scanned_ = 0;  // bytes already searched for the header's end
    // A chunked request's head, as it was before any trailer: Beast files a trailer field next
    // to a head field of the same name, so trailers cannot be told apart by position.
    std::vector<std::pair<std::string, std::string>> chunked_head_;
    RequestError error_ = RequestError::none;
};

/// The header section's length in `bytes` (through the blank line), if it is all there.
/// `from` skips bytes already searched.
std::optional<std::size_t> header_section_end(std::string_view bytes, std::size_t from = 0);
/// True if a field line in `head` is folded (CRLF followed by a space or tab).
bool has_obs_fold(std::string_view head);

}  // namespace tokengate::proxy
