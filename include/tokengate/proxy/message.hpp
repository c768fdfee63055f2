#pragma once

// The request path's HTTP messages: the client's request and the upstream's response head, whose
// fields and body live in recycled blocks (core/recycled.hpp), so that parsing them allocates
// nothing once a worker thread is warm (SPEC §19).

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstddef>
#include <string>
#include <string_view>

#include "tokengate/core/recycled.hpp"

namespace tokengate::proxy {

namespace http = boost::beast::http;

using Fields = http::basic_fields<core::RecyclingAllocator<char>>;
using RequestBody = http::basic_string_body<char, std::char_traits<char>, core::RecyclingAllocator<char>>;
using ClientRequest = http::request<RequestBody, Fields>;
using ClientRequestHead = http::request_header<Fields>;
using UpstreamResponseHead = http::response_header<Fields>;
/// The upstream's response: its head parsed into Fields, its body relayed through a buffer.
using UpstreamResponseParser = http::response_parser<http::buffer_body, core::RecyclingAllocator<char>>;

// Lookups in a head's few fields by one pass over them. Beast's own (`fields[name]`, count,
// find) search its case-insensitive index by the name's text, a known name spelled out first:
// ~200 instructions each, a dozen a request.

/// The first field `name` Beast knows by name, "" if none.
template <class Allocator>
std::string_view first_field(const http::basic_fields<Allocator>& fields, http::field name) {
    for (const auto& f : fields)
        if (f.name() == name) return f.value();
    return {};
}

/// The first field named `name` (any case), "" if none.
template <class Allocator>
std::string_view first_field(const http::basic_fields<Allocator>& fields, std::string_view name) {
    for (const auto& f : fields)
        if (f.name_string().size() == name.size() && boost::beast::iequals(f.name_string(), name)) return f.value();
    return {};
}

/// How many fields `name` the head has.
template <class Allocator>
std::size_t count_fields(const http::basic_fields<Allocator>& fields, http::field name) {
    std::size_t n = 0;
    for (const auto& f : fields) n += f.name() == name;
    return n;
}

}  // namespace tokengate::proxy
