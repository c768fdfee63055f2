#include "tokengate/server/responses.hpp"

#include "tokengate/core/json_writer.hpp"

namespace tokengate::server {

std::string error_body(std::string_view message, std::string_view type, std::string_view code) {
    std::string inner;
    core::JsonObjectWriter e(inner);
    e.string("message", message).string("type", type).null("param").string("code", code);
    e.close();
    std::string out;
    core::JsonObjectWriter(out).raw("error", inner).close();
    return out;
}

http::response<http::string_body> error_response(http::status status, std::string_view type,
                                                 std::string_view code, std::string_view message,
                                                 unsigned version, bool keep_alive) {
    http::response<http::string_body> res{status, version};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::server, "tokengate");
    res.body() = error_body(message, type, code);
    res.keep_alive(keep_alive);
    res.prepare_payload();
    return res;
}

}  // namespace tokengate::server
