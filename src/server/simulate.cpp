#include "tokengate/server/simulate.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <map>
#include <unordered_map>
#include <variant>

#include <boost/asio/async_result.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "pipeline/admit.hpp"
#include "pipeline/identify.hpp"
#include "pipeline/sequence.hpp"
#include "services.hpp"
#include "tokengate/classify/classify.hpp"
#include "tokengate/core/saturate.hpp"
#include "tokengate/core/sha256.hpp"
#include "tokengate/cost/output_history.hpp"
#include "tokengate/proxy/balance.hpp"
#include "tokengate/proxy/target.hpp"
#include "tokengate/server/runtime.hpp"
#include "tokengate/store/local_store.hpp"

namespace tokengate::server {

using nlohmann::json;

namespace {

constexpr core::Nanos k_s = core::k_nanos_per_second;
// Bounds a trace may not pass: a week of virtual time per request, a decade of trace.
constexpr double k_max_t = 10.0 * 365 * 86400;
constexpr double k_max_duration = 7.0 * 86400;
constexpr std::size_t k_max_remembered_keys = 100'000;
// The most live-budget charges one simulated stream makes (SPEC §17's blocks).
constexpr std::uint64_t k_max_blocks = 10'000;

[[noreturn]] void bad(std::size_t line, const std::string& why) {
    throw TraceError("line " + std::to_string(line) + ": " + why);
}

double seconds(const json& j, const char* key, std::size_t line, double max) {
    if (!j.contains(key)) bad(line, std::string("missing '") + key + "'");
    const auto& v = j[key];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 || v.get<double>() > max)
        bad(line, std::string("'") + key + "' must be a number from 0 to " + std::to_string(std::llround(max)));
    return v.get<double>();
}

std::string text(const json& j, const char* key, std::size_t line) {
    if (!j.contains(key) || !j[key].is_string()) bad(line, std::string("'") + key + "' must be a string");
    return j[key].get<std::string>();
}

std::uint64_t whole(const json& j, const char* key, std::size_t line) {
    if (!j.contains(key)) return 0;
    if (!j[key].is_number_unsigned()) bad(line, std::string("'") + key + "' must be a whole number");
    return j[key].get<std::uint64_t>();
}

bool flag(const json& j, const char* key, std::size_t line) {
    if (!j.contains(key)) return false;
    if (!j[key].is_boolean()) bad(line, std::string("'") + key + "' must be true or false");
    return j[key].get<bool>();
}

/// An access-log line (record.cpp writes them). Its fields are read by name, others ignored:
/// the log may gain fields. `t` is still the Unix time here; read_trace makes it relative.
TraceEntry access_entry(const json& j, std::size_t line) {
    TraceEntry e;
    e.line = line;
    e.t = seconds(j, "ts", line, 1e11);
    e.key_id = text(j, "key_id", line);
    e.tenant = text(j, "tenant", line);
    if (j.contains("subject")) e.subject = text(j, "subject", line);
    if (j.contains("path")) e.path = text(j, "path", line);
    if (j.contains("client_ip")) e.client_ip = text(j, "client_ip", line);
    auto status = whole(j, "status", line);
    // No route: the gateway answered before pricing (no key, a bad body, no such route).
    if (!j.contains("route") || text(j, "route", line).empty())
        e.refused_at_admission = static_cast<int>(std::clamp<std::uint64_t>(status, 400, 599));
    // "cost" is the admission's price, refused or not; older logs have only what was reserved.
    e.cost = seconds(j, j.contains("cost") ? "cost" : "cost_reserved", line, 1e15);
    e.prompt_tokens = whole(j, "prompt_tokens", line);
    e.completion_tokens = whole(j, "completion_tokens", line);
    e.cached_tokens = whole(j, "cached_tokens", line);
    if (j.contains("duration_ms") && !j["duration_ms"].is_null())
        e.duration_s = seconds(j, "duration_ms", line, k_max_duration * 1e3) / 1e3;
    // A line is written as its request ends: it arrived duration_ms before.
    e.t = std::max(0.0, e.t - e.duration_s);
    if (j.contains("input_tokens") && e.refused_at_admission == 0) {
        // What a request the gateway did not serve would have used is unknown: its reservation.
        if (status < 200 || status >= 300) e.prompt_tokens.reset(), e.completion_tokens.reset();
        e.model = j.contains("model") ? text(j, "model", line) : std::string();
        e.input_tokens = whole(j, "input_tokens", line);
        e.output_declared = whole(j, "output_declared", line);
        e.sequences =
            j.contains("sequences") ? std::min<std::uint64_t>(whole(j, "sequences", line), cost::k_max_sequences) : 1;
        e.stream = flag(j, "stream", line);
        e.stopped = flag(j, "stopped", line);
    }
    if (j.contains("load_queue")) e.load_queue = seconds(j, "load_queue", line, 1e12);
    if (j.contains("load_kv_cache")) e.load_kv_cache = seconds(j, "load_kv_cache", line, 1);
    return e;
}

bool is_access_line(const json& j) { return j.contains("ts") && j.contains("request_id"); }

TraceEntry entry(const json& j, std::size_t line) {
    for (const auto& [k, v] : j.items())
        if (k != "t" && k != "key" && k != "path" && k != "client_ip" && k != "body" && k != "cost" && k != "usage" &&
            k != "duration_s" && k != "load")
            bad(line, "unknown field '" + k + "'");
    TraceEntry e;
    e.line = line;
    if (!j.contains("t")) bad(line, "missing 't' (seconds from the trace's start)");
    e.t = seconds(j, "t", line, k_max_t);
    if (!j.contains("key")) bad(line, "missing 'key'");
    e.key = text(j, "key", line);
    if (j.contains("path")) e.path = text(j, "path", line);
    if (j.contains("client_ip")) e.client_ip = text(j, "client_ip", line);
    if (j.contains("body") == j.contains("cost")) bad(line, "give either 'body' (the request) or 'cost'");
    if (j.contains("body")) {
        if (!j["body"].is_object()) bad(line, "'body' must be the request's JSON object");
        e.body = j["body"].dump();
    } else {
        e.cost = seconds(j, "cost", line, 1e15);
    }
    if (j.contains("usage")) {
        const auto& u = j["usage"];
        auto count = [&](const char* key) -> std::optional<std::uint64_t> {
            if (!u.contains(key)) return std::nullopt;
            if (!u[key].is_number_unsigned()) bad(line, std::string("usage.") + key + " must be a whole number");
            return u[key].get<std::uint64_t>();
        };
        if (!u.is_object()) bad(line, "'usage' must be an object");
        e.prompt_tokens = count("prompt_tokens");
        e.completion_tokens = count("completion_tokens");
        e.cached_tokens = count("cached_tokens").value_or(0);
    }
    if (j.contains("duration_s")) e.duration_s = seconds(j, "duration_s", line, k_max_duration);
    if (j.contains("load")) {
        const auto& load = j["load"];
        if (!load.is_object()) bad(line, "'load' must be an object: {\"queue\": N, \"kv_cache\": 0–1}");
        for (const auto& [k, v] : load.items())
            if (k != "queue" && k != "kv_cache") bad(line, "unknown field 'load." + k + "'");
        if (load.contains("queue")) e.load_queue = seconds(load, "queue", line, 1e12);
        if (load.contains("kv_cache")) e.load_kv_cache = seconds(load, "kv_cache", line, 1);
    }
    return e;
}

constexpr std::size_t k_bins = 600;

struct Tally {
    int index = 0;  // into SimulationResult::limits
    std::uint64_t admitted = 0, rejected = 0, queued = 0;
    std::vector<double> waits;
    double capacity = 0;
    bool water = false;
    std::uint64_t waiting = 0;  // a shaping queue: requests holding a ticket, not yet started
    std::vector<double> level = std::vector<double>(k_bins, std::nan(""));
    std::vector<std::uint32_t> arrivals = std::vector<std::uint32_t>(k_bins);
    std::vector<std::uint32_t> started = std::vector<std::uint32_t>(k_bins);
    std::vector<std::uint32_t> refused = std::vector<std::uint32_t>(k_bins);
};

std::string limit_name(config::Level level, const config::LimitSpec& spec) {
    return std::string(config::to_string(level)) + ":" + spec.name;
}

double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    auto at = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
    return v[std::min(at, v.size() - 1)];
}

