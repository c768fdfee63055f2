#pragma once

#include <boost/beast/http.hpp>

#include <span>
#include <string>
#include <string_view>

#include "tokengate/limiter/headers.hpp"

namespace tokengate::server {

namespace http = boost::beast::http;

/// The OpenAI error body: {"error":{"message","type","param":null,"code"}}.
std::string error_body(std::string_view message, std::string_view type, std::string_view code);

/// Whose error shape a client reads: OpenAI's, or the Anthropic Messages API's (SPEC §20).
enum class ErrorShape { openai, anthropic };

/// A Messages request (its path, or the `anthropic-version` header every Anthropic SDK sends)
/// is answered in Anthropic's shape.
ErrorShape error_shape_for(std::string_view path, std::string_view anthropic_version);

/// A whole error response as it goes on the wire: head (with X-Request-Id, when given, and
/// `extra` fields such as the rate-limit headers) and the error body: OpenAI's, or
/// {"type":"error","error":{"type","message"},"request_id"} in Anthropic's shape.
std::string error_response_text(http::status status, std::string_view type, std::string_view code,
                                std::string_view message, unsigned version, bool keep_alive,
                                std::string_view request_id, std::span<const limiter::HeaderField> extra,
                                ErrorShape shape = ErrorShape::openai);

/// The same as a Beast message (for the admin listener).
http::response<http::string_body> error_response(http::status status, std::string_view type, std::string_view code,
                                                 std::string_view message, unsigned version, bool keep_alive);

}  // namespace tokengate::server
