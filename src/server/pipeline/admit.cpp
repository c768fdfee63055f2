#include "admit.hpp"

#include "identify.hpp"
#include "tokengate/classify/classify.hpp"

namespace tokengate::server::pipeline {

namespace {

Rejection invalid(http::status status, std::string_view code, std::string message) {
    return {status, "invalid_request_error", std::string(code), std::move(message), {}, {}, {}};
}

std::string_view body_error_code(cost::BodyError error) {
    switch (error) {
        case cost::BodyError::invalid_json: return "invalid_json";
        case cost::BodyError::duplicate_key: return "duplicate_key";
        default: return "invalid_body";
    }
}

}  // namespace

Result<Admitted> admit(const Runtime& runtime, const Incoming& in, const cost::OutputHistory& history,
                       std::optional<auth::Principal>& who, std::uint64_t count_limit) {
    const auto& cfg = *runtime.config;
    if (!in.target.ok)
        return invalid(http::status::bad_request, "invalid_path",
                       "Refused request path: " + std::string(in.target.why) + ".");
    auto identified = identify(runtime, in.key, in.unix_now);
    if (auto* no = std::get_if<Rejection>(&identified)) return std::move(*no);
    who = std::move(std::get<auth::Principal>(identified));
    const auto& subject = cfg.auth.subject;
    // The body's end user is only read when nothing before it named one.
    bool subject_from_body = who->subject.empty() && in.subject_header.empty() && !subject.body_field.empty();
    auto parsed = cost::parse_request_body(in.body, cfg.cost, &runtime.tokenizers, in.target.path, &cfg.models,
                                           count_limit, subject_from_body ? subject.body_field : std::string_view());
    if (parsed.error != cost::BodyError::none)
        return invalid(http::status::bad_request, body_error_code(parsed.error), parsed.message);
    // SPEC §21: the JWT's sub, else the header, else the body's field; none is the "(none)" subject.
    if (who->subject.empty()) who->subject = in.subject_header.empty() ? std::move(parsed.subject) : in.subject_header;
    if (who->subject.size() > k_max_subject_bytes)
        return invalid(http::status::bad_request, "invalid_subject",
                       "The end user's id is over " + std::to_string(k_max_subject_bytes) + " bytes.");
    return price_request(runtime, {*who, std::move(parsed.summary), parsed.model, parsed.tokenizer}, in.target.path,
                         in.client_ip, history);
}

Result<Admitted> price_request(const Runtime& runtime, Read read, std::string_view path, std::string_view client_ip,
                               const cost::OutputHistory& history) {
    const auto& cfg = *runtime.config;
    Admitted a;
    a.principal = read.principal;
    a.summary = std::move(read.summary);
    a.cost_factor = read.model ? read.model->cost_factor : 1.0;
    a.price = read.model && read.model->price ? &*read.model->price : nullptr;
    a.tokenizer = read.tokenizer;
    auto route = classify::match_route(cfg, path, a.summary.model);
    if (!route) return invalid(http::status::not_found, "not_found", "No route for " + std::string(path) + ".");
    a.route = *route;
    a.output = estimate_output(cfg.cost, history, a.principal.tenant->id, a.summary);
    a.reserved = cost::request_amounts(cfg.cost, a.cost_factor, a.price, a.summary.input_tokens, a.output.tokens,
                                       a.summary.stream);
    a.charges = classify::applicable_limits(
        cfg, {a.principal.tenant, client_ip, a.route, a.summary.model, a.reserved, {}, {}, a.principal.subject});
    return a;
}

}  // namespace tokengate::server::pipeline