/// The longest a shaping queue may hold a request (its max_wait, else capacity / rate).
double longest_queue_wait_s(const config::GatewayConfig& config) {
    double longest = 0;
    auto consider = [&](const std::vector<config::LimitSpec>& limits) {
        for (const auto& l : limits)
            if (limiter::is_shaping(l))
                longest = std::max(longest,
                                   l.max_wait > 0 ? static_cast<double>(l.max_wait) / 1e9 : l.capacity / l.rate_per_s);
    };
    for (const auto& t : config.tenants) consider(t.limits);
    for (const auto& r : config.routes) consider(r.limits);
    consider(config.ip_limits);
    consider(config.global_limits);
    return std::min(longest, k_max_duration);
}

/// The config without what simulating does not need and cannot assume is here: certificates.
std::shared_ptr<const config::GatewayConfig> without_tls(const config::GatewayConfig& config) {
    auto copy = std::make_shared<config::GatewayConfig>(config);
    copy->server.tls.reset();
    for (auto& u : copy->upstreams) u.https = false, u.tls = {};
    copy->store.backend = config::StoreBackend::memory;
    return copy;
}

/// Waits until the (manual) clock reaches `until`: its alarm posts the coroutine's resumption.
/// No timer: an event loop without one never asks the kernel for its timers on every poll.
net::awaitable<void> sleep_until(const core::Clock& clock, core::Nanos until) {
    if (clock.now() >= until) co_return;
    std::unique_ptr<core::Alarm> alarm;
    co_await net::async_initiate<decltype(net::use_awaitable), void()>(
        [&](auto handler) {
            // A clock's wake is copied (std::function): the one-shot handler goes in a shared box.
            auto box = std::make_shared<decltype(handler)>(std::move(handler));
            alarm = clock.alarm(until, [box] { net::post(std::move(*box)); });
        },
        net::use_awaitable);
}

