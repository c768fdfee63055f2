// The admin listener: /metrics, /healthz, /readyz and the /admin/* API (bearer token).

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <variant>

#include "admin_quota.hpp"
#include "admin_status.hpp"
#include "linger.hpp"
#include "pipeline/admit.hpp"
#include "pipeline/exchange.hpp"
#include "pipeline/limit.hpp"
#include "run_time_book.hpp"
#include "services.hpp"
#include "tokengate/auth/key_table.hpp"
#include "tokengate/classify/classify.hpp"
#include "tokengate/core/base64.hpp"
#include "tokengate/core/calendar.hpp"
#include "tokengate/core/sha256.hpp"
#include "tokengate/limiter/headers.hpp"
#include "tokengate/proxy/target.hpp"
#include "tokengate/server/responses.hpp"

namespace tokengate::server {

namespace http = beast::http;
using nlohmann::json;

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);
using Response = AdminResponse;

/// The password of HTTP Basic credentials (any user name): how a browser sends the token.
std::optional<std::string> basic_password(std::string_view authorization) {
    constexpr std::string_view k_basic = "basic ";
    if (authorization.size() <= k_basic.size()) return std::nullopt;
    for (std::size_t i = 0; i < k_basic.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(authorization[i])) != k_basic[i]) return std::nullopt;
    auto credentials = authorization.substr(k_basic.size());
    while (!credentials.empty() && credentials.front() == ' ') credentials.remove_prefix(1);
    auto decoded = core::base64_decode(credentials);
    if (!decoded) return std::nullopt;
    auto colon = decoded->find(':');
    if (colon == std::string::npos) return std::nullopt;
    return decoded->substr(colon + 1);
}

