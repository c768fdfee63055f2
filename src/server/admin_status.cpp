#include "admin_status.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "admin_quota.hpp"
#include "pipeline/limit.hpp"
#include "services.hpp"
#include "tokengate/classify/classify.hpp"

namespace tokengate::server {

namespace http = boost::beast::http;
using nlohmann::json;

namespace {

constexpr std::size_t k_default_page = 20, k_max_page = 100;
constexpr std::size_t k_heat_rows = 20;
constexpr std::size_t k_spark_bin_s = 5;     // 60 points over the 5 minutes: enough for a sparkline
constexpr std::size_t k_rate_window_s = 10;  // "per second" is over the last 10 whole seconds
constexpr std::size_t k_max_queues = 50;

struct Query {
    std::size_t offset = 0, limit = k_default_page;
    std::string sort = "tokens", filter;
};

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

std::string percent_decoded(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '+') out += ' ';
        else if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
            out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}

/// Anything unreadable keeps its default: the page is a view, not an API to refuse.
Query parse_query(std::string_view q) {
    Query out;
    while (!q.empty()) {
        auto amp = q.find('&');
        auto pair = q.substr(0, amp);
        q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
        auto eq = pair.find('=');
        auto name = pair.substr(0, eq);
        auto value = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
        std::size_t n = 0;
        bool number = std::from_chars(value.data(), value.data() + value.size(), n).ec == std::errc{};
        if (name == "offset" && number) out.offset = n;
        else if (name == "limit" && number) out.limit = std::clamp<std::size_t>(n, 1, k_max_page);
        else if (name == "sort" && (value == "tokens" || value == "rejections" || value == "id")) out.sort = value;
        else if (name == "q") out.filter = percent_decoded(value.substr(0, 256));
    }
    return out;
}

json limit_bars(const limiter::Decision& state) {
    json out = json::array();
    for (const auto& s : state.statuses) {
        double capacity = s.spec->capacity + s.quota_added;
        out.push_back({{"name", s.spec->name},
                       {"level", config::to_string(s.level)},
                       {"algorithm", config::to_string(s.spec->algorithm)},
                       {"unit", config::to_string(s.spec->unit)},
                       {"capacity", capacity},
                       {"remaining", std::clamp(s.verdict.remaining, 0.0, capacity)},
                       {"enforce", s.spec->enforce}});
    }
    return out;
}

/// Sums of `k_spark_bin_s`-second bins, oldest first.
template <typename T>
json binned(const std::vector<T>& per_second) {
    json out = json::array();
    for (std::size_t i = 0; i + k_spark_bin_s <= per_second.size(); i += k_spark_bin_s) {
        std::uint64_t sum = 0;
        for (std::size_t j = 0; j < k_spark_bin_s; ++j) sum += per_second[i + j];
        out.push_back(sum);
    }
    return out;
}

/// Per second over the last whole seconds (the current one is still filling).
template <typename T>
double recent_rate(const std::vector<T>& per_second) {
    if (per_second.size() <= k_rate_window_s) return 0;
    std::uint64_t sum = 0;
    for (std::size_t i = per_second.size() - 1 - k_rate_window_s; i + 1 < per_second.size(); ++i) sum += per_second[i];
    return static_cast<double>(sum) / static_cast<double>(k_rate_window_s);
}

std::vector<config::Charge> global_charges(const config::GatewayConfig& config) {
    std::vector<config::Charge> out;
    for (const auto& spec : config.global_limits)
        out.push_back(
            {&spec, config::Level::global, classify::bucket_key(config::Level::global, spec.name, "*"), 0, {}, {}});
    return out;
}

json signal(std::optional<double> value, const proxy::UpstreamLoad& load) {
    return load.live() && value ? json(*value) : json(nullptr);
}

json upstreams_json(Services& services, const Runtime& rt) {
    json out = json::array();
    auto now = services.clock.now();
    const auto& upstreams = rt.config->upstreams;
    for (std::size_t i = 0; i < upstreams.size(); ++i) {
        auto latency = services.activity.first_byte_latency(upstreams[i].name);
        out.push_back({{"name", upstreams[i].name},
                       {"url", upstreams[i].url},
                       {"healthy", rt.health[i]->available(now)},
                       {"in_flight", services.metrics.inflight.value({upstreams[i].name})},
                       // The model server's own queue and KV cache, while its metrics are read.
                       {"metrics_live", rt.load[i]->live()},
                       {"queue", signal(rt.load[i]->signals().queue, *rt.load[i])},
                       {"running", signal(rt.load[i]->signals().running, *rt.load[i])},
                       {"kv_cache", signal(rt.load[i]->signals().kv_cache, *rt.load[i])},
                       {"ttfb_samples", latency.samples},
                       {"ttfb_p50_ms", latency.p50_s * 1e3},
                       {"ttfb_p99_ms", latency.p99_s * 1e3}});
    }
    return out;
}

json queues_json(Services& services) {
    auto depths = services.store->queue_depths();
    std::sort(depths.begin(), depths.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    json out = json::array();
    for (std::size_t i = 0; i < depths.size() && i < k_max_queues; ++i)
        out.push_back({{"key", depths[i].first}, {"depth", depths[i].second}});
    return out;
}

}  // namespace

boost::asio::awaitable<AdminResponse> status(Services& services, const Runtime& rt, std::string_view query_text) {
    auto query = parse_query(query_text);
    const auto& cfg = *rt.config;
    auto unix_now = services.clock.unix_now();
    auto history = services.activity.tenants(unix_now);
    std::unordered_map<std::string_view, const metrics::Activity::TenantHistory*> by_tenant;
    for (const auto& h : history) by_tenant.emplace(h.tenant, &h);
    auto activity_of = [&](const config::TenantConfig& t) -> const metrics::Activity::TenantHistory* {
        auto it = by_tenant.find(t.id);
        return it == by_tenant.end() ? nullptr : it->second;
    };

    std::vector<const config::TenantConfig*> shown;
    for (const auto& t : cfg.tenants)
        if (query.filter.empty() || t.id.find(query.filter) != std::string::npos) shown.push_back(&t);
    auto tokens = [&](const config::TenantConfig* t) {
        auto* a = activity_of(*t);
        return a ? a->tokens_last_hour : 0;
    };
    auto rejections = [&](const config::TenantConfig* t) {
        auto* a = activity_of(*t);
        return a ? a->rejections_last_5m : 0;
    };
    std::stable_sort(shown.begin(), shown.end(), [&](const auto* a, const auto* b) {
        if (query.sort == "id") return a->id < b->id;
        auto ka = query.sort == "tokens" ? tokens(a) : rejections(a);
        auto kb = query.sort == "tokens" ? tokens(b) : rejections(b);
        return ka != kb ? ka > kb : a->id < b->id;
    });

    json items = json::array();
    for (std::size_t i = query.offset; i < shown.size() && i < query.offset + query.limit; ++i) {
        const auto& t = *shown[i];
        auto state = co_await pipeline::preview(*services.store, classify::tenant_charges(t));
        json item = {{"id", t.id}, {"limits", state.unavailable ? json(nullptr) : limit_bars(state)}};
        if (!state.unavailable) item["quotas"] = quotas_json(state, cfg);
        if (auto* a = activity_of(t)) {
            item["rejections_per_s"] = recent_rate(a->rejections);
            item["prompt_tokens_per_s"] = recent_rate(a->prompt);
            item["completion_tokens_per_s"] = recent_rate(a->completion);
            item["tokens_last_hour"] = a->tokens_last_hour;
            item["spark"] = {{"bin_s", k_spark_bin_s},
                             {"rejections", binned(a->rejections)},
                             {"prompt", binned(a->prompt)},
                             {"completion", binned(a->completion)}};
        } else {
            item["rejections_per_s"] = item["prompt_tokens_per_s"] = item["completion_tokens_per_s"] = 0;
            item["tokens_last_hour"] = 0;
            item["spark"] = nullptr;
        }
        items.push_back(std::move(item));
    }

    // The heat map: who used the most tokens in the last hour, minute by minute.
    std::vector<const metrics::Activity::TenantHistory*> heavy;
    for (const auto& h : history)
        if (h.tokens_last_hour > 0) heavy.push_back(&h);
    std::sort(heavy.begin(), heavy.end(), [](const auto* a, const auto* b) {
        return a->tokens_last_hour != b->tokens_last_hour ? a->tokens_last_hour > b->tokens_last_hour
                                                          : a->tenant < b->tenant;
    });
    if (heavy.size() > k_heat_rows) heavy.resize(k_heat_rows);
    json heat = json::array();
    for (const auto* h : heavy) heat.push_back({{"tenant", h->tenant}, {"tokens", h->tokens_per_minute}});

    auto global = co_await pipeline::preview(*services.store, global_charges(cfg));
    co_return json_response(http::status::ok,
                            {{"now", static_cast<double>(unix_now) / 1e9},
                             {"draining", services.draining.load()},
                             {"limiter_unavailable", services.store->refusing()},
                             {"tenants",
                              {{"total", shown.size()},
                               {"configured", cfg.tenants.size()},
                               {"offset", query.offset},
                               {"limit", query.limit},
                               {"sort", query.sort},
                               {"q", query.filter},
                               {"items", std::move(items)}}},
                             {"heatmap", {{"minutes", metrics::Activity::k_minutes}, {"rows", std::move(heat)}}},
                             {"upstreams", upstreams_json(services, rt)},
                             {"global", global.unavailable ? json(nullptr) : limit_bars(global)},
                             {"queues", queues_json(services)}});
}

}  // namespace tokengate::server