/// A request's summary as its access-log line gave it (record_admission wrote it).
cost::RequestSummary logged_summary(const TraceEntry& e) {
    cost::RequestSummary s;
    s.endpoint = cost::endpoint_for_path(e.path);
    s.model = e.model;
    s.stream = e.stream;
    s.input_tokens = *e.input_tokens;
    s.output_per_sequence = e.output_declared;
    s.output_named = true;
    s.sequences = e.sequences;
    s.max_output_tokens = core::saturating_product(e.sequences, e.output_declared);
    return s;
}

/// The gateway's stage sequence (pipeline/sequence.hpp) driven by a trace on a manual clock: each
/// request is a coroutine on one event loop; the clock moves from alarm to alarm (exchanges
/// ending, queue turns, a stream's next block) and to each arrival, and the loop runs what that
/// woke. Only the exchange is the trace's: its usage, its duration.
class Simulator {
public:
    explicit Simulator(std::shared_ptr<const config::GatewayConfig> config)
        : runtime_(without_tls(*config)), store_(clock_), metrics_(registry_) {
        result_.config = std::move(config);
    }

    SimulationResult run(const std::vector<TraceEntry>& trace) {
        result_.decisions.reserve(trace.size());
        double end = trace.empty() ? 0 : std::max_element(trace.begin(), trace.end(), [](const auto& a, const auto& b) {
                                             return a.t < b.t;
                                         })->t;
        // The charts also show what shaping queues release after the last arrival.
        end += longest_queue_wait_s(*result_.config);
        result_.bin_s = std::max(end, 1e-3) * 1.0001 / static_cast<double>(k_bins);
        for (const auto& e : trace) {
            auto at = k_s + static_cast<core::Nanos>(std::llround(e.t * 1e9));
            advance_to(at);
            arrive(e, at);
        }
        advance_to(std::numeric_limits<core::Nanos>::max());
        for (const auto& name : order_) {
            auto& t = tally_[name];
            result_.limits.push_back({name, t.admitted, t.rejected, t.queued, quantile(t.waits, 0.5),
                                      quantile(t.waits, 0.99), t.capacity, t.water, std::move(t.level),
                                      std::move(t.arrivals), std::move(t.started), std::move(t.refused)});
        }
        return std::move(result_);
    }

private:
    class TraceEnds;

    /// Rings the alarms due by `until`, one deadline at a time, running what each woke.
    void advance_to(core::Nanos until) {
        for (auto next = clock_.next_alarm(); next && *next <= until; next = clock_.next_alarm()) {
            clock_.set(std::max(*next, clock_.now()));
            run_ready();
        }
        if (until != std::numeric_limits<core::Nanos>::max() && until > clock_.now()) clock_.set(until);
    }

    void run_ready() {
        ioc_.restart();
        ioc_.poll();
    }

    Tally& tally(const std::string& name) {
        auto [it, fresh] = tally_.try_emplace(name);
        if (fresh) {
            it->second.index = static_cast<int>(order_.size());
            order_.push_back(name);
        }
        return it->second;
    }
    /// Each tenant holds its own copy of its tier's limits: tallied by name, found by spec
    /// (the names are built once per spec, not once per request).
    Tally& tally(config::Level level, const config::LimitSpec* spec) {
        auto [it, fresh] = by_spec_.try_emplace(spec, nullptr);  // a spec belongs to one level
        if (fresh) {
            it->second = &tally(limit_name(level, *spec));
            it->second->capacity = spec->capacity;
            it->second->water = spec->algorithm == config::Algorithm::leaky_bucket;
        }
        return *it->second;
    }
    Tally& tally(const limiter::LimitStatus& s) { return tally(s.level, s.spec); }

    std::size_t bin(core::Nanos at) const {
        auto b = static_cast<double>(at - k_s) / 1e9 / result_.bin_s;
        return std::min(k_bins - 1, static_cast<std::size_t>(std::max(0.0, b)));
    }

