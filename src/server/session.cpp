#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <random>

#include "admission.hpp"
#include "linger.hpp"
#include "services.hpp"
#include "tokengate/auth/key_table.hpp"
#include "tokengate/classify/classify.hpp"
#include "tokengate/core/json_writer.hpp"
#include "tokengate/core/sha256.hpp"
#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/settlement.hpp"
#include "tokengate/limiter/headers.hpp"
#include "tokengate/proxy/forward.hpp"
#include "tokengate/proxy/request_reader.hpp"
#include "tokengate/proxy/target.hpp"
#include "tokengate/proxy/upstream_request.hpp"
#include "tokengate/proxy/wire.hpp"
#include "tokengate/server/responses.hpp"

namespace tokengate::server {

namespace http = beast::http;
using core::Nanos;
using tcp = net::ip::tcp;

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);

// Built outside the coroutines (GCC 12 cannot lower initializer lists inside them).
const std::vector<limiter::HeaderField> k_retry_in_a_second = {{"Retry-After", "1"}};
constexpr std::size_t k_max_pipelined_bytes = 64 * 1024;

std::chrono::nanoseconds ns(Nanos n) { return std::chrono::nanoseconds(n); }

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
    return s.size() >= prefix.size() && beast::iequals(s.substr(0, prefix.size()), prefix);
}

/// Upstream fields the gateway's own rate-limit and request-id fields replace.
bool replaced_in_response(http::field, std::string_view name) {
    return starts_with_nocase(name, "x-ratelimit") || starts_with_nocase(name, "ratelimit") ||
           beast::iequals(name, "x-request-id");
}

std::string new_request_id() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uint64_t parts[2] = {rng(), rng()};
    return core::to_hex(reinterpret_cast<const std::uint8_t*>(parts), sizeof parts);
}

/// A client's own X-Request-Id is kept when it is short and plain.
std::string request_id_for(std::string_view given) {
    if (given.empty() || given.size() > 128) return new_request_id();
    for (char c : given)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
            return new_request_id();
    return std::string(given);
}

std::string address_text(const net::ip::address& a) {
    if (a.is_v6() && a.to_v6().is_v4_mapped())
        return net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6()).to_string();
    return a.to_string();
}

bool trusted(const std::vector<core::Cidr>& proxies, std::string_view address) {
    if (proxies.empty()) return false;  // the default: no address to parse on every request
    auto ip = core::parse_ip(address);
    if (!ip) return false;
    for (const auto& c : proxies)
        if (c.contains(*ip)) return true;
    return false;
}

/// The client: the peer, or, when the peer is a trusted proxy, the rightmost address of
/// X-Forwarded-For that is not a trusted proxy.
std::string client_address(const config::ServerConfig& server, const std::string& peer,
                           std::string_view forwarded_for) {
    if (forwarded_for.empty() || !trusted(server.trusted_proxies, peer)) return peer;
    std::string_view rest = forwarded_for;
    std::string last;
    while (!rest.empty()) {
        auto comma = rest.rfind(',');
        auto hop = comma == std::string_view::npos ? rest : rest.substr(comma + 1);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(0, comma);
        while (!hop.empty() && hop.front() == ' ') hop.remove_prefix(1);
        while (!hop.empty() && hop.back() == ' ') hop.remove_suffix(1);
        // One spelling per address, so ::ffff:1.2.3.4 and 1.2.3.4 share one ip bucket.
        beast::error_code ec;
        auto address = net::ip::make_address(std::string(hop), ec);
        if (ec) break;
        last = address_text(address);
        if (!trusted(server.trusted_proxies, last)) return last;
    }
    return last.empty() ? peer : last;
}

std::size_t pick_upstream(const config::RouteConfig& route, const Runtime& rt, Nanos now, bool& found) {
    thread_local std::minstd_rand rng{std::random_device{}()};
    unsigned total = 0;
    for (const auto& u : route.upstreams)
        if (rt.health[u.upstream]->available(now)) total += u.weight;
    found = total > 0;
    if (!found) return 0;
    unsigned pick = std::uniform_int_distribution<unsigned>(0, total - 1)(rng);
    for (const auto& u : route.upstreams) {
        if (!rt.health[u.upstream]->available(now)) continue;
        if (pick < u.weight) return u.upstream;
        pick -= u.weight;
    }
    return route.upstreams.front().upstream;
}

