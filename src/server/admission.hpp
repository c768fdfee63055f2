#pragma once

// Internal to the server module: the steps that decide what a request is and what it costs,
// shared by the data plane and POST /admin/explain.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokengate/auth/key_table.hpp"
#include "tokengate/cost/cost.hpp"
#include "tokengate/limiter/decision.hpp"
#include "tokengate/server/runtime.hpp"

namespace tokengate::server {

struct Admission {
    enum class Error { none, unauthorized, invalid_json, invalid_body, no_route };
    Error error = Error::none;
    std::string message;
    std::optional<auth::Principal> principal;
    cost::RequestSummary summary;
    std::size_t route = 0;
    double reserved = 0;  // the pre-charge: estimated input, max output
    std::vector<limiter::Charge> charges;
};

/// Authenticate → parse the body → route → price → every applicable limit (nothing charged).
Admission admit_request(const Runtime& runtime, std::string_view key, std::string_view path,
                        std::string_view client_ip, std::string_view body);

}  // namespace tokengate::server
