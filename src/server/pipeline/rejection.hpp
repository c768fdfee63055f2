#pragma once

// Internal to the server: what every stage returns instead of a value when the request ends
// there, and the one function that turns it into the HTTP answer.

#include <boost/beast/http/status.hpp>

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tokengate/limiter/headers.hpp"
#include "tokengate/server/responses.hpp"

namespace tokengate::server::pipeline {

namespace http = boost::beast::http;
using server::ErrorShape;

struct Rejection {
    http::status status = http::status::internal_server_error;
    std::string type;  // the OpenAI error type
    std::string code;
    std::string message;
    limiter::HeaderFields headers;  // rate-limit headers, Retry-After
    std::string_view level;         // a limit's refusal: its level and name, for metrics and the log
    std::string_view limit;
};

/// What every stage returns: the value the next stage takes (std::monostate when there is
/// none), or the refusal the request ends with. What a stage read that the access log keeps
/// whether or not it refused (the key's owner, an upstream's load) it reports beside this.
template <class T>
using Result = std::variant<T, Rejection>;

/// The whole answer as it goes on the wire (SPEC §6's error body, or §20's Anthropic one).
std::string render(const Rejection& rejection, unsigned version, bool keep_alive, std::string_view request_id,
                   ErrorShape shape = ErrorShape::openai);

/// The fixed refusals that need no stage's state.
Rejection shutting_down();
Rejection upstream_failed(bool timeout, limiter::HeaderFields headers);

}  // namespace tokengate::server::pipeline