    /// Every limit the request met: its level now, an arrival, and the refusal if it refused.
    void chart(const limiter::Decision& decision, core::Nanos at) {
        auto b = bin(at);
        for (std::size_t i = 0; i < decision.statuses.size(); ++i) {
            const auto& s = decision.statuses[i];
            auto& t = tally(s);
            if (limiter::is_shaping(*s.spec)) {
                t.waiting += s.ticket != 0;  // its water is the queue, which also drains between arrivals
                t.level[b] = static_cast<double>(t.waiting);
            } else {
                t.level[b] = t.water ? s.spec->capacity - s.verdict.remaining : s.verdict.remaining;
            }
            ++t.arrivals[b];
            if (static_cast<int>(i) == decision.rejected) ++t.refused[b];
        }
    }

    /// The gateway's own lookup (a SHA-256 per key), remembered: a trace repeats its keys.
    /// A JWT is verified at the trace's time, every time: it may expire during the replay.
    std::optional<auth::Principal> authenticate(const std::string& key) {
        if (auto it = principals_.find(key); it != principals_.end()) return it->second;
        auto identified = pipeline::identify(runtime_, key, clock_.unix_now());
        auto* who = std::get_if<auth::Principal>(&identified);
        std::optional<auth::Principal> out = who ? std::optional(std::move(*who)) : std::nullopt;
        if (principals_.size() < k_max_remembered_keys && !(runtime_.jwt && auth::looks_like_jwt(key)))
            principals_.emplace(key, out);
        return out;
    }

    /// An access-log line's sender: its key, if this config has it, else its tenant by name
    /// (a proposed config may have rotated the keys).
    std::optional<auth::Principal> logged_principal(const TraceEntry& e) {
        if (tenant_by_key_id_.empty() && tenant_by_name_.empty()) {
            const auto& tenants = runtime_.config->tenants;  // the copy the stages decide with
            for (const auto& t : tenants) {
                tenant_by_name_.emplace(t.id, &t);
                for (const auto& digest : t.key_digests)
                    tenant_by_key_id_.emplace(core::to_hex(reinterpret_cast<const std::uint8_t*>(digest.data()), 6),
                                              &t);
            }
        }
        if (auto it = tenant_by_key_id_.find(e.key_id); !e.key_id.empty() && it != tenant_by_key_id_.end())
            return auth::Principal{it->second, e.key_id, e.subject};
        if (auto it = tenant_by_name_.find(e.tenant); !e.tenant.empty() && it != tenant_by_name_.end())
            return auth::Principal{it->second, e.key_id, e.subject};
        return std::nullopt;
    }

    /// Admission, as the line allows: its body, its logged summary, or a cost given outright
    /// (which generates nothing the stages could bound).
    pipeline::Result<pipeline::Admitted> admission(const TraceEntry& e, const auth::Principal& who) {
        const auto& cfg = *runtime_.config;
        auto target = proxy::normalize_target(e.path);
        if (!e.body.empty()) {
            std::optional<auth::Principal> known;
            return pipeline::admit(runtime_, {e.key, target, e.client_ip, e.body, clock_.unix_now(), {}}, history_,
                                   known);
        }
        if (e.input_tokens)
            return pipeline::price_request(runtime_, {who, logged_summary(e), cost::find_model(cfg.models, e.model)},
                                           target.path, e.client_ip, history_);
        pipeline::Admitted a;
        auto route = classify::match_route(cfg, target.path, "");
        if (!route) {
            pipeline::Rejection none;
            none.status = pipeline::http::status::not_found;
            return none;
        }
        a.principal = who;
        a.route = *route;
        a.summary.sequences = 0;
        a.reserved = {*e.cost, static_cast<double>(e.prompt_tokens.value_or(0) + e.completion_tokens.value_or(0)), 0};
        a.charges =
            classify::applicable_limits(cfg, {who.tenant, e.client_ip, a.route, "", a.reserved, {}, {}, who.subject});
        return a;
    }

    /// The load the line says the route's upstreams had (SPEC §13); none: not live, nobody shed.
    void set_load(const TraceEntry& e, std::size_t route) {
        bool given = e.load_queue || e.load_kv_cache;
        if (!given && !load_set_) return;
        for (const auto& u : runtime_.config->routes[route].upstreams) {
            auto& load = runtime_.load[u.upstream];
            load = std::make_shared<proxy::UpstreamLoad>();
            if (given) load->scraped({e.load_queue, std::nullopt, e.load_kv_cache});
        }
        load_set_ = given;
    }