namespace tokengate::server {

namespace ui {
struct File {
    std::string_view name, bytes;
};
extern const File k_files[];  // ui_assets.cpp, generated from src/server/ui/
extern const std::size_t k_file_count;
}  // namespace ui

std::optional<AdminResponse> ui_asset(std::string_view path) {
    std::string_view name;
    if (path == "/ui" || path == "/ui/") name = "index.html";
    else if (path == "/favicon.ico") name = "favicon.svg";
    else if (path.substr(0, 4) == "/ui/") name = path.substr(4);
    else return std::nullopt;
    for (std::size_t i = 0; i < ui::k_file_count; ++i) {
        const auto& file = ui::k_files[i];
        if (file.name != name) continue;
        auto ends = [&](std::string_view ext) {
            return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
        };
        AdminResponse res{http::status::ok, 11};
        res.set(http::field::content_type, ends(".html")  ? "text/html; charset=utf-8"
                                           : ends(".js")  ? "text/javascript; charset=utf-8"
                                           : ends(".css") ? "text/css; charset=utf-8"
                                                          : "image/svg+xml");
        // Only the page's own files run or load: no inline script, no other origin.
        res.set("Content-Security-Policy",
                "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
                "frame-ancestors 'none'");
        res.set("X-Content-Type-Options", "nosniff");
        res.set(http::field::cache_control, "no-cache");
        res.body() = std::string(file.bytes);
        return res;
    }
    return std::nullopt;
}

}  // namespace tokengate::server
