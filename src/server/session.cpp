#include <sys/socket.h>

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>

#include "linger.hpp"
#include "pipeline/admit.hpp"
#include "pipeline/exchange.hpp"
#include "pipeline/precheck.hpp"
#include "pipeline/record.hpp"
#include "pipeline/sequence.hpp"
#include "services.hpp"
#include "tokengate/auth/key_table.hpp"
#include "tokengate/proxy/origin.hpp"
#include "tokengate/proxy/relay.hpp"
#include "tokengate/proxy/request_reader.hpp"
#include "tokengate/proxy/target.hpp"
#include "tokengate/proxy/wire.hpp"
#include "tokengate/server/responses.hpp"

namespace tokengate::server {

namespace http = beast::http;
using core::Nanos;
using tcp = net::ip::tcp;

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);
constexpr std::size_t k_max_pipelined_bytes = 64 * 1024;

std::chrono::nanoseconds ns(Nanos n) { return std::chrono::nanoseconds(n); }

class Session {
public:
    Session(tcp::socket socket, Worker& worker, bool tls)
        : worker_(worker),
          services_(worker.services),
          stream_(std::move(socket)),
          watcher_exited_(stream_.get_executor()),
          tls_listener_(tls) {
        beast::error_code ec;
        auto endpoint = stream_.socket().remote_endpoint(ec);
        peer_ = ec ? "0.0.0.0" : proxy::address_text(endpoint.address());
        stream_.socket().set_option(tcp::no_delay(true), ec);
        worker_.client_connections.emplace(&stream_, &between_requests_);
    }
    ~Session() { worker_.client_connections.erase(&stream_); }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    net::awaitable<void> run() {
        if (tls_listener_ && !co_await start_tls()) {
            beast::error_code ignored;
            stream_.socket().close(ignored);
            co_return;
        }
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
                // The head as far as it was read (a body too large is refused from its Content-Length).
                auto target = reader.get().target();
                auto shape = error_shape_for(target.substr(0, target.find('?')),
                                             proxy::first_field(reader.get(), "anthropic-version"));
                co_await send_error(static_cast<http::status>(why.status), why.code, why.message, shape);
                co_await linger_then_close(stream_);  // the framing is not to be trusted: nothing more is read
                co_return;
            }
            auto request = reader.release();
            bool keep_alive = co_await handle(request, rt);
            if (!keep_alive) break;
        }
        if (stream_.tls()) co_await stream_.tls_close(std::chrono::seconds(1));
        beast::error_code ignored;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
        stream_.socket().close(ignored);
    }