    void arrive(const TraceEntry& e, core::Nanos at) {
        SimulatedDecision d;
        d.t = e.t;
        std::optional<auth::Principal> who = e.key.empty() ? logged_principal(e) : authenticate(e.key);
        if (e.refused_at_admission && e.refused_at_admission != 401 && who) {
            d.status = e.refused_at_admission;
            d.tenant = *result_.tenants.insert(who->tenant->id).first;
            ++result_.invalid;
            result_.decisions.push_back(d);
            return;
        }
        if (!who) {
            d.status = 401;
            ++result_.unauthorized;
            result_.decisions.push_back(d);
            return;
        }
        d.tenant = *result_.tenants.insert(who->tenant->id).first;
        auto admitted = admission(e, *who);
        if (auto* no = std::get_if<pipeline::Rejection>(&admitted)) {
            d.status = static_cast<int>(no->status);
            ++result_.invalid;
            result_.decisions.push_back(d);
            return;
        }
        auto& a = std::get<pipeline::Admitted>(admitted);
        set_load(e, a.route);
        auto index = result_.decisions.size();
        result_.decisions.push_back(d);
        net::co_spawn(ioc_, request(index, e, std::move(a), at), [](std::exception_ptr ex) {
            if (ex) std::rethrow_exception(ex);
        });
        run_ready();
    }

    net::awaitable<void> request(std::size_t index, const TraceEntry& e, pipeline::Admitted admitted,
                                 core::Nanos arrived);

    core::ManualClock clock_{k_s, 1'700'000'000 * k_s};
    Runtime runtime_;
    store::LocalStore store_;
    metrics::Registry registry_;  // the stages count as they go; nobody reads it here
    GatewayMetrics metrics_;
    cost::OutputHistory history_;
    limiter::Exposure answers_in_flight_;
    auth::SubjectDirectory subjects_;
    pipeline::StageServices stages_{store_, clock_, metrics_, history_, answers_in_flight_, subjects_};
    bool load_set_ = false;
    std::unordered_map<std::string, std::optional<auth::Principal>> principals_;
    std::unordered_map<std::string, const config::TenantConfig*> tenant_by_key_id_, tenant_by_name_;
    std::map<std::string, Tally> tally_;
    std::unordered_map<const config::LimitSpec*, Tally*> by_spec_;
    std::vector<std::string> order_;
    SimulationResult result_;
    // Last: destroyed first, with any request still suspended in it, while what it uses lives.
    net::io_context ioc_{1};
};

/// simulate's ends of the sequence: a client that never leaves, and an exchange that takes the
/// trace line's duration and generates its usage, within the bound the stages set.
class Simulator::TraceEnds final : public pipeline::Ends {
public:
    TraceEnds(Simulator& sim, std::size_t index, const TraceEntry& e, core::Nanos arrived)
        : sim_(sim), index_(index), e_(e), arrived_(arrived) {}

    void decided(const limiter::Decision& d) override {
        sim_.chart(d, sim_.clock_.now());
        for (std::size_t i = 0; i < d.statuses.size(); ++i)
            if (d.statuses[i].ticket) queued_in_.push_back(&sim_.tally(d.statuses[i]));
        if (d.allowed || d.rejected < 0) return;
        auto& t = sim_.tally(d.statuses[d.rejected]);
        ++t.rejected;
        sim_.result_.decisions[index_].limit = t.index;
        refusal_tallied_ = true;
    }

    store::TurnWatch turn_watch() override {
        return {never_gone_, on_gone_, [this](const limiter::Charge& c, core::Nanos waited) {
                    auto& t = sim_.tally(c.level, c.spec);
                    sim_.result_.decisions[index_].limit = t.index;
                    ++t.queued;
                    t.waits.push_back(static_cast<double>(waited) / 1e9);
                    leave_queue(t);
                }};
    }

    net::awaitable<pipeline::Exchanged> exchange(const pipeline::Admitted& a, const pipeline::Permit& permit,
                                                 pipeline::LiveBudget* live) override {
        auto now = sim_.clock_.now();
        auto end = now + static_cast<core::Nanos>(std::llround(e_.duration_s * 1e9));
        started(permit.decision(), now);
        pipeline::Exchanged out;
        out.status = 200;
        out.keep_alive = true;
        auto& settled = out.settled;
        const auto& summary = a.summary;
        if (!e_.body.empty() || e_.input_tokens) {
            if (!e_.prompt_tokens && !e_.completion_tokens) {  // no usage given: the reservation stands
                settled.kept_reservation = true;
                settled.cost = a.reserved.cost;
            } else {
                settled.usage_reported = true;
                settled.prompt_tokens = e_.prompt_tokens.value_or(summary.input_tokens);
                // The upstream generates what the line says, within the bound written to it; a
                // stream the gateway stopped would have gone on, as far as its bound.
                auto bound =
                    a.output.bound_lowered() ? a.output.bound() * summary.sequences : summary.max_output_tokens;
                auto output = std::min(e_.stopped ? bound : e_.completion_tokens.value_or(0), bound);
                if (live) output = co_await relay(*live, output, now, end, out.stopped);
                // Cut before the upstream's usage came: the gateway's own count, not learned from.
                settled.usage_reported = !out.stopped;
                settled.completion_tokens = output;
                settled.cached_tokens = std::min(e_.cached_tokens, settled.prompt_tokens);
                settled.cost = cost::request_cost(sim_.runtime_.config->cost, a.cost_factor, settled.prompt_tokens,
                                                  output, summary.stream, settled.cached_tokens);
            }
        } else {  // a cost given outright: it is what the request used
            settled.usage_reported = true;
            settled.cost = a.reserved.cost;
            settled.prompt_tokens = e_.prompt_tokens.value_or(0);
            settled.completion_tokens = e_.completion_tokens.value_or(0);
        }
        co_await sleep_until(sim_.clock_, end);
        co_return out;
    }