/// Everything the access log line says about one request.
struct RequestRecord {
    Nanos started = 0;
    std::string request_id;
    std::string client_ip;
    std::string method;
    std::string path;
    std::string tenant;
    std::string key_id;
    std::string model;
    std::string route;
    std::string upstream;
    std::string rejected_level;
    std::string rejected_limit;
    unsigned status = 0;
    double cost_reserved = 0;
    double cost_settled = 0;
    std::uint64_t prompt_tokens = 0;
    std::uint64_t completion_tokens = 0;
    Nanos first_byte = -1;
};

/// Settles an admitted request exactly once, whichever way the exchange ends, and counts it.
class Settlement {
public:
    Settlement(limiter::BucketStore* store, std::vector<limiter::Charge> charged, std::string lease, double reserved,
               metrics::Family& settled, std::string_view tenant)
        : store_(store),
          charged_(std::move(charged)),
          lease_(std::move(lease)),
          reserved_(reserved),
          settled_(settled),
          tenant_(tenant) {}
    Settlement(const Settlement&) = delete;
    Settlement& operator=(const Settlement&) = delete;
    ~Settlement() { settle(reserved_); }
    void settle(double actual_cost) {
        if (done_) return;
        done_ = true;
        if (store_) store_->settle(charged_, actual_cost, lease_);
        settled_.add({tenant_});
    }

private:
    limiter::BucketStore* store_;  // the store that took the charges; null if none did
    std::vector<limiter::Charge> charged_;
    std::string lease_;
    double reserved_;
    metrics::Family& settled_;
    std::string_view tenant_;  // lives in the config snapshot the request holds
    bool done_ = false;
};

class Session {
public:
    Session(tcp::socket socket, Worker& worker)
        : worker_(worker), services_(worker.services), stream_(std::move(socket)), watcher_exited_(stream_.get_executor()) {
        beast::error_code ec;
        auto endpoint = stream_.socket().remote_endpoint(ec);
        peer_ = ec ? "0.0.0.0" : address_text(endpoint.address());
        stream_.socket().set_option(tcp::no_delay(true), ec);
        worker_.client_connections.emplace(&stream_, &between_requests_);
    }
    ~Session() { worker_.client_connections.erase(&stream_); }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    net::awaitable<void> run() {
        for (;;) {
            auto rt = services_.runtime.get();
            const auto& server = rt->config->server;
            if (services_.draining.load()) break;
            if (buffer_.size() == 0) {
                // Between requests: the idle timeout applies, and a drain may close us at once.
                between_requests_ = true;
                stream_.expires_after(ns(server.idle_timeout));
                auto [ec, n] = co_await stream_.async_read_some(buffer_.prepare(8192), k_use);
                between_requests_ = false;
                if (ec) break;
                buffer_.commit(n);
            }
            proxy::RequestReader reader(server.max_header_bytes, server.max_body_bytes);
            // A request that arrived whole (the usual case) is parsed from the buffer without
            // another asynchronous operation; a partial one is read on until it is whole.
            auto progress = reader.feed(buffer_);
            if (progress == Progress::header_done) progress = reader.feed(buffer_);
            if (progress == Progress::need_more && !reader.header_done()) {
                stream_.expires_after(ns(server.header_timeout));
                if (!co_await read_until_header_done(reader, progress)) break;
            }
            if (progress != Progress::failed && !reader.done()) {
                if (beast::iequals(reader.get()[http::field::expect], "100-continue")) {
                    static constexpr std::string_view k_continue = "HTTP/1.1 100 Continue\r\n\r\n";
                    auto [cec, cn] = co_await net::async_write(stream_, net::buffer(k_continue), k_use);
                    if (cec) break;
                }
                stream_.expires_after(ns(server.idle_timeout));
                if (!co_await read_until_done(reader, progress)) break;
            }
            if (progress == Progress::failed) {
                auto why = proxy::describe(reader.error());
                co_await send_error(static_cast<http::status>(why.status), why.code, why.message);
                co_await linger_then_close(stream_);  // the framing is not to be trusted: nothing more is read
                co_return;
            }
            auto request = reader.release();
            bool keep_alive = co_await handle(request, rt);
            if (!keep_alive) break;
        }
        beast::error_code ignored;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
        stream_.socket().close(ignored);
    }

private:
    using Progress = proxy::RequestReader::Progress;

