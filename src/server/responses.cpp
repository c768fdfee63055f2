#include "tokengate/server/responses.hpp"

#include "tokengate/core/json_writer.hpp"
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

std::string error_response_text(http::status status, std::string_view type, std::string_view code,
                                std::string_view message, unsigned version, bool keep_alive,
                                std::string_view request_id, std::span<const limiter::HeaderField> extra) {
    namespace wire = proxy::wire;
    auto body = error_body(message, type, code);
    std::string out;
    out.reserve(640 + body.size());
    wire::status_line(out, version, static_cast<unsigned>(status));
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