    /// How the request ended: its verdict, and a refusal no decision tallied (a queue gave its
    /// place away, the answers in flight held the room, the upstreams were overloaded).
    void finish(const pipeline::RequestRecord& rec) {
        auto& d = sim_.result_.decisions[index_];
        d.status = static_cast<int>(rec.status);
        d.output_bound = rec.output_bound;
        d.completion_tokens = rec.completion_tokens;
        d.stopped = rec.stopped;
        auto now = sim_.clock_.now();
        if (!rec.rejected_limit.empty() && !refusal_tallied_) {
            auto& t = sim_.tally(std::string(rec.rejected_level).append(":").append(rec.rejected_limit));
            ++t.rejected;
            ++t.refused[sim_.bin(now)];
            d.limit = t.index;
        }
        while (!queued_in_.empty()) leave_queue(*queued_in_.back());
    }

private:
    void leave_queue(Tally& t) {
        auto it = std::find(queued_in_.begin(), queued_in_.end(), &t);
        if (it == queued_in_.end()) return;
        queued_in_.erase(it);
        t.level[sim_.bin(sim_.clock_.now())] = static_cast<double>(--t.waiting);
    }

    void started(const limiter::Decision& decision, core::Nanos now) {
        sim_.result_.decisions[index_].wait_s = static_cast<double>(now - arrived_) / 1e9;
        for (const auto& s : decision.statuses)
            if (s.charged) {
                auto& t = sim_.tally(s);
                ++t.admitted;
                ++t.started[sim_.bin(now)];
            }
    }

    /// A stream under stop_at_budget: its blocks charged as its tokens would arrive, spread over
    /// its duration; a refused block ends it where it is (SPEC §17).
    net::awaitable<std::uint64_t> relay(pipeline::LiveBudget& live, std::uint64_t output, core::Nanos from,
                                        core::Nanos to, bool& stopped) {
        // A line may claim any output: past k_max_blocks blocks, several are charged at a time.
        auto every = sim_.runtime_.config->cost.stream_charge_every;
        auto blocks = (output - std::min(output, live.covered())) / every / k_max_blocks + 1;
        while (live.covered() < output) {
            auto share = static_cast<double>(live.covered()) / static_cast<double>(output);
            co_await sleep_until(sim_.clock_, from + static_cast<core::Nanos>(share * static_cast<double>(to - from)));
            if (!co_await live.extend(sim_.store_, blocks)) {
                stopped = true;
                co_return live.covered();
            }
        }
        co_return output;
    }