    /// Reads until the header section is whole; false if the connection ended or timed out.
    net::awaitable<bool> read_until_header_done(proxy::RequestReader& reader, Progress& progress) {
        while (progress == Progress::need_more && !reader.header_done()) {
            auto [ec, n] = co_await stream_.async_read_some(buffer_.prepare(8192), k_use);
            if (ec) co_return false;
            buffer_.commit(n);
            progress = reader.feed(buffer_);
            if (progress == Progress::header_done) progress = reader.feed(buffer_);
        }
        co_return true;
    }

    /// Reads the rest of the body; false if the connection ended or timed out.
    net::awaitable<bool> read_until_done(proxy::RequestReader& reader, Progress& progress) {
        while (progress != Progress::done && progress != Progress::failed) {
            auto [ec, n] = co_await stream_.async_read_some(buffer_.prepare(65536), k_use);
            if (ec) co_return false;
            buffer_.commit(n);
            progress = reader.feed(buffer_);
        }
        co_return true;
    }

    net::awaitable<void> send_error(http::status status, std::string_view code, std::string_view message) {
        auto text = error_response_text(status, "invalid_request_error", code, message, 11, false, {}, {});
        stream_.expires_after(std::chrono::seconds(5));
        co_await net::async_write(stream_, net::buffer(text), k_use);
    }

    /// One access-log line and the request's metrics, once per request.
    void record(const RequestRecord& r) {
        auto& m = services_.metrics;
        m.requests.add({r.tenant, r.route, std::to_string(r.status)});
        if (!r.rejected_limit.empty()) m.rejections.add({r.rejected_level, r.rejected_limit, r.tenant});
        if (r.cost_reserved > 0) {
            m.cost_reserved.add({r.tenant}, r.cost_reserved);
            m.cost_settled.add({r.tenant}, r.cost_settled);
        }
        if (r.prompt_tokens) m.tokens.add({r.tenant, r.model, "prompt"}, static_cast<double>(r.prompt_tokens));
        if (r.completion_tokens) m.tokens.add({r.tenant, r.model, "completion"}, static_cast<double>(r.completion_tokens));
        if (!services_.access_log) return;
        auto now = services_.clock.now();
        core::JsonObjectWriter w(worker_.next_access_line());
        w.number("ts", static_cast<double>(services_.clock.unix_now()) / 1e9)
            .string("request_id", r.request_id)
            .string("client_ip", r.client_ip)
            .string("method", r.method)
            .string("path", r.path)
            .string("tenant", r.tenant)
            .string("key_id", r.key_id)
            .string("model", r.model)
            .string("route", r.route)
            .string("upstream", r.upstream)
            .integer("status", r.status)
            .string("rejected_by", r.rejected_limit.empty() ? std::string() : r.rejected_level + ":" + r.rejected_limit)
            .number("cost_reserved", r.cost_reserved)
            .number("cost_settled", r.cost_settled)
            .integer("prompt_tokens", r.prompt_tokens)
            .integer("completion_tokens", r.completion_tokens);
        if (r.first_byte < 0) w.null("ttfb_ms");
        else w.number("ttfb_ms", static_cast<double>(r.first_byte - r.started) / 1e6);
        w.number("duration_ms", static_cast<double>(now - r.started) / 1e6);
        w.close();
        worker_.access_line_written();
    }

    /// Watches the client socket while the upstream works, so a client that goes away
    /// cancels the upstream request (and frees the GPU) instead of being noticed at the end.
    /// A plain completion handler, not a coroutine: it runs for every forwarded request.
    void watch_client() {
        if (buffer_.size() >= k_max_pipelined_bytes) return watcher_done();
        stream_.socket().async_read_some(buffer_.prepare(4096), [this](beast::error_code ec, std::size_t n) {
            if (ec) {
                if (!watch_.finished && ec != net::error::operation_aborted) {
                    watch_.client_gone = true;
                    if (watch_.active) watch_.active->stream.cancel();
                    if (watch_.on_client_gone) watch_.on_client_gone();
                }
                return watcher_done();
            }
            buffer_.commit(n);  // a pipelined request: kept for the next round
            // Read just before the exchange finished: stop here, or nothing would cancel the next read.
            if (watch_.finished) return watcher_done();
            watch_client();
        });
    }

