#pragma once

#include <boost/beast/http.hpp>

#include <string>
#include <string_view>

namespace tokengate::server {

namespace http = boost::beast::http;

/// The OpenAI error body: {"error":{"message","type","param":null,"code"}}.
std::string error_body(std::string_view message, std::string_view type, std::string_view code);

http::response<http::string_body> error_response(http::status status, std::string_view type,
                                                 std::string_view code, std::string_view message,
                                                 unsigned version, bool keep_alive);

}  // namespace tokengate::server