    Simulator& sim_;
    std::size_t index_;
    const TraceEntry& e_;
    core::Nanos arrived_;
    bool never_gone_ = false;
    std::function<void()> on_gone_;
    std::vector<Tally*> queued_in_;  // the queues it holds a ticket in
    bool refusal_tallied_ = false;
};

net::awaitable<void> Simulator::request(std::size_t index, const TraceEntry& e, pipeline::Admitted admitted,
                                        core::Nanos arrived) {
    pipeline::RequestRecord rec;
    rec.tenant = result_.decisions[index].tenant;
    pipeline::record_admission(runtime_, admitted, rec);
    TraceEnds ends(*this, index, e, arrived);
    co_await pipeline::proceed(stages_, runtime_, admitted, rec, ends);
    ends.finish(rec);
}

/// For names from the config in HTML text and attributes.
std::string html_escape(std::string_view text) {
    std::string out;
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
}

constexpr double k_width = 760, k_height = 220, k_pad = 44;

/// An SVG frame: axes, the time span, the y range's top label, and `body`.
std::string frame(const std::string& title, double span_s, double top, const std::string& body) {
    std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(k_width) + "\" height=\"" +
                      number(k_height) + "\" role=\"img\"><title>" + html_escape(title) + "</title>";
    svg += "<line x1=\"" + number(k_pad) + "\" y1=\"" + number(k_height - k_pad) + "\" x2=\"" +
           number(k_width - k_pad) + "\" y2=\"" + number(k_height - k_pad) + "\" stroke=\"#444\"/>";
    svg += "<line x1=\"" + number(k_pad) + "\" y1=\"" + number(k_pad) + "\" x2=\"" + number(k_pad) + "\" y2=\"" +
           number(k_height - k_pad) + "\" stroke=\"#444\"/>";
    svg += "<text x=\"" + number(k_pad) + "\" y=\"" + number(k_height - k_pad + 16) + "\" font-size=\"11\">0 s</text>";
    svg += "<text x=\"" + number(k_width - k_pad) + "\" y=\"" + number(k_height - k_pad + 16) +
           "\" font-size=\"11\" text-anchor=\"end\">" + number(span_s) + " s</text>";
    svg += "<text x=\"" + number(k_pad - 4) + "\" y=\"" + number(k_pad + 4) +
           "\" font-size=\"11\" text-anchor=\"end\">" + number(top) + "</text>";
    svg += "<text x=\"" + number(k_width / 2) + "\" y=\"16\" font-size=\"13\" text-anchor=\"middle\">" +
           html_escape(title) + "</text>";
    return svg + body + "</svg>";
}

double x_of(std::size_t bin, std::size_t bins) {
    return k_pad + (static_cast<double>(bin) + 0.5) / static_cast<double>(bins) * (k_width - 2 * k_pad);
}
double y_of(double v, double top) {
    double f = top > 0 ? std::clamp(v / top, 0.0, 1.0) : 0;
    return k_height - k_pad - f * (k_height - 2 * k_pad);
}

std::string polyline(const std::vector<double>& values, double top, const char* colour) {
    std::string points;
    for (std::size_t b = 0; b < values.size(); ++b)
        if (!std::isnan(values[b])) points += number(x_of(b, values.size())) + "," + number(y_of(values[b], top)) + " ";
    return "<polyline fill=\"none\" stroke=\"" + std::string(colour) + "\" stroke-width=\"1.5\" points=\"" + points +
           "\"/>";
}

/// Seed 000's first picture: the level against the capacity, refusals marked.
std::string level_chart(const LimitSummary& l, double span_s) {
    // A level only changes at decisions: carry it forward between them.
    std::vector<double> level = l.level;
    for (std::size_t b = 1; b < level.size(); ++b)
        if (std::isnan(level[b])) level[b] = level[b - 1];
    std::string body = "<line x1=\"" + number(k_pad) + "\" y1=\"" + number(y_of(l.capacity, l.capacity)) + "\" x2=\"" +
                       number(k_width - k_pad) + "\" y2=\"" + number(y_of(l.capacity, l.capacity)) +
                       "\" stroke=\"#c33\" stroke-dasharray=\"4 3\"/>";
    body += polyline(level, l.capacity, "#1f6fb4");
    for (std::size_t b = 0; b < l.refused.size(); ++b)
        if (l.refused[b])
            body += "<circle class=\"refused\" cx=\"" + number(x_of(b, l.refused.size())) + "\" cy=\"" +
                    number(k_pad - 6) + "\" r=\"2.5\" fill=\"#c33\"/>";
    return frame(l.limit + (l.water ? ": water in the bucket" : ": remaining") + " against its capacity " +
                     number(l.capacity) + " (red: refused)",
                 span_s, l.capacity, body);
}

/// Seed 000's second picture: the arrival rate against the rate that went through.
std::string rate_chart(const LimitSummary& l, double bin_s, double span_s) {
    // Rates over a trailing window of a second (or a fiftieth of a long span): one bin's
    // single request would otherwise read as a spike.
    auto window = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(std::max(1.0, span_s / 50) / bin_s)));
    double window_s = static_cast<double>(window) * bin_s;
    std::vector<double> in(k_bins), out(k_bins);
    double arrived = 0, through = 0, top = 0;
    for (std::size_t b = 0; b < k_bins; ++b) {
        arrived += l.arrivals[b];
        through += l.started[b];
        if (b >= window) arrived -= l.arrivals[b - window], through -= l.started[b - window];
        in[b] = arrived / window_s;
        out[b] = through / window_s;
        top = std::max({top, in[b], out[b]});
    }
    return frame(l.limit + ": arrivals (grey) and admitted (blue) per second", span_s, top,
                 polyline(in, top, "#999") + polyline(out, top, "#1f6fb4"));
}

}  // namespace

