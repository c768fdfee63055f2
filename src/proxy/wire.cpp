#include "tokengate/proxy/wire.hpp"

#include "tokengate/proxy/message.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/container/small_vector.hpp>

#include <algorithm>
#include <charconv>

namespace tokengate::proxy::wire {

namespace {

template <class Out>
void append_number(Out& out, std::size_t n) {
    char digits[24];
    auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
    out.append(digits, end);
}

/// The field names that the Connection fields list, read once per head.
template <class Fields>
boost::container::small_vector<std::string_view, 8> connection_tokens(const Fields& fields) {
    boost::container::small_vector<std::string_view, 8> tokens;
    // A pass over the head's few fields, comparing the names Beast already resolved:
    // equal_range would search the case-insensitive index by the name's text.
    for (const auto& f : fields) {
        if (f.name() != http::field::connection) continue;
        std::string_view list = f.value();
        while (!list.empty()) {
            auto comma = list.find(',');
            auto token = list.substr(0, comma);
            list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
            while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.remove_prefix(1);
            while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
            if (!token.empty()) tokens.push_back(token);
        }
    }
    return tokens;
}

/// RFC 9110 §7.6.1's hop-by-hop fields; Beast names each of them when it parses a head.
bool standard_hop_by_hop(http::field id) {
    switch (id) {
        case http::field::connection:
        case http::field::keep_alive:
        case http::field::proxy_authenticate:
        case http::field::proxy_authorization:
        case http::field::te:
        case http::field::trailer:
        case http::field::transfer_encoding:
        case http::field::upgrade:
        case http::field::proxy_connection: return true;
        default: return false;
    }
}

}  // namespace

template <class Out>
void status_line(Out& out, unsigned version, unsigned status, std::string_view reason) {
    out.append(version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ");
    append_number(out, status);
    out.push_back(' ');
    if (reason.empty()) reason = http::obsolete_reason(static_cast<http::status>(status));
    out.append(reason);
    out.append(k_crlf);
}

template <class Out>
void field(Out& out, std::string_view name, std::string_view value) {
    out.append(name).append(": ").append(value).append(k_crlf);
}

template <class Out>
void connection(Out& out, unsigned version, bool keep_alive) {
    if (version >= 11 && !keep_alive) out.append("Connection: close\r\n");
    else if (version < 11 && keep_alive) out.append("Connection: keep-alive\r\n");
}

template <class Out>
void content_length(Out& out, std::size_t length) {
    out.append("Content-Length: ");
    append_number(out, length);
    out.append(k_crlf);
}

template <class Out, class Allocator>
void forwardable_fields(Out& out, const http::basic_fields<Allocator>& fields, FieldFilter replaced) {
    auto named = connection_tokens(fields);
    for (const auto& f : fields) {
        auto name = f.name_string();
        if (standard_hop_by_hop(f.name()) || (replaced && replaced(f.name(), name))) continue;
        if (std::any_of(named.begin(), named.end(), [&](auto token) { return boost::beast::iequals(token, name); }))
            continue;
        field(out, name, f.value());
    }
}

// The heads the gateway writes: std::string, or a recycled one on the request path.
#define TOKENGATE_WIRE_FOR(Out)                                               \
    template void status_line(Out&, unsigned, unsigned, std::string_view);    \
    template void field(Out&, std::string_view, std::string_view);            \
    template void connection(Out&, unsigned, bool);                           \
    template void content_length(Out&, std::size_t);                          \
    template void forwardable_fields(Out&, const http::fields&, FieldFilter); \
    template void forwardable_fields(Out&, const Fields&, FieldFilter);
TOKENGATE_WIRE_FOR(std::string)
TOKENGATE_WIRE_FOR(core::RecycledString)
#undef TOKENGATE_WIRE_FOR

std::string_view chunk_size_line(std::size_t size, char (&buffer)[24]) {
    auto end = std::to_chars(buffer, buffer + 20, size, 16).ptr;
    *end++ = '\r';
    *end++ = '\n';
    return {buffer, static_cast<std::size_t>(end - buffer)};
}

}  // namespace tokengate::proxy::wire
