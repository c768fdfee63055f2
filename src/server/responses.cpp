#include "tokengate/server/responses.hpp"

#include "tokengate/core/json_writer.hpp"
#include "tokengate/cost/cost.hpp"
#include "tokengate/proxy/wire.hpp"

namespace tokengate::server {

std::string error_body(std::string_view message, std::string_view type, std::string_view code) {
    // Written straight into one buffer sized for it: a 429 builds one per rejected request.
    std::string out;
    out.reserve(64 + message.size() + type.size() + code.size());
    core::JsonObjectWriter body(out);
    auto error = body.object("error");
    error.string("message", message).string("type", type).null("param").string("code", code);
    error.close();
    body.close();
    return out;
}

ErrorShape error_shape_for(std::string_view path, std::string_view anthropic_version) {
    bool messages = cost::is_anthropic(cost::endpoint_for_path(path));
    return messages || !anthropic_version.empty() ? ErrorShape::anthropic : ErrorShape::openai;
}

namespace {

/// Anthropic's error for an HTTP status: its type ("rate_limit_error") and the status sent
/// (503 becomes 529 overloaded_error, the status its SDKs retry as overload).
struct AnthropicError {
    http::status status;
    std::string_view type;
};

AnthropicError anthropic_error(http::status status) {
    switch (status) {
        case http::status::bad_request: return {status, "invalid_request_error"};
        case http::status::unauthorized: return {status, "authentication_error"};
        case http::status::forbidden: return {status, "permission_error"};
        case http::status::not_found: return {status, "not_found_error"};
        case http::status::payload_too_large: return {status, "request_too_large"};
        case http::status::too_many_requests: return {status, "rate_limit_error"};
        case http::status::service_unavailable: return {static_cast<http::status>(529), "overloaded_error"};
        default: return {status, static_cast<unsigned>(status) < 500 ? "invalid_request_error" : "api_error"};
    }
}

std::string anthropic_error_body(std::string_view type, std::string_view message, std::string_view request_id) {
    std::string out;
    out.reserve(64 + message.size() + type.size() + request_id.size());
    core::JsonObjectWriter body(out);
    body.string("type", "error");
    auto error = body.object("error");
    error.string("type", type).string("message", message);
    error.close();
    if (!request_id.empty()) body.string("request_id", request_id);
    body.close();
    return out;
}

}  // namespace

std::string error_response_text(http::status status, std::string_view type, std::string_view code,
                                std::string_view message, unsigned version, bool keep_alive,
                                std::string_view request_id, std::span<const limiter::HeaderField> extra,
                                ErrorShape shape) {
    namespace wire = proxy::wire;
    std::string body;
    if (shape == ErrorShape::anthropic) {
        auto as = anthropic_error(status);
        status = as.status;
        body = anthropic_error_body(as.type, message, request_id);
    } else {
        body = error_body(message, type, code);
    }
    std::string out;
    out.reserve(640 + body.size());
    auto code_sent = static_cast<unsigned>(status);
    wire::status_line(out, version, code_sent, code_sent == 529 ? "Overloaded" : "");
    wire::field(out, "Content-Type", "application/json");
    wire::field(out, "Server", "tokengate");
    if (!request_id.empty()) wire::field(out, "X-Request-Id", request_id);
    for (const auto& f : extra) wire::field(out, f.name, f.value);
    wire::connection(out, version, keep_alive);
    wire::content_length(out, body.size());
    out.append(wire::k_crlf).append(body);
    return out;
}

http::response<http::string_body> error_response(http::status status, std::string_view type, std::string_view code,
                                                 std::string_view message, unsigned version, bool keep_alive) {
    http::response<http::string_body> res{status, version};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::server, "tokengate");
    res.body() = error_body(message, type, code);
    res.keep_alive(keep_alive);
    res.prepare_payload();
    return res;
}

}  // namespace tokengate::server