    void watcher_done() {
        watch_exited_ = true;
        watcher_exited_.cancel();
    }

    /// Shaping: waits until every queue this request was admitted to lets it start. False if
    /// the client went away meanwhile; its places are then given back.
    net::awaitable<bool> wait_in_queues(const std::vector<limiter::Charge>& charges,
                                        const limiter::Decision& decision, proxy::ExchangeWatch& watch) {
        auto* store = decision.settle_with;
        auto decided_at = services_.clock.now();
        auto timer = std::make_shared<net::steady_timer>(stream_.get_executor());
        std::weak_ptr<net::steady_timer> weak = timer;
        auto wake = [ex = stream_.get_executor(), weak] {
            net::post(ex, [weak] {
                if (auto t = weak.lock()) t->cancel();
            });
        };
        watch.on_client_gone = wake;
        bool ok = true;
        for (std::size_t i = 0; i < charges.size(); ++i) {
            // A shared store hands out the start time itself: wait for it here.
            if (auto wait = decision.statuses[i].wait; wait > 0 && ok) {
                timer->expires_at(net::steady_timer::time_point(std::chrono::nanoseconds(decided_at + wait)));
                while (!watch.client_gone && services_.clock.now() < decided_at + wait)
                    co_await timer->async_wait(k_use);
                if (watch.client_gone) ok = false;
                else services_.metrics.queue_wait.observe({charges[i].spec->name}, static_cast<double>(wait) / 1e9);
            }
            auto ticket = decision.statuses[i].ticket;
            if (!ticket || !store) continue;
            if (!ok) {
                store->queue_cancel(charges[i], ticket);
                continue;
            }
            store->queue_set_waker(charges[i], ticket, wake);
            auto queued_at = services_.clock.now();
            for (;;) {
                if (watch.client_gone) {
                    store->queue_cancel(charges[i], ticket);
                    ok = false;
                    break;
                }
                auto check = store->queue_try_start(charges[i], ticket);
                if (check.started || check.unknown) {
                    services_.metrics.queue_wait.observe({charges[i].spec->name},
                                                         static_cast<double>(services_.clock.now() - queued_at) / 1e9);
                    break;
                }
                // Not first yet: sleep until the estimated start, or until the queue wakes us.
                auto until = std::max(check.wait_until, services_.clock.now() + 1'000'000);
                timer->expires_at(net::steady_timer::time_point(std::chrono::nanoseconds(until)));
                co_await timer->async_wait(k_use);
            }
        }
        watch.on_client_gone = nullptr;
        co_return ok;
    }

