#include "rejection.hpp"

#include "tokengate/server/responses.hpp"

namespace tokengate::server::pipeline {

std::string render(const Rejection& r, unsigned version, bool keep_alive, std::string_view request_id,
                   ErrorShape shape) {
    return error_response_text(r.status, r.type, r.code, r.message, version, keep_alive, request_id, r.headers, shape);
}

Rejection shutting_down() {
    return {http::status::service_unavailable,
            "server_error",
            "shutting_down",
            "The gateway is shutting down; retry on another instance.",
            {},
            {},
            {}};
}

Rejection upstream_failed(bool timeout, limiter::HeaderFields headers) {
    if (timeout)
        return {http::status::gateway_timeout,
                "server_error",
                "upstream_timeout",
                "The upstream did not answer in time.",
                std::move(headers),
                {},
                {}};
    return {http::status::bad_gateway,
            "server_error",
            "upstream_unavailable",
            "The upstream could not be reached.",
            std::move(headers),
            {},
            {}};
}

}  // namespace tokengate::server::pipeline