std::vector<TraceEntry> read_trace(std::istream& in, TraceStats& stats) {
    std::vector<TraceEntry> out;
    std::string line;
    stats = {};
    std::optional<bool> access_log;  // decided by the first JSON line
    std::size_t first_other = 0;     // the first line that is not JSON, met before that
    for (std::size_t n = 1; std::getline(in, line); ++n) {
        auto first = line.find_first_not_of(" \t\r");
        if (first == std::string::npos) continue;
        // The gateway's own messages (and check's warnings, on stderr) share a log with its
        // access lines when log.access is stdout: skipped there, a bad line in a trace.
        if (line[first] != '{' && access_log.value_or(true)) {
            if (!access_log && !first_other) first_other = n;
            ++stats.skipped;
            continue;
        }
        auto j = json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) bad(n, "not a JSON object");
        bool log_line = is_access_line(j);
        if (!log_line && first_other) bad(first_other, "not a JSON object");
        if (access_log && *access_log != log_line)
            bad(n, log_line ? "an access-log line in a trace" : "a trace line in an access log");
        access_log = log_line;
        out.push_back(log_line ? access_entry(j, n) : entry(j, n));
        // An access log is in the order requests ended, not arrived: sorted without a word.
        if (!log_line && out.size() > 1 && out.back().t < out[out.size() - 2].t) ++stats.reordered;
    }
    if (!access_log.value_or(false) && first_other) bad(first_other, "not a JSON object");
    stats.access_log = access_log.value_or(false);
    if (access_log.value_or(false) && !out.empty()) {  // Unix times: from the first request
        double start =
            std::min_element(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.t < b.t; })->t;
        for (auto& e : out) e.t -= start;
    }
    if (stats.reordered || stats.access_log)
        std::stable_sort(out.begin(), out.end(), [](const TraceEntry& a, const TraceEntry& b) { return a.t < b.t; });
    return out;
}

SimulationResult simulate(std::shared_ptr<const config::GatewayConfig> config, const std::vector<TraceEntry>& trace) {
    return Simulator(std::move(config)).run(trace);
}

bool write_simulation(const SimulationResult& result, const std::string& out_dir, std::string& error) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    json limits = json::array();
    for (const auto& l : result.limits)
        limits.push_back({{"limit", l.limit},
                          {"admitted", l.admitted},
                          {"rejected", l.rejected},
                          {"queued", l.queued},
                          {"wait_p50_s", l.wait_p50_s},
                          {"wait_p99_s", l.wait_p99_s}});
    std::uint64_t admitted = 0, refused = 0;
    for (const auto& d : result.decisions) admitted += d.status == 200, refused += d.status == 429;
    json summary = {{"requests", result.decisions.size()}, {"admitted", admitted},      {"rejected", refused},
                    {"unauthorized", result.unauthorized}, {"invalid", result.invalid}, {"limits", limits}};
    std::ofstream s(out_dir + "/summary.json");
    s << summary.dump(2) << "\n";
    std::ofstream csv(out_dir + "/decisions.csv");
    csv << "t,tenant,verdict,limit,wait_s,output_bound,completion_tokens,stopped\n";
    char buf[64];
    for (const auto& d : result.decisions) {
        std::snprintf(buf, sizeof buf, "%.6f", d.t);
        csv << buf << "," << d.tenant << "," << d.status << ","
            << (d.limit >= 0 ? std::string_view(result.limits[d.limit].limit) : std::string_view()) << ",";
        std::snprintf(buf, sizeof buf, "%.6f", d.wait_s);
        csv << buf << ",";
        if (d.output_bound) csv << d.output_bound;
        csv << "," << d.completion_tokens << "," << (d.stopped ? "1" : "0") << "\n";
    }
    auto span_s = result.bin_s * static_cast<double>(k_bins);
    std::ofstream html(out_dir + "/report.html");
    html << "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>tokengate simulate</title>"
            "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 10px;text-align:right}</style>"
            "</head><body><h1>tokengate simulate</h1><p>"
         << result.decisions.size() << " requests: " << admitted << " admitted, " << refused << " refused (429), "
         << result.unauthorized << " with an unknown key (401), " << result.invalid << " invalid.</p>"
         << "<table><tr><th>limit</th><th>admitted</th><th>rejected</th><th>queued</th><th>wait p50</th><th>wait "
            "p99</th></tr>";
    for (const auto& l : result.limits)
        html << "<tr><td>" << html_escape(l.limit) << "</td><td>" << l.admitted << "</td><td>" << l.rejected
             << "</td><td>" << l.queued << "</td><td>" << number(l.wait_p50_s) << " s</td><td>" << number(l.wait_p99_s)
             << " s</td></tr>";
    html << "</table>";
    for (const auto& l : result.limits)
        html << "<h2>" << html_escape(l.limit) << "</h2>" << level_chart(l, span_s) << "<br>"
             << rate_chart(l, result.bin_s, span_s);
    html << "</body></html>\n";
    if (!s || !csv || !html) {
        error = "cannot write summary.json, decisions.csv or report.html in " + out_dir;
        return false;
    }
    return true;
}

}  // namespace tokengate::server
