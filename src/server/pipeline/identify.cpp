#include "identify.hpp"

#include "../run_time_book.hpp"

namespace tokengate::server::pipeline {

namespace {

Rejection refused(http::status status, std::string type, std::string code, std::string message) {
    Rejection r;
    r.status = status;
    r.type = std::move(type);
    r.code = std::move(code);
    r.message = std::move(message);
    return r;
}

}  // namespace

Result<auth::Principal> identify(const Runtime& runtime, std::string_view key, core::Nanos unix_now) {
    if (runtime.jwt && auth::looks_like_jwt(key)) {
        auto verifier = runtime.jwt->verifier();
        if (!verifier) {  // jwks_url not fetched yet: the gateway's fault, so one to retry
            auto r = refused(http::status::service_unavailable, "server_error", "jwks_unavailable",
                             "The identity provider's keys are not loaded yet; retry shortly.");
            r.headers.push_back({"Retry-After", "1"});
            return r;
        }
        auto verified = verifier->verify(key, static_cast<double>(unix_now) / 1e9);
        if (auto* no = std::get_if<auth::JwtRefusal>(&verified))
            return refused(http::status::unauthorized, "invalid_request_error", "invalid_token",
                           "Invalid token: " + no->reason + ".");
        auto& who = std::get<auth::JwtIdentity>(verified);
        // The token's digest names it in the log, as a key's does: never the token.
        if (const auto* t = runtime.tenant(who.tenant, who.tier))
            return auth::Principal{t, std::move(who.token_id), std::move(who.subject)};
        return refused(http::status::forbidden, "permission_error", "unknown_tenant",
                       who.tier.empty() ? "The token's tenant is not known to this gateway."
                                        : "The token's tenant is not known to this gateway, and its tier claim "
                                          "names no tier of it.");
    }
    if (!key.empty()) {
        auto digest = core::sha256(key);  // once, for the config's keys and the run-time ones
        if (auto who = runtime.keys.authenticate(digest)) return std::move(*who);
        if (runtime.book)
            if (auto made = runtime.book->authenticate(digest, unix_now))
                if (const auto* t = runtime.tenant(made->first)) return auth::Principal{t, std::move(made->second), {}};
    }
    return refused(http::status::unauthorized, "invalid_request_error", "invalid_api_key",
                   key.empty() ? "You didn't provide an API key. Send it as 'Authorization: Bearer <key>' or "
                                 "'x-api-key: <key>'."
                               : "Incorrect API key provided.");
}

}  // namespace tokengate::server::pipeline
