#pragma once

// What every admin endpoint answers with: JSON, and errors in the OpenAI shape.

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <string_view>

#include "tokengate/server/responses.hpp"

namespace tokengate::server {

using AdminResponse = boost::beast::http::response<boost::beast::http::string_body>;

inline AdminResponse json_response(boost::beast::http::status status, const nlohmann::json& body) {
    AdminResponse res{status, 11};
    res.set(boost::beast::http::field::content_type, "application/json");
    res.body() = body.dump();
    return res;
}

inline AdminResponse admin_error(boost::beast::http::status status, std::string_view code, std::string_view message) {
    return error_response(status, "invalid_request_error", code, message, 11, true);
}

}  // namespace tokengate::server