    net::awaitable<bool> handle(http::request<http::string_body>& req, std::shared_ptr<const Runtime> rt) {
        const auto& cfg = *rt->config;
        const auto& clock = services_.clock;
        RequestRecord rec;
        rec.started = clock.now();
        rec.request_id = request_id_for(req["x-request-id"]);
        rec.method = std::string(req.method_string());
        // Routes match, and the upstream receives, one spelling of each path.
        auto target = proxy::normalize_target(req.target());
        rec.path = target.ok ? target.path : std::string(req.target().substr(0, req.target().find('?')));
        rec.client_ip = client_address(cfg.server, peer_, req["X-Forwarded-For"]);
        bool keep_alive = req.keep_alive() && !services_.draining.load();
        unsigned version = req.version();

        auto finish_error = [&](http::status status, std::string_view type, std::string_view code,
                                std::string_view message,
                                const std::vector<limiter::HeaderField>& extra = {}) -> net::awaitable<bool> {
            auto text = error_response_text(status, type, code, message, version, keep_alive, rec.request_id, extra);
            rec.status = static_cast<unsigned>(status);
            record(rec);
            stream_.expires_after(ns(cfg.server.idle_timeout));
            auto [ec, n] = co_await net::async_write(stream_, net::buffer(text), k_use);
            co_return !ec && keep_alive;
        };

        if (services_.draining.load()) {
            keep_alive = false;
            co_return co_await finish_error(http::status::service_unavailable, "server_error", "shutting_down",
                                            "The gateway is shutting down; retry on another instance.");
        }
        if (!target.ok)
            co_return co_await finish_error(http::status::bad_request, "invalid_request_error", "invalid_path",
                                            "Refused request path: " + std::string(target.why) + ".");
        auto key = auth::extract_key(req[http::field::authorization], req["x-api-key"]);
        auto admission = admit_request(*rt, key, rec.path, rec.client_ip, req.body());
        if (admission.principal) {
            rec.tenant = cfg.tenants[admission.principal->tenant].id;
            rec.key_id = admission.principal->key_id;
        }
        switch (admission.error) {
            case Admission::Error::none: break;
            case Admission::Error::unauthorized:
                co_return co_await finish_error(http::status::unauthorized, "invalid_request_error", "invalid_api_key",
                                                admission.message);
            case Admission::Error::invalid_json:
            case Admission::Error::invalid_body:
                co_return co_await finish_error(
                    http::status::bad_request, "invalid_request_error",
                    admission.error == Admission::Error::invalid_json ? "invalid_json" : "invalid_body", admission.message);
            case Admission::Error::no_route:
                co_return co_await finish_error(http::status::not_found, "invalid_request_error", "not_found",
                                                admission.message);
        }
        const auto& tenant = cfg.tenants[admission.principal->tenant];
        const auto& summary = admission.summary;
        rec.model = summary.model;
        const auto& route = cfg.routes[admission.route];
        rec.route = route.path;
        double reserved = admission.reserved;
        const auto& charges = admission.charges;
        // (Not a ?: — GCC 12 miscompiles co_await inside a conditional expression.)
        limiter::Decision decision;
        if (services_.redis) decision = co_await services_.redis->decide(charges);
        else decision = services_.store.decide(charges);
        if (decision.unavailable)
            co_return co_await finish_error(http::status::service_unavailable, "server_error", "rate_limiter_unavailable",
                                            "The shared rate limiter is unavailable; retry shortly.",
                                            k_retry_in_a_second);
        auto headers = limiter::rate_limit_headers(decision, clock.unix_now());
        for (const auto& s : decision.statuses) {
            if (!s.spec->enforce && !s.verdict.admitted)
                services_.metrics.shadow_rejections.add({config::to_string(s.level), s.spec->name, tenant.id});
            if (s.level == config::Level::tenant && s.spec->capacity > 0)
                services_.metrics.remaining_ratio.set({tenant.id, s.spec->name},
                                                      std::max(0.0, s.verdict.remaining) / s.spec->capacity);
        }
        if (!decision.allowed) {
            auto why = limiter::describe_rejection(decision, charges);
            const auto& s = decision.statuses[decision.rejected];
            rec.rejected_level = config::to_string(s.level);
            rec.rejected_limit = s.spec->name;
            co_return co_await finish_error(http::status::too_many_requests, why.type, why.code, why.message,
                                            headers);
        }
        rec.cost_reserved = reserved;
        services_.metrics.admitted.add({tenant.id});
        Settlement settlement(decision.settle_with, limiter::charged(charges, decision), decision.lease, reserved,
                              services_.metrics.settled, tenant.id);

        // The watcher and its state belong to the session, reused request after request.
        watch_ = proxy::ExchangeWatch{};
        watcher_exited_.expires_at(net::steady_timer::time_point::max());
        watch_exited_ = false;
        watch_client();
        auto stop_watching = [&]() -> net::awaitable<void> {
            watch_.finished = true;
            if (!watch_exited_) {
                beast::error_code ignored;
                stream_.socket().cancel(ignored);
                co_await watcher_exited_.async_wait(k_use);
            }
        };

        if (decision.must_wait() && !co_await wait_in_queues(charges, decision, watch_)) {
            settlement.settle(0);  // never forwarded: refund every cost unit
            co_await stop_watching();
            rec.status = 499;
            record(rec);
            co_return false;
        }

        bool found = false;
        auto upstream_index = pick_upstream(route, *rt, clock.now(), found);
        if (!found) {
            settlement.settle(0);
            co_await stop_watching();
            co_return co_await finish_error(http::status::bad_gateway, "server_error", "upstream_unavailable",
                                            "Every upstream for this route is ejected after failures.",
                                            headers);
        }
        const auto& upstream = cfg.upstreams[upstream_index];
        rec.upstream = upstream.name;

        // A stream's usage arrives only if asked for: ask on the client's behalf, and hide the
        // answer from a client that did not ask.
        bool usage_injected = summary.stream && !summary.client_wants_usage;
        proxy::ClientOrigin origin{peer_, rec.client_ip, trusted(cfg.server.trusted_proxies, peer_), rec.request_id};
        auto up = proxy::make_upstream_request(
            req.base(), target, upstream, origin,
            usage_injected ? cost::with_stream_usage(req.body(), summary.has_stream_options) : std::move(req.body()));

        auto& pool = worker_.pool_for(upstream, worker_.worker_count);

        cost::ResponseUsage observed;
        proxy::ForwardHooks hooks;
        hooks.decorate = [&](const http::response_header<>& h, std::string& head) {
            for (const auto& f : headers) proxy::wire::field(head, f.name, f.value);
            proxy::wire::field(head, "X-Request-Id", rec.request_id);
            observed.start(h[http::field::content_type], !h[http::field::content_length].empty(), usage_injected);
        };
        hooks.replaced = replaced_in_response;
        hooks.on_chunk = [&](std::string_view data, bool last) { return observed.feed(data, last); };
        auto forward_started = clock.now();
        services_.metrics.inflight.add({upstream.name}, 1);
        auto result = co_await proxy::forward(pool, *rt->health[upstream_index], up,
                                              {stream_, keep_alive, version, req.method() == http::verb::head},
                                              watch_, hooks, clock);
        services_.metrics.inflight.add({upstream.name}, -1);
        co_await stop_watching();
        services_.metrics.upstream_duration.observe({upstream.name}, static_cast<double>(clock.now() - forward_started) / 1e9);
        if (result.first_byte_at) {
            rec.first_byte = result.first_byte_at;
            services_.metrics.upstream_ttfb.observe({upstream.name},
                                                    static_cast<double>(result.first_byte_at - forward_started) / 1e9);
        }

        // The actual cost: the upstream's usage, else what was streamed, else the reservation.
        auto settle_actual = [&](cost::ExchangeEnd end) {
            auto settled = cost::settled_cost(cfg.cost, cost::cost_factor(cfg.models, summary.model), summary, reserved,
                                              observed, end);
            settlement.settle(settled.cost);
            rec.cost_settled = settled.cost;
            rec.prompt_tokens = settled.prompt_tokens;
            rec.completion_tokens = settled.completion_tokens;
        };

        switch (result.outcome) {
            case proxy::ForwardOutcome::completed:
                settle_actual({false, true, result.status});
                rec.status = result.status;
                record(rec);
                co_return keep_alive;
            case proxy::ForwardOutcome::upstream_unavailable:
            case proxy::ForwardOutcome::upstream_timeout: {
                settle_actual({true, false, result.status});
                bool timeout = result.outcome == proxy::ForwardOutcome::upstream_timeout;
                co_return co_await finish_error(
                    timeout ? http::status::gateway_timeout : http::status::bad_gateway, "server_error",
                    timeout ? "upstream_timeout" : "upstream_unavailable",
                    timeout ? "The upstream did not answer in time." : "The upstream could not be reached.",
                    headers);
            }
            case proxy::ForwardOutcome::upstream_broken:
            case proxy::ForwardOutcome::client_gone:
                settle_actual({false, false, result.status});
                rec.status = result.outcome == proxy::ForwardOutcome::client_gone ? 499 : result.status;
                record(rec);
                co_return false;
        }
        co_return false;
    }

    Worker& worker_;
    Services& services_;
    proxy::TimedStream stream_;
    bool between_requests_ = false;  // waiting for the next request: a drain may close us
    beast::flat_buffer buffer_;
    std::string peer_;
    proxy::ExchangeWatch watch_;                // shared with the watcher during a forward
    net::steady_timer watcher_exited_;          // cancelled when the watcher ends
    bool watch_exited_ = true;
};

}  // namespace

net::awaitable<void> serve_connection(tcp::socket socket, Worker& worker) {
    worker.services.open_connections.fetch_add(1);
    {
        Session session(std::move(socket), worker);
        co_await session.run();
    }
    worker.services.open_connections.fetch_sub(1);
}

}  // namespace tokengate::server