private:
    /// The TLS listener's first step, under the header timeout: the client's first bytes, then
    /// the handshake. Plain HTTP (its first byte cannot start a TLS record) gets a plain 400,
    /// as nginx answers it; any failure is counted, and logged once per address per minute.
    net::awaitable<bool> start_tls() {
        auto rt = services_.runtime.get();
        stream_.expires_after(ns(rt->config->server.header_timeout));
        // The first byte is looked at, not taken: OpenSSL reads the socket itself.
        auto [ec, ignored] = co_await stream_.async_wait_readable(k_use);
        unsigned char first = 0;
        if (!ec && ::recv(stream_.socket().native_handle(), &first, 1, MSG_PEEK) != 1)
            ec = net::error::eof;  // closed (or reset) before saying anything
        if (ec) co_return handshake_failed(ec == beast::error::timeout ? "timeout" : "closed", ec.message());
        constexpr unsigned char k_handshake_record = 0x16;
        if (first != k_handshake_record) {
            handshake_failed("plain_http", "plain HTTP sent to the HTTPS port");
            co_await send_error(http::status::bad_request, "plain_http_to_https_port",
                                "This port speaks HTTPS; the request was plain HTTP.");
            co_await linger_then_close(stream_);  // the request unread: no reset may destroy the answer
            co_return false;
        }
        auto hec = co_await stream_.tls_accept(rt->server_tls);
        if (hec) {
            auto reason = hec == beast::error::timeout ? "timeout" : hec == net::error::eof ? "closed" : "protocol";
            co_return handshake_failed(reason, stream_.tls_failure(hec));
        }
        services_.metrics.tls_handshakes.add({stream_.tls_version()});
        co_return true;
    }

    bool handshake_failed(std::string_view reason, const std::string& detail) {
        services_.metrics.tls_handshake_failures.add({reason});
        std::uint64_t held_back = 0;
        if (services_.handshake_log.allow(reason, services_.clock.now(), held_back))
            spdlog::warn("TLS handshake from {} failed ({}): {}; {} more failed so since the last report", peer_,
                         reason, detail, held_back);
        return false;
    }

    using Progress = proxy::RequestReader::Progress;

    /// How an answer goes back: the request's HTTP version, and whether the connection stays.
    struct Reply {
        unsigned version = 11;
        bool keep_alive = false;
        Nanos idle_timeout = 0;
        /// Read only when refusing (a Messages request's refusals are Anthropic's): the
        /// forwarded request's path pays no header lookup for it.
        const proxy::ClientRequestHead* head = nullptr;
    };

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

    net::awaitable<void> send_error(http::status status, std::string_view code, std::string_view message,
                                    ErrorShape shape = ErrorShape::openai) {
        auto text = error_response_text(status, "invalid_request_error", code, message, 11, false, {}, {}, shape);
        stream_.expires_after(std::chrono::seconds(5));
        co_await net::async_write(stream_, net::buffer(text), k_use);
    }

    /// Watches the client socket while the upstream works, so a client that goes away
    /// cancels the upstream request (and frees the GPU) instead of being noticed at the end.
    /// A plain completion handler, not a coroutine: it runs for every forwarded request.
    void watch_client() {
        if (buffer_.size() >= k_max_pipelined_bytes) return watcher_done();
        stream_.async_watch_read(buffer_.prepare(4096), [this](beast::error_code ec, std::size_t n) {
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

    /// Answers a request that ends before (or instead of) the upstream's response.
    net::awaitable<bool> refuse(const pipeline::Rejection& no, pipeline::RequestRecord& rec, const Reply& reply) {
        rec.status = static_cast<unsigned>(no.status);
        rec.rejected_level = no.level;
        rec.rejected_limit = no.limit;
        // Why a caller was not let in belongs in the log (SPEC §21); no message quotes a key.
        if (no.status == http::status::unauthorized || no.status == http::status::forbidden) rec.error = no.message;
        pipeline::record(rec, worker_);
        std::string_view version =
            reply.head ? proxy::first_field(*reply.head, "anthropic-version") : std::string_view();
        auto shape = error_shape_for(rec.path, version);
        auto text = pipeline::render(no, reply.version, reply.keep_alive, rec.request_id, shape);
        stream_.expires_after(ns(reply.idle_timeout));
        std::array<net::const_buffer, 1> bytes{net::buffer(text)};
        auto [ec, n] = co_await proxy::write_all(stream_, bytes);
        co_return !ec && reply.keep_alive;
    }

    /// Answers with a JSON body the gateway made itself (count_tokens).
    net::awaitable<bool> answer(std::string_view body, pipeline::RequestRecord& rec, const Reply& reply) {
        pipeline::record(rec, worker_);
        std::string text;
        text.reserve(256 + body.size());
        proxy::wire::status_line(text, reply.version, 200);
        proxy::wire::field(text, "Content-Type", "application/json");
        proxy::wire::field(text, "Server", "tokengate");
        proxy::wire::field(text, "X-Request-Id", rec.request_id);
        proxy::wire::connection(text, reply.version, reply.keep_alive);
        proxy::wire::content_length(text, body.size());
        text.append(proxy::wire::k_crlf).append(body);
        stream_.expires_after(ns(reply.idle_timeout));
        std::array<net::const_buffer, 1> bytes{net::buffer(text)};
        auto [ec, n] = co_await proxy::write_all(stream_, bytes);
        co_return !ec && reply.keep_alive;
    }

    /// SPEC §1's pipeline: admit, then the stage sequence simulate runs too (sequence.hpp).
    net::awaitable<bool> handle(proxy::ClientRequest& req, std::shared_ptr<const Runtime> rt) {
        const auto& cfg = *rt->config;
        auto target = proxy::normalize_target(req.target());  // routes and upstreams see one spelling
        auto rec = start_record(req, target, cfg.server);
        Reply reply{req.version(), req.keep_alive() && !services_.draining.load(), cfg.server.idle_timeout, &req};
        if (services_.draining.load())
            co_return co_await refuse(pipeline::shutting_down(), rec, {reply.version, false, reply.idle_timeout, &req});

        std::optional<auth::Principal> who;
        pipeline::Incoming incoming{
            auth::extract_key(proxy::first_field(req, http::field::authorization),
                              proxy::first_field(req, "x-api-key")),
            target,
            rec.client_ip,
            req.body(),
            services_.clock.unix_now(),
            cfg.auth.subject.header.empty() ? std::string_view() : proxy::first_field(req, cfg.auth.subject.header)};
        auto admission = co_await admit(*rt, incoming, who);
        if (who) rec.tenant = who->tenant->id, rec.key_id = who->key_id, rec.subject = who->subject;
        if (auto* no = std::get_if<pipeline::Rejection>(&admission)) co_return co_await refuse(*no, rec, reply);
        auto& admitted = std::get<pipeline::Admitted>(admission);
        pipeline::record_admission(*rt, admitted, rec);

        SocketEnds ends(*this, *rt, req, target, rec, reply);
        pipeline::StageServices stages{*services_.store,
                                       services_.clock,
                                       services_.metrics,
                                       services_.output_history,
                                       services_.answers_in_flight,
                                       services_.subjects};
        auto outcome = co_await pipeline::proceed(stages, *rt, admitted, rec, ends);
        if (!outcome.answer.empty()) co_return co_await answer(outcome.answer, rec, reply);
        if (outcome.refusal)
            co_return co_await refuse(
                *outcome.refusal, rec,
                {reply.version, reply.keep_alive && outcome.keep_alive, reply.idle_timeout, &req});
        pipeline::record(rec, worker_);
        co_return outcome.keep_alive;
    }

    /// serve's ends of the sequence: the client socket, watched while the request is admitted,
    /// and an upstream.
    class SocketEnds final : public pipeline::Ends {
    public:
        SocketEnds(Session& session, const Runtime& rt, proxy::ClientRequest& req,
                   const proxy::NormalizedTarget& target, const pipeline::RequestRecord& rec, const Reply& reply)
            : session_(session), rt_(rt), req_(req), target_(target), rec_(rec), reply_(reply) {}
        void admitted() override { session_.start_watching(); }
        store::TurnWatch turn_watch() override { return session_.turn_watch(); }
        // Not coroutines themselves: each hands over the stage's own awaitable (a frame fewer).
        net::awaitable<void> not_started() override { return session_.stop_watching(); }
        net::awaitable<void> exchanged() override { return session_.stop_watching(); }
        net::awaitable<pipeline::Exchanged> exchange(const pipeline::Admitted& admitted, const pipeline::Permit& permit,
                                                     pipeline::LiveBudget* live) override {
            const auto& cfg = *rt_.config;
            auto& stream = session_.stream_;
            proxy::ClientOrigin origin{session_.peer_, rec_.client_ip,
                                       proxy::is_trusted_proxy(cfg.server.trusted_proxies, session_.peer_),
                                       rec_.request_id, stream.tls()};
            proxy::ClientSide client{stream, reply_.keep_alive, reply_.version, req_.method() == http::verb::head};
            return pipeline::exchange(session_.worker_, {rt_, admitted, req_, target_, origin, permit.headers(), client,
                                                         session_.watch_, live});
        }

    private:
        Session& session_;
        const Runtime& rt_;
        proxy::ClientRequest& req_;
        const proxy::NormalizedTarget& target_;
        const pipeline::RequestRecord& rec_;
        const Reply& reply_;
    };

    /// Admission; a large body's limits that need no price first, then its tokenizing on the
    /// pricing pool, so this event loop keeps serving other requests (SPEC §17).
    net::awaitable<pipeline::Result<pipeline::Admitted>> admit(const Runtime& rt, const pipeline::Incoming& in,
                                                               std::optional<auth::Principal>& who) {
        if (in.body.size() <= rt.config->server.pricing_offload_bytes)
            co_return pipeline::admit(rt, in, services_.output_history, who);
        auto early = co_await pipeline::precheck(*services_.store, rt, in, services_.clock, who);
        if (auto* no = std::get_if<pipeline::Rejection>(&early)) co_return std::move(*no);
        auto count_limit = std::get<std::uint64_t>(early);
        // A coroutine of the pool's own: awaiting it resumes this one on its event loop.
        auto price = [&]() -> net::awaitable<pipeline::Result<pipeline::Admitted>> {
            co_return pipeline::admit(rt, in, services_.output_history, who, count_limit);
        };
        co_return co_await net::co_spawn(*services_.pricing, price(), net::use_awaitable);
    }

    pipeline::RequestRecord start_record(const proxy::ClientRequest& req, const proxy::NormalizedTarget& target,
                                         const config::ServerConfig& server) {
        pipeline::RequestRecord rec;
        rec.started = services_.clock.now();
        rec.request_id = proxy::request_id_for(proxy::first_field(req, "x-request-id"));
        rec.method = std::string_view(req.method_string());
        if (target.ok) rec.path = target.path;
        else rec.path = std::string_view(req.target().substr(0, req.target().find('?')));
        rec.client_ip =
            proxy::client_address(server.trusted_proxies, peer_, proxy::first_field(req, "X-Forwarded-For"));
        return rec;
    }

    /// The watcher and its state belong to the session, reused request after request.
    void start_watching() {
        watch_ = proxy::ExchangeWatch{};
        watcher_exited_.expires_at(net::steady_timer::time_point::max());
        watch_exited_ = false;
        watch_client();
    }

    net::awaitable<void> stop_watching() {
        watch_.finished = true;
        if (!watch_exited_) {
            beast::error_code ignored;
            stream_.socket().cancel(ignored);
            co_await watcher_exited_.async_wait(k_use);
        }
    }

    store::TurnWatch turn_watch() {
        return {watch_.client_gone, watch_.on_client_gone, [this](const limiter::Charge& c, Nanos waited) {
                    services_.metrics.queue_wait.observe({c.spec->name}, static_cast<double>(waited) / 1e9);
                }};
    }

    Worker& worker_;
    Services& services_;
    proxy::TimedStream stream_;
    bool between_requests_ = false;  // waiting for the next request: a drain may close us
    beast::flat_buffer buffer_;
    std::string peer_;
    proxy::ExchangeWatch watch_;        // shared with the watcher during a forward
    net::steady_timer watcher_exited_;  // cancelled when the watcher ends
    bool watch_exited_ = true;
    bool tls_listener_;
};

}  // namespace

// `slot`, a parameter, outlives the session (a local): it is given back once the session is gone.
net::awaitable<void> serve_connection(tcp::socket socket, Worker& worker, bool tls, ConnectionSlot /*slot*/) {
    Session session(std::move(socket), worker, tls);
    co_await session.run();
}

}  // namespace tokengate::server
