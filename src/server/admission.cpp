#include "admission.hpp"

#include "tokengate/classify/classify.hpp"

namespace tokengate::server {

Admission admit_request(const Runtime& runtime, std::string_view key, std::string_view path,
                        std::string_view client_ip, std::string_view body) {
    const auto& cfg = *runtime.config;
    Admission a;
    a.principal = runtime.keys.authenticate(key);
    if (!a.principal) {
        a.error = Admission::Error::unauthorized;
        a.message = key.empty() ? "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'."
                                : "Incorrect API key provided.";
        return a;
    }
    auto parsed = cost::parse_request_body(body, cfg.cost, runtime.tokenizer.get());
    if (parsed.error != cost::BodyError::none) {
        a.error = parsed.error == cost::BodyError::invalid_json ? Admission::Error::invalid_json
                                                                : Admission::Error::invalid_body;
        a.message = parsed.message;
        return a;
    }
    a.summary = parsed.summary;
    auto route = classify::match_route(cfg, path, a.summary.model);
    if (!route) {
        a.error = Admission::Error::no_route;
        a.message = "No route for " + std::string(path) + ".";
        return a;
    }
    a.route = *route;
    a.reserved = cost::request_cost(cfg.cost, cost::cost_factor(cfg.models, a.summary.model), a.summary.input_tokens,
                                    a.summary.max_output_tokens, a.summary.stream);
    a.charges = classify::applicable_limits(cfg, {a.principal->tenant, client_ip, a.route, a.summary.model, a.reserved, {}});
    return a;
}

}  // namespace tokengate::server
