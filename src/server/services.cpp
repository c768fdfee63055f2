#include "services.hpp"

#include <array>
#include <atomic>
#include <string>

#include "tokengate/core/hash.hpp"
#include "tokengate/tls/context.hpp"

#include <spdlog/spdlog.h>

namespace tokengate::server {

namespace {

const std::vector<double> k_latency_buckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};

std::atomic<std::uint64_t> next_metrics_id{1};

/// One thread's series by name, a slot per name's hash: a name that collides with another is
/// found again (the registry keeps its series). A slot's series are found on first use, so a
/// family shows a tenant only once it is updated for it, as before.
template <class Families>
class SeriesByName {
public:
    static constexpr auto k_families = static_cast<std::size_t>(Families::count);
    template <class FamilyOf>
    metrics::Family::Ref get(std::uint64_t owner, Families which, std::string_view name, FamilyOf family_of) {
        auto& slot = slots_[core::hash_bytes(name) % slots_.size()];
        if (slot.owner != owner || slot.name != name) {
            slot.owner = owner;
            slot.name.assign(name);
            slot.series = {};
        }
        auto& ref = slot.series[static_cast<std::size_t>(which)];
        if (!ref) ref = family_of(which).at({name});
        return ref;
    }

private:
    struct Slot {
        std::uint64_t owner = 0;
        std::string name;
        std::array<metrics::Family::Ref, k_families> series;
    };
    std::array<Slot, 256> slots_;
};

}  // namespace

metrics::Family::Ref GatewayMetrics::series(PerTenant family, std::string_view tenant) {
    thread_local SeriesByName<PerTenant> slots;
    return slots.get(id_, family, tenant, [this](PerTenant f) -> metrics::Family& {
        switch (f) {
            case PerTenant::admitted: return admitted;
            case PerTenant::settled: return settled;
            case PerTenant::cost_reserved: return cost_reserved;
            default: return cost_settled;
        }
    });
}

metrics::Family::Ref GatewayMetrics::series(PerUpstream family, std::string_view upstream) {
    thread_local SeriesByName<PerUpstream> slots;
    return slots.get(id_, family, upstream, [this](PerUpstream f) -> metrics::Family& {
        switch (f) {
            case PerUpstream::inflight: return inflight;
            case PerUpstream::duration: return upstream_duration;
            default: return upstream_ttfb;
        }
    });
}

