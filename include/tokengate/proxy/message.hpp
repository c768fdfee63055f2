#pragma once

// The request path's HTTP messages: the client's request and the upstream's response head, whose
// fields and body live in recycled blocks (core/recycled.hpp), so that parsing them allocates
// nothing once a worker thread is warm (SPEC §19).

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <string>

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

}  // namespace tokengate::proxy
