#include "tokengate/server/simulate.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <map>
#include <queue>
#include <unordered_map>
#include <variant>

#include "pipeline/admit.hpp"
#include "tokengate/classify/classify.hpp"
#include "tokengate/core/sha256.hpp"
#include "tokengate/cost/output_history.hpp"
#include "tokengate/proxy/target.hpp"
#include "tokengate/server/runtime.hpp"
#include "tokengate/store/memory_store.hpp"

namespace tokengate::server {

using nlohmann::json;

namespace {

constexpr core::Nanos k_s = core::k_nanos_per_second;
// Bounds a trace may not pass: a week of virtual time per request, a decade of trace.
constexpr double k_max_t = 10.0 * 365 * 86400;
constexpr double k_max_duration = 7.0 * 86400;
constexpr std::size_t k_max_remembered_keys = 100'000;

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

/// An access-log line (record.cpp writes them). Its fields are read by name, others ignored:
/// the log may gain fields. `t` is still the Unix time here; read_trace makes it relative.
TraceEntry access_entry(const json& j, std::size_t line) {
    TraceEntry e;
    e.line = line;
    e.t = seconds(j, "ts", line, 1e11);
    e.key_id = text(j, "key_id", line);
    e.tenant = text(j, "tenant", line);
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
    if (j.contains("duration_ms") && !j["duration_ms"].is_null())
        e.duration_s = seconds(j, "duration_ms", line, k_max_duration * 1e3) / 1e3;
    return e;
}

bool is_access_line(const json& j) { return j.contains("ts") && j.contains("request_id"); }

TraceEntry entry(const json& j, std::size_t line) {
    for (const auto& [k, v] : j.items())
        if (k != "t" && k != "key" && k != "path" && k != "client_ip" && k != "body" && k != "cost" && k != "usage" &&
            k != "duration_s")
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
    }
    if (j.contains("duration_s")) e.duration_s = seconds(j, "duration_s", line, k_max_duration);
    return e;
}

/// A request admitted and not yet settled (waiting for its queue turns, or in flight).
struct InFlight {
    std::size_t index = 0;  // into the result's decisions
    std::vector<limiter::Charge> charges;
    limiter::Decision decision;
    std::size_t next_queue = 0;  // the charge whose ticket is asked next
    config::Amounts actual;
    core::Nanos arrived = 0;
    core::Nanos duration = 0;
};

struct Event {
    core::Nanos at;
    std::uint64_t seq;
    bool settle;  // else: ask for a queue turn
    std::size_t request;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

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

std::string limit_name(const limiter::LimitStatus& s) {
    return std::string(config::to_string(s.level)) + ":" + s.spec->name;
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

class Simulator {
public:
    explicit Simulator(std::shared_ptr<const config::GatewayConfig> config)
        : runtime_(without_tls(*config)), store_(clock_) {
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
            drain(at);
            clock_.set(at);
            arrive(e, at);
        }
        drain(std::numeric_limits<core::Nanos>::max());
        for (const auto& name : order_) {
            auto& t = tally_[name];
            result_.limits.push_back({name, t.admitted, t.rejected, t.queued, quantile(t.waits, 0.5),
                                      quantile(t.waits, 0.99), t.capacity, t.water, std::move(t.level),
                                      std::move(t.arrivals), std::move(t.started), std::move(t.refused)});
        }
        return std::move(result_);
    }

private:
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
    Tally& tally(const limiter::LimitStatus& s) {
        auto [it, fresh] = by_spec_.try_emplace(s.spec, nullptr);  // a spec belongs to one level
        if (fresh) {
            it->second = &tally(limit_name(s));
            it->second->capacity = s.spec->capacity;
            it->second->water = s.spec->algorithm == config::Algorithm::leaky_bucket;
        }
        return *it->second;
    }

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
    std::optional<auth::Principal> authenticate(const std::string& key) {
        if (auto it = principals_.find(key); it != principals_.end()) return it->second;
        auto who = runtime_.keys.authenticate(key);
        if (principals_.size() < k_max_remembered_keys) principals_.emplace(key, who);
        return who;
    }

    /// An access-log line's sender: its key, if this config has it, else its tenant by name
    /// (a proposed config may have rotated the keys).
    std::optional<auth::Principal> logged_principal(const TraceEntry& e) {
        if (tenant_by_key_id_.empty() && tenant_by_name_.empty()) {
            const auto& tenants = result_.config->tenants;
            for (std::size_t t = 0; t < tenants.size(); ++t) {
                tenant_by_name_.emplace(tenants[t].id, t);
                for (const auto& digest : tenants[t].key_digests)
                    tenant_by_key_id_.emplace(core::to_hex(reinterpret_cast<const std::uint8_t*>(digest.data()), 6), t);
            }
        }
        if (auto it = tenant_by_key_id_.find(e.key_id); !e.key_id.empty() && it != tenant_by_key_id_.end())
            return auth::Principal{it->second, e.key_id};
        if (auto it = tenant_by_name_.find(e.tenant); !e.tenant.empty() && it != tenant_by_name_.end())
            return auth::Principal{it->second, e.key_id};
        return std::nullopt;
    }

    void schedule(core::Nanos at, bool settle, std::size_t request) { events_.push({at, seq_++, settle, request}); }

    void drain(core::Nanos until) {
        while (!events_.empty() && events_.top().at <= until) {
            auto ev = events_.top();
            events_.pop();
            clock_.set(std::max(clock_.now(), ev.at));
            if (ev.settle) settle(ev.request);
            else ask_turn(ev.request);
        }
    }

    void arrive(const TraceEntry& e, core::Nanos at) {
        SimulatedDecision d;
        d.t = e.t;
        auto& cfg = *runtime_.config;
        std::optional<auth::Principal> who = e.key.empty() ? logged_principal(e) : authenticate(e.key);
        if (e.refused_at_admission && e.refused_at_admission != 401 && who) {
            d.status = e.refused_at_admission;
            d.tenant = result_.config->tenants[who->tenant].id;
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
        d.tenant = result_.config->tenants[who->tenant].id;
        InFlight f;
        f.arrived = at;
        f.duration = static_cast<core::Nanos>(std::llround(e.duration_s * 1e9));
        if (!e.cost) {
            auto target = proxy::normalize_target(e.path);
            auto admission = pipeline::admit(runtime_, {e.key, target, e.client_ip, e.body}, history_, who);
            if (auto* no = std::get_if<pipeline::Rejection>(&admission)) {
                d.status = static_cast<int>(no->status);
                ++result_.invalid;
                result_.decisions.push_back(d);
                return;
            }
            auto& a = std::get<pipeline::Admitted>(admission);
            f.charges = std::move(a.charges);
            f.actual = e.prompt_tokens || e.completion_tokens
                           ? cost::request_amounts(cfg.cost, a.cost_factor, a.price,
                                                   e.prompt_tokens.value_or(a.summary.input_tokens),
                                                   e.completion_tokens.value_or(0), a.summary.stream)
                           : a.reserved;
        } else {
            auto route = classify::match_route(cfg, proxy::normalize_target(e.path).path, "");
            if (!route) {
                d.status = 404;
                ++result_.invalid;
                result_.decisions.push_back(d);
                return;
            }
            config::Amounts given{
                *e.cost, static_cast<double>(e.prompt_tokens.value_or(0) + e.completion_tokens.value_or(0)), 0};
            f.charges = classify::applicable_limits(cfg, {who->tenant, e.client_ip, *route, "", given, {}});
            f.actual = given;
        }
        f.decision = store_.decide(f.charges);
        chart(f.decision, at);
        if (!f.decision.allowed) {
            d.status = 429;
            if (f.decision.rejected >= 0) {
                auto& t = tally(f.decision.statuses[f.decision.rejected]);
                ++t.rejected;
                d.limit = t.index;
            }
            result_.decisions.push_back(d);
            return;
        }
        f.index = result_.decisions.size();
        result_.decisions.push_back(d);
        bool waits = f.decision.must_wait();
        std::size_t id;
        if (free_.empty()) {  // a settled request's slot is reused: memory follows what is in flight
            id = in_flight_.size();
            in_flight_.push_back(std::move(f));
        } else {
            id = free_.back();
            free_.pop_back();
            in_flight_[id] = std::move(f);
        }
        if (waits) schedule(at, false, id);
        else started(id, at);
    }

    void ask_turn(std::size_t id) {
        auto& f = in_flight_[id];
        auto now = clock_.now();
        for (; f.next_queue < f.charges.size(); ++f.next_queue) {
            auto ticket = f.decision.statuses[f.next_queue].ticket;
            if (!ticket) continue;
            auto r = store_.queue_try_start(f.charges[f.next_queue], ticket);
            if (r.displaced) return displaced(id, now);
            if (r.started || r.unknown) {
                auto& t = tally(f.decision.statuses[f.next_queue]);
                result_.decisions[f.index].limit = t.index;
                ++t.queued;
                t.level[bin(now)] = static_cast<double>(--t.waiting);
                t.waits.push_back(static_cast<double>(now - f.arrived) / 1e9);
                continue;
            }
            // Not its turn yet: ask again when the queue says (after the ones due at once).
            schedule(std::max(r.wait_until, now), false, id);
            return;
        }
        started(id, now);
    }

    /// A queue gave the request's place to higher-priority traffic: a 429 after all, and its
    /// places in the queues after that one given back.
    void displaced(std::size_t id, core::Nanos now) {
        auto& f = in_flight_[id];
        for (auto i = f.next_queue; i < f.charges.size(); ++i) {
            const auto& status = f.decision.statuses[i];
            if (!status.ticket) continue;
            if (i > f.next_queue) store_.queue_cancel(f.charges[i], status.ticket);
            auto& t = tally(status);
            t.level[bin(now)] = static_cast<double>(--t.waiting);
            if (i > f.next_queue) continue;
            ++t.rejected;
            ++t.refused[bin(now)];
            result_.decisions[f.index].status = 429;
            result_.decisions[f.index].limit = t.index;
        }
        f.actual = {};
        settle(id);
    }

    void started(std::size_t id, core::Nanos now) {
        auto& f = in_flight_[id];
        result_.decisions[f.index].wait_s = static_cast<double>(now - f.arrived) / 1e9;
        for (std::size_t i = 0; i < f.charges.size(); ++i)
            if (f.decision.statuses[i].charged) {
                auto& t = tally(f.decision.statuses[i]);
                ++t.admitted;
                ++t.started[bin(now)];
            }
        schedule(now + f.duration, true, id);
    }

    void settle(std::size_t id) {
        auto& f = in_flight_[id];
        store_.settle(limiter::charged(f.charges, f.decision), f.actual, f.decision.lease);
        f.charges.clear();
        f.decision = {};
        free_.push_back(id);
    }

    core::ManualClock clock_{k_s, 1'700'000'000 * k_s};
    Runtime runtime_;
    store::MemoryStore store_;
    cost::OutputHistory history_;
    std::vector<InFlight> in_flight_;
    std::vector<std::size_t> free_;
    std::unordered_map<std::string, std::optional<auth::Principal>> principals_;
    std::unordered_map<std::string, std::size_t> tenant_by_key_id_, tenant_by_name_;
    std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
    std::uint64_t seq_ = 0;
    std::map<std::string, Tally> tally_;
    std::unordered_map<const config::LimitSpec*, Tally*> by_spec_;
    std::vector<std::string> order_;
    SimulationResult result_;
};

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
        if (out.size() > 1 && out.back().t < out[out.size() - 2].t) ++stats.reordered;
    }
    if (!access_log.value_or(false) && first_other) bad(first_other, "not a JSON object");
    stats.access_log = access_log.value_or(false);
    if (access_log.value_or(false) && !out.empty()) {  // Unix times: from the first request
        double start =
            std::min_element(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.t < b.t; })->t;
        for (auto& e : out) e.t -= start;
    }
    if (stats.reordered)
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
    csv << "t,tenant,verdict,limit,wait_s\n";
    char buf[64];
    for (const auto& d : result.decisions) {
        std::snprintf(buf, sizeof buf, "%.6f", d.t);
        csv << buf << "," << d.tenant << "," << d.status << ","
            << (d.limit >= 0 ? std::string_view(result.limits[d.limit].limit) : std::string_view()) << ",";
        std::snprintf(buf, sizeof buf, "%.6f", d.wait_s);
        csv << buf << "\n";
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