GatewayMetrics::GatewayMetrics(metrics::Registry& r)
    : requests(r.counter("tokengate_requests_total", "Requests answered, by tenant, route and status.",
                         {"tenant", "route", "status"})),
      admitted(r.counter("tokengate_admitted_total", "Requests admitted by every limit.", {"tenant"})),
      settled(r.counter("tokengate_settled_total", "Admitted requests settled (exactly once each).", {"tenant"})),
      rejections(r.counter("tokengate_rejections_total", "Requests refused with 429, by the limit that refused.",
                           {"level", "limit", "tenant"})),
      shadow_rejections(r.counter("tokengate_shadow_rejections_total",
                                  "Requests a shadow (enforce: false) limit would have refused.",
                                  {"level", "limit", "tenant"})),
      cost_reserved(r.counter("tokengate_cost_reserved_total", "Cost units reserved at admission.", {"tenant"})),
      cost_settled(r.counter("tokengate_cost_settled_total", "Cost units charged after settlement.", {"tenant"})),
      tokens(r.counter("tokengate_tokens_total", "Prompt and completion tokens, from usage or estimated.",
                       {"tenant", "model", "kind"})),
      upstream_duration(r.histogram("tokengate_upstream_duration_seconds", "Upstream exchange duration.", {"upstream"},
                                    k_latency_buckets)),
      upstream_ttfb(r.histogram("tokengate_upstream_ttfb_seconds", "Time to the upstream's response head.",
                                {"upstream"}, k_latency_buckets)),
      queue_depth(r.gauge("tokengate_queue_depth", "Requests waiting in a shaping queue.", {"limit"})),
      settlements_pending(r.gauge("tokengate_store_settlements_pending",
                                  "Settlements the store has not yet acknowledged (batched, in flight, or waiting to "
                                  "be retried).",
                                  {})),
      queue_wait(r.histogram("tokengate_queue_wait_seconds", "Time a request waited in a shaping queue.", {"limit"},
                             k_latency_buckets)),
      inflight(r.gauge("tokengate_inflight", "Requests in flight to an upstream.", {"upstream"})),
      remaining_ratio(r.gauge("tokengate_limit_remaining_ratio",
                              "Remaining / capacity of a tenant limit after its latest decision.",
                              {"tenant", "limit"})),
      quota_used(r.gauge("tokengate_quota_used",
                         "Used in a tenant quota's current window (reservations in flight included), as this "
                         "replica last saw it.",
                         {"tenant", "limit"})),
      quota_limit(r.gauge("tokengate_quota_limit",
                          "A tenant quota's allowance in its current window: its limit plus top-ups.",
                          {"tenant", "limit"})),
      config_reloads(r.counter("tokengate_config_reloads_total", "Configuration reloads.", {"result"})),
      output_capped(
          r.counter("tokengate_output_capped_total",
                    "Requests admitted with a lowered output limit: instead of a 429 (cost.cap_output), or beside "
                    "answers in flight (cost.stop_at_budget).",
                    {"tenant"})),
      streams_stopped(r.counter("tokengate_streams_stopped_total",
                                "Streams ended at the tenant's budget (cost.stop_at_budget).", {"tenant"})),
      usage_clamped(r.counter("tokengate_usage_clamped_total",
                              "Upstream usage reports past what the request could have used, clamped (SPEC §17).",
                              {"upstream"})),
      upstream_retries(r.counter("tokengate_upstream_retries_total",
                                 "Upstream refusals (routes[].retry) asked again on another upstream, by the upstream "
                                 "that refused and its status (SPEC §22).",
                                 {"upstream", "status"})),
      tls_handshakes(
          r.counter("tokengate_tls_handshakes_total", "Client TLS handshakes completed, by version.", {"version"})),
      tls_handshake_failures(r.counter("tokengate_tls_handshake_failures_total",
                                       "Client TLS handshakes that failed, by reason (plain_http, timeout, "
                                       "closed, protocol).",
                                       {"reason"})),
      upstream_tls_handshakes(r.counter("tokengate_upstream_tls_handshakes_total",
                                        "TLS handshakes with https upstreams: full, resumed or failed.",
                                        {"upstream", "result"})),
      tls_certificate_not_after(r.gauge("tokengate_tls_certificate_not_after_seconds",
                                        "When the listener's certificate expires (Unix time); alert on it minus "
                                        "time().",
                                        {})),
      upstream_metrics_up(r.gauge("tokengate_upstream_metrics_up",
                                  "1 when the upstream's last /metrics scrape read its load signals, else 0.",
                                  {"upstream"})),
      upstream_queue(
          r.gauge("tokengate_upstream_queue", "Requests waiting in the upstream, from its /metrics.", {"upstream"})),
      upstream_running(r.gauge("tokengate_upstream_running", "Requests the upstream is generating, from its /metrics.",
                               {"upstream"})),
      upstream_kv_cache(r.gauge("tokengate_upstream_kv_cache_ratio",
                                "The upstream's KV-cache use (0-1), from its /metrics.", {"upstream"})),
      adaptive_rate(r.gauge("tokengate_adaptive_rate",
                            "An adaptive limit's refill rate now (per second), as the load moved it.", {"limit"})),
      id_(next_metrics_id.fetch_add(1)) {
    // The model label is the client's string: per tenant, the first 64 models get series of
    // their own, later ones share "_other".
    tokens.limit_values_per(0, 1, 64);
}

void Worker::access_line_written() {
    if (access_batch.size() >= 32 * 1024) return flush_access_log();
    if (access_flush_armed) return;
    // A line waits at most 20 ms for its batch.
    access_flush_armed = true;
    access_flush_timer.expires_after(std::chrono::milliseconds(20));
    access_flush_timer.async_wait([this](const beast::error_code& ec) {
        access_flush_armed = false;
        if (!ec) flush_access_log();
    });
}

void Worker::flush_access_log() {
    if (access_batch.empty() || !services.access_log) return;
    services.access_log->write(access_batch);  // moved: the writer ends it with the last newline
}

proxy::ConnectionPool& Worker::pool_for(const config::UpstreamConfig& upstream, std::size_t workers,
                                        const std::shared_ptr<tls::ClientContext>& tls) {
    auto per_worker = (upstream.max_connections + workers - 1) / workers;
    auto& pool = pools[upstream.name];
    if (!pool) pool = std::make_unique<proxy::ConnectionPool>(ioc.get_executor(), upstream, per_worker, tls);
    else if (pool->differs(upstream, per_worker, tls.get())) pool->update_config(upstream, per_worker, tls);
    return *pool;
}

}  // namespace tokengate::server