bool authorized(const http::request<http::string_body>& req, const config::GatewayConfig& cfg) {
    const char* token = std::getenv(cfg.admin.token_env.c_str());
    if (!token || !*token) return false;  // no token configured: the admin API stays shut
    // The data plane's parser: the scheme is case-insensitive (RFC 9110 §11.1).
    auto header = req[http::field::authorization];
    std::optional<std::string> basic;
    std::string_view given = auth::extract_key(header, {});
    if (given.empty() && (basic = basic_password(header))) given = *basic;
    if (given.empty()) return false;
    // Compare digests so the comparison's length does not depend on the token's.
    auto a = core::sha256(given);
    auto b = core::sha256(token);
    return core::constant_time_equal(std::string_view(reinterpret_cast<const char*>(a.data()), a.size()),
                                     std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

json limit_json(const limiter::LimitStatus& s) {
    double reset = static_cast<double>(s.verdict.until_full) / 1e9;
    return {{"level", config::to_string(s.level)},
            {"name", s.spec->name},
            {"algorithm", config::to_string(s.spec->algorithm)},
            {"unit", config::to_string(s.spec->unit)},
            {"capacity", s.spec->capacity},
            {"rate_per_s", s.spec->rate_per_s},
            {"current_rate_per_s", s.spec->current_rate()},  // where an adaptive limit has moved it
            {"remaining", s.verdict.remaining},
            {"reset_s", reset},
            {"enforce", s.spec->enforce}};
}

Response limiter_unavailable() {
    return admin_error(http::status::service_unavailable, "rate_limiter_unavailable",
                       "The shared rate limiter (Redis) is unavailable and on_error is fail_closed.");
}

Response tenant_state(const config::TenantConfig& tenant, const limiter::Decision& state,
                      const config::GatewayConfig& config) {
    if (state.unavailable) return limiter_unavailable();
    json limits = json::array();
    for (const auto& s : state.statuses) limits.push_back(limit_json(s));
    return json_response(http::status::ok,
                         {{"tenant", tenant.id}, {"limits", limits}, {"quotas", quotas_json(state, config)}});
}

json key_json(const RunTimeKey& k) {
    return {{"id", k.id},
            {"name", k.name},
            {"created", core::rfc3339(k.created)},
            {"expires", k.expires ? json(core::rfc3339(*k.expires)) : json(nullptr)},
            {"last_used", k.last_used ? json(core::rfc3339(k.last_used)) : json(nullptr)}};
}

/// One line a change, who made it aside: the admin token is one.
void audit(const json& change) { spdlog::info("audit: {}", change.dump()); }

/// A refused change: the keeper's failure is the gateway's (Redis away: retry; the keys file
/// unwritable: the operator's), anything else the caller's.
Response refused_change(const RunTimeBook& book, const RunTimeBook::Refusal& no, std::string_view code) {
    if (!no.unkept) return admin_error(http::status::conflict, std::string(code), no.why);
    if (book.where() == "Redis") return admin_error(http::status::service_unavailable, "redis_unavailable", no.why);
    return admin_error(http::status::internal_server_error, "keys_file_unwritable", no.why);
}

/// A run-time tenant's id: it goes into URLs, bucket keys and metric labels.
bool valid_tenant_id(std::string_view id) {
    if (id.empty() || id.size() > RunTimeBook::k_max_tenant_id_bytes) return false;
    return std::all_of(id.begin(), id.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '@' || c == ':';
    });
}

/// A JSON object body with no field but `allowed`; or the 400 to answer.
std::variant<json, Response> object_body(std::string_view body, std::initializer_list<std::string_view> allowed) {
    json in = json::parse(body, nullptr, false);
    if (!in.is_object())
        return admin_error(http::status::bad_request, "invalid_body", "The body must be a JSON object.");
    for (const auto& [field, value] : in.items())
        if (std::find(allowed.begin(), allowed.end(), field) == allowed.end())
            return admin_error(http::status::bad_request, "invalid_body",
                               "Unknown field '" + field.substr(0, 64) + "'.");
    return in;
}

/// POST /admin/tenants/{id}/keys: a key for the tenant, shown this once.
net::awaitable<Response> make_key(Services& services, RunTimeBook& book, std::string_view tenant_id,
                                  std::string_view body) {
    auto parsed = object_body(body, {"name", "expires"});
    if (auto* bad = std::get_if<Response>(&parsed)) co_return std::move(*bad);
    auto& in = std::get<json>(parsed);
    auto now = services.clock.unix_now();
    if (!in.contains("name") || !in["name"].is_string() || in["name"].get_ref<const std::string&>().empty() ||
        in["name"].get_ref<const std::string&>().size() > RunTimeBook::k_max_name_bytes)
        co_return admin_error(
            http::status::bad_request, "invalid_body",
            "'name' must be a string of 1 to " + std::to_string(RunTimeBook::k_max_name_bytes) + " bytes.");
    std::optional<core::Nanos> expires;
    if (in.contains("expires") && !in["expires"].is_null()) {
        if (in["expires"].is_string()) expires = core::parse_rfc3339(in["expires"].get_ref<const std::string&>());
        if (!expires)
            co_return admin_error(http::status::bad_request, "invalid_body",
                                  "'expires' must be an RFC 3339 time such as 2027-01-31T00:00:00Z.");
        if (*expires <= now) co_return admin_error(http::status::bad_request, "invalid_body", "'expires' is past.");
    }
    // Arguments named first: GCC 12 mishandled temporaries in co_await's operand.
    std::string tenant(tenant_id), name = in["name"].get<std::string>();
    auto made = co_await book.make_key(std::move(tenant), std::move(name), expires, now);
    if (auto* no = std::get_if<RunTimeBook::Refusal>(&made)) co_return refused_change(book, *no, "key_not_made");
    auto& m = std::get<RunTimeBook::Made>(made);
    audit({{"action", "key_made"},
           {"tenant", m.key.tenant},
           {"key_id", m.key.id},
           {"name", m.key.name},
           {"expires", m.key.expires ? json(core::rfc3339(*m.key.expires)) : json(nullptr)}});
    auto out = key_json(m.key);
    out["tenant"] = m.key.tenant;
    out["key"] = m.secret;  // the only time it is shown
    co_return json_response(http::status::created, out);
}

/// POST /admin/tenants: a tenant on a configured tier, kept with the keys.
net::awaitable<Response> make_tenant(Services& services, const Runtime& rt, RunTimeBook& book, std::string_view body) {
    auto parsed = object_body(body, {"id", "tier"});
    if (auto* bad = std::get_if<Response>(&parsed)) co_return std::move(*bad);
    auto& in = std::get<json>(parsed);
    if (!in.contains("id") || !in["id"].is_string() || !valid_tenant_id(in["id"].get_ref<const std::string&>()))
        co_return admin_error(http::status::bad_request, "invalid_body",
                              "'id' must be a string of 1 to " + std::to_string(RunTimeBook::k_max_tenant_id_bytes) +
                                  " letters, digits and - _ . @ :");
    if (!in.contains("tier") || !in["tier"].is_string())
        co_return admin_error(http::status::bad_request, "invalid_body", "'tier' must be the name of a tier.");
    auto id = in["id"].get<std::string>(), tier = in["tier"].get<std::string>();
    const auto& tiers = rt.config->tiers;
    if (std::none_of(tiers.begin(), tiers.end(), [&](const config::TierConfig& t) { return t.name == tier; }))
        co_return admin_error(http::status::bad_request, "unknown_tier",
                              "The config has no tier '" + tier.substr(0, 128) + "'.");
    if (rt.keys.tenant(id))
        co_return admin_error(http::status::conflict, "tenant_exists", "Tenant '" + id + "' is in the config.");
    if (book.tier_of(id))
        co_return admin_error(http::status::conflict, "tenant_exists", "Tenant '" + id + "' exists already.");
    auto now = services.clock.unix_now();
    auto made = co_await book.make_tenant(id, tier, now);
    // Past the bound, or made on another replica a moment ago.
    if (auto* no = std::get_if<RunTimeBook::Refusal>(&made)) co_return refused_change(book, *no, "tenant_not_made");
    auto& t = std::get<RunTimeTenant>(made);
    audit({{"action", "tenant_made"}, {"tenant", t.id}, {"tier", t.tier}});
    co_return json_response(http::status::created,
                            {{"id", t.id}, {"tier", t.tier}, {"created", core::rfc3339(t.created)}});
}

/// DELETE /admin/tenants/{id}: a tenant made at run time, and every key of it.
net::awaitable<Response> remove_tenant(const Runtime& rt, RunTimeBook& book, std::string_view id) {
    if (rt.keys.tenant(id))
        co_return admin_error(http::status::conflict, "configured_tenant",
                              "Tenant '" + std::string(id) + "' is in the config: remove it there.");
    std::string named(id);
    auto removed = co_await book.remove_tenant(std::move(named));
    if (auto* no = std::get_if<RunTimeBook::Refusal>(&removed))
        co_return refused_change(book, *no, "tenant_not_removed");
    auto& gone = std::get<0>(removed);
    if (!gone) co_return admin_error(http::status::not_found, "not_found", "No such run-time tenant.");
    for (const auto& k : gone->second)
        audit({{"action", "key_revoked"}, {"tenant", k.tenant}, {"key_id", k.id}, {"name", k.name}});
    audit({{"action", "tenant_removed"}, {"tenant", gone->first.id}, {"tier", gone->first.tier}});
    co_return json_response(http::status::ok, {{"removed", gone->first.id}, {"keys_revoked", gone->second.size()}});
}

/// SPEC §21's API for what is made at run time: POST/GET /admin/tenants/{id}/keys, DELETE
/// /admin/keys/{key_id}, POST and GET /admin/tenants, DELETE /admin/tenants/{id}.
net::awaitable<std::optional<Response>> run_time_api(Services& services, const Runtime& rt,
                                                     const http::request<http::string_body>& req,
                                                     std::string_view path) {
    constexpr std::string_view k_tenants = "/admin/tenants", k_keys = "/admin/keys/";
    auto method = req.method();
    bool del = method == http::verb::delete_, post = method == http::verb::post, get = method == http::verb::get;
    bool tenants = path == k_tenants && (post || get);
    bool keys_of_tenant = path.starts_with(k_tenants) && path.size() > k_tenants.size() + 1 &&
                          path[k_tenants.size()] == '/' && path.ends_with("/keys") && (post || get);
    bool revoke = del && path.starts_with(k_keys);
    std::string_view tenant_id;
    if (keys_of_tenant) tenant_id = path.substr(k_tenants.size() + 1, path.size() - k_tenants.size() - 1 - 5);
    else if (del && path.starts_with(k_tenants) && path.size() > k_tenants.size() + 1 && path[k_tenants.size()] == '/')
        tenant_id = path.substr(k_tenants.size() + 1);
    if (!tenants && !keys_of_tenant && !revoke && tenant_id.empty()) co_return std::nullopt;
    auto* book = rt.book.get();
    if (tenants && get) {
        json list = json::array();
        for (const auto& t : rt.config->tenants) list.push_back({{"id", t.id}, {"tier", t.tier}, {"made", "config"}});
        if (book)
            for (const auto& t : book->tenants())
                list.push_back(
                    {{"id", t.id}, {"tier", t.tier}, {"made", "run_time"}, {"created", core::rfc3339(t.created)}});
        co_return json_response(http::status::ok, {{"tenants", list}});
    }
    if (!book)
        co_return admin_error(http::status::conflict, "keys_file_not_set",
                              "Keys and tenants made at run time need auth.keys_file in the config (or the Redis "
                              "store).");
    if (revoke) {
        auto id = std::string(path.substr(k_keys.size()));
        auto revoked = co_await book->revoke_key(id);
        if (auto* no = std::get_if<RunTimeBook::Refusal>(&revoked))
            co_return refused_change(*book, *no, "key_not_revoked");
        auto& gone = std::get<0>(revoked);
        if (!gone) co_return admin_error(http::status::not_found, "not_found", "No such run-time key.");
        audit({{"action", "key_revoked"}, {"tenant", gone->tenant}, {"key_id", gone->id}, {"name", gone->name}});
        co_return json_response(http::status::ok, {{"revoked", gone->id}, {"tenant", gone->tenant}});
    }
    if (tenants) co_return co_await make_tenant(services, rt, *book, req.body());
    if (!keys_of_tenant) co_return co_await remove_tenant(rt, *book, tenant_id);
    if (!rt.tenant(tenant_id)) co_return admin_error(http::status::not_found, "not_found", "No such tenant.");
    if (post) co_return co_await make_key(services, *book, tenant_id, req.body());
    json keys = json::array();
    for (const auto& k : book->keys_of(tenant_id)) keys.push_back(key_json(k));
    co_return json_response(http::status::ok, {{"tenant", tenant_id}, {"keys", keys}});
}

/// POST /admin/explain's input, admitted (nothing charged), or the error to answer.
std::variant<pipeline::Admitted, Response> explain_admission(const Runtime& rt, const cost::OutputHistory& history,
                                                             const std::string& body, std::string& request_body,
                                                             core::Nanos unix_now) {
    json in = json::parse(body, nullptr, false);
    if (!in.is_object() || !in.contains("key") || !in["key"].is_string())
        return admin_error(http::status::bad_request, "invalid_body",
                           R"(Send {"key": "<api key>", "path": "/v1/chat/completions", "body": {...}}.)");
    auto text = [&](const char* key, std::string fallback) -> std::optional<std::string> {
        if (!in.contains(key)) return fallback;
        if (!in[key].is_string()) return std::nullopt;
        return in[key].get<std::string>();
    };
    auto path = text("path", "/v1/chat/completions");
    auto client_ip = text("client_ip", "127.0.0.1");
    if (!path || !client_ip)
        return admin_error(http::status::bad_request, "invalid_body", "'path' and 'client_ip' must be strings.");
    auto target = proxy::normalize_target(*path);  // as the data plane matches it
    request_body = in.contains("body") ? in["body"].dump() : std::string();
    auto key = in["key"].get<std::string>();
    std::optional<auth::Principal> who;
    // The data plane's own admission: a refusal there is this call's 400, with the same code.
    auto admitted = pipeline::admit(rt, {key, target, *client_ip, request_body, unix_now, {}}, history, who);
    if (auto* no = std::get_if<pipeline::Rejection>(&admitted))
        return admin_error(http::status::bad_request, no->code, no->message);
    return std::get<pipeline::Admitted>(std::move(admitted));
}

Response explain(Services& services, const Runtime& rt, const pipeline::Admitted& a, std::string_view request_body,
                 const limiter::Decision& decision) {
    if (decision.unavailable) return limiter_unavailable();
    json limits = json::array();
    for (std::size_t i = 0; i < decision.statuses.size(); ++i) {
        auto l = limit_json(decision.statuses[i]);
        const auto& v = decision.statuses[i].verdict;
        l["requested"] = a.charges[i].amount;
        l["admitted"] = v.admitted;
        l["retry_after_s"] = v.admitted ? json(nullptr)
                             : v.never  ? json("never")
                                        : json(static_cast<double>(v.retry_after) / 1e9);
        limits.push_back(l);
    }
    json headers = json::object();
    for (const auto& h : limiter::rate_limit_headers(decision, services.clock.unix_now()))
        headers[h.name] = h.value.str();
    const auto& cfg = *rt.config;
    json out = {{"tenant", a.principal.tenant->id},
                {"subject", a.principal.subject.empty() ? json(nullptr) : json(a.principal.subject)},
                {"route", cfg.routes[a.route].path},
                {"model", a.summary.model},
                {"endpoint", cost::to_string(a.summary.endpoint)},
                {"tokenizer", a.tokenizer ? a.tokenizer->name() : std::string("heuristic")},
                {"input_tokens", a.summary.input_tokens},
                {"output_tokens", a.output.tokens},
                {"output_tokens_per_sequence", a.output.per_sequence},
                {"output_estimate",
                 {{"source", a.output.learned ? "learned" : "declared"},
                  {"samples", a.output.samples},
                  {"why", pipeline::describe(a.output, cfg.cost)}}},
                {"sequences", a.summary.sequences},
                {"images", a.summary.images},
                {"max_output_tokens", a.summary.max_output_tokens},
                // SPEC §17: what the upstream is told it may generate, per sequence.
                {"output_bound", a.summary.sequences == 0
                                     ? json(nullptr)
                                     : json{{"per_sequence", a.output.bound()},
                                            {"field", cost::to_string(cost::output_field_written(a.summary))},
                                            {"written_by_gateway", a.output.capped || !a.summary.output_named}}},
                {"stream", a.summary.stream},
                {"cost", a.reserved.cost},
                {"tokens", a.reserved.tokens},
                {"usd", a.reserved.usd},
                {"allowed", decision.allowed},
                {"limits", limits},
                {"headers", headers}};
    if (!decision.allowed) {
        auto why = limiter::describe_rejection(decision, a.charges);
        out["rejection"] = {{"type", why.type}, {"code", why.code}, {"message", why.message}};
    }
    // SPEC §22: where it would go now, and why.
    std::string why;
    auto upstream = pipeline::choose_upstream(rt, a, request_body, services.clock.now(), &why);
    out["upstream"] = upstream ? json(cfg.upstreams[*upstream].name) : json(nullptr);
    out["upstream_why"] = upstream ? why : "every upstream of the route is ejected";
    return json_response(http::status::ok, out);
}

net::awaitable<Response> handle(Services& services, const http::request<http::string_body>& req) {
    auto rt = services.runtime.get();
    auto target = std::string_view(req.target());
    auto path = target.substr(0, target.find('?'));
    bool get = req.method() == http::verb::get;
    if (get && path == "/healthz") co_return json_response(http::status::ok, {{"status", "ok"}});
    if (get && path == "/readyz") {
        bool draining = services.draining.load();
        // fail_closed without Redis would refuse everything: send traffic elsewhere.
        bool limiter_down = services.store->refusing();
        co_return json_response(draining || limiter_down ? http::status::service_unavailable : http::status::ok,
                                {{"status", draining       ? "draining"
                                            : limiter_down ? "rate_limiter_unavailable"
                                                           : "ready"}});
    }
    if (get && path == "/metrics") {
        services.metrics.queue_depth.clear();
        for (const auto& [key, depth] : services.store->queue_depths())
            services.metrics.queue_depth.set({key}, static_cast<double>(depth));
        services.metrics.settlements_pending.set({}, static_cast<double>(services.store->settlements_outstanding()));
        Response res{http::status::ok, 11};
        res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
        res.body() = services.registry.render();
        co_return res;
    }
    bool page = get && (path == "/ui" || path.substr(0, 4) == "/ui/" || path == "/favicon.ico");
    if (path.substr(0, 7) != "/admin/" && !page)
        co_return admin_error(http::status::not_found, "not_found", "Unknown admin path.");
    if (!authorized(req, *rt->config)) {
        auto res = admin_error(http::status::unauthorized, "invalid_admin_token",
                               "Admin calls need 'Authorization: Bearer <token>' (or Basic, the token as the "
                               "password) with the token from " +
                                   rt->config->admin.token_env + ".");
        // A browser asks for the token (the user name is not checked).
        res.set(http::field::www_authenticate, "Basic realm=\"tokengate admin\", charset=\"UTF-8\"");
        co_return res;
    }
    if (page) {
        if (auto asset = ui_asset(path)) co_return std::move(*asset);
        co_return admin_error(http::status::not_found, "not_found", "No such file of the status page.");
    }
    if (get && path == "/admin/status") {
        // Not a conditional inside co_await's operand: GCC 12 evaluated both of its arms there.
        std::string_view query;
        if (target.size() > path.size()) query = target.substr(path.size() + 1);
        co_return co_await status(services, *rt, query);
    }
    if (auto answered = co_await run_time_api(services, *rt, req, path)) co_return std::move(*answered);
    constexpr std::string_view k_tenants = "/admin/tenants/";
    constexpr std::string_view k_quotas = "/quotas/";
    bool post = req.method() == http::verb::post;
    if ((get || post) && path.substr(0, k_tenants.size()) == k_tenants) {
        // /admin/tenants/{id} (GET), /admin/tenants/{id}/quotas/{name} (POST)
        auto rest = path.substr(k_tenants.size());
        auto quotas_at = rest.find(k_quotas);
        auto id = rest.substr(0, quotas_at);
        const auto* tenant = rt->tenant(id);  // the config's, or one made at run time
        if (!tenant) co_return admin_error(http::status::not_found, "not_found", "No such tenant.");
        if (get && quotas_at == std::string_view::npos) {
            auto charges = classify::tenant_charges(*tenant);
            co_return tenant_state(*tenant, co_await pipeline::preview(*services.store, charges), *rt->config);
        }
        if (post && quotas_at != std::string_view::npos)
            co_return co_await change_quota(services, *rt->config, *tenant, rest.substr(quotas_at + k_quotas.size()),
                                            req.body());
    }
    if (req.method() == http::verb::post && path == "/admin/reload") {
        std::string error;
        if (services.reload && services.reload(error)) co_return json_response(http::status::ok, {{"reloaded", true}});
        co_return json_response(http::status::unprocessable_entity, {{"reloaded", false}, {"error", error}});
    }
    if (req.method() == http::verb::post && path == "/admin/explain") {
        std::string request_body;
        auto admitted =
            explain_admission(*rt, services.output_history, req.body(), request_body, services.clock.unix_now());
        if (auto* error = std::get_if<Response>(&admitted)) co_return std::move(*error);
        const auto& a = std::get<pipeline::Admitted>(admitted);
        co_return explain(services, *rt, a, request_body, co_await pipeline::preview(*services.store, a.charges));
    }
    co_return admin_error(http::status::not_found, "not_found", "Unknown admin path.");
}

}  // namespace

net::awaitable<void> serve_admin_connection(net::ip::tcp::socket socket, Services& services) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
        http::request_parser<http::string_body> parser;
        parser.body_limit(1u << 20);
        stream.expires_after(std::chrono::seconds(30));
        auto [ec, n] = co_await http::async_read(stream, buffer, parser, k_use);
        if (ec == http::error::body_limit || ec == http::error::header_limit) {
            bool body = ec == http::error::body_limit;
            auto res =
                admin_error(body ? http::status::payload_too_large : http::status::request_header_fields_too_large,
                            body ? "request_too_large" : "headers_too_large",
                            body ? "Admin request bodies are limited to 1 MiB." : "The request headers are too large.");
            res.keep_alive(false);
            res.prepare_payload();
            co_await http::async_write(stream, res, k_use);
            co_await linger_then_close(stream);
            co_return;
        }
        if (ec) break;
        auto req = parser.release();
        auto res = co_await handle(services, req);
        res.keep_alive(req.keep_alive());
        res.prepare_payload();
        auto [wec, wn] = co_await http::async_write(stream, res, k_use);
        if (wec || !res.keep_alive()) break;
    }
    beast::error_code ignored;
    stream.socket().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
}

}  // namespace tokengate::server
