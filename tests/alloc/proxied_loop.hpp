#pragma once

// A gateway worker proxying requests on loopback inside this process, the way the gateway
// bench loads it (a 1 KB chat body, limits at the route, tenant, IP and global levels, cost
// from the body, the access log on). The worker runs its event loop on a thread of its own,
// as in the gateway; the client and the upstream run on the caller's thread, so that what
// `on_worker_thread` counts there is the gateway's alone. Used by alloc_tests (a ceiling that
// fails when the count grows) and bench/request_allocs_bench.cpp (the figure).

#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "server/services.hpp"
#include "tokengate/config/loader.hpp"
#include "tokengate/store/local_store.hpp"

namespace tokengate::testing {

namespace net = boost::asio;

class ProxiedLoop {
public:
    enum class Answer { json, sse };

    /// `on_worker_thread` runs first thing on the worker's thread.
    ProxiedLoop(Answer answer, std::function<void()> on_worker_thread)
        : answer_(answer),
          services_(std::make_shared<const server::Runtime>(
                        config::load_config_text(config_text(upstream_.local_endpoint().port()), "loop.yaml")),
                    std::make_shared<server::AccessLog>(std::make_shared<spdlog::sinks::null_sink_mt>()), clock_) {
        services_.store = std::make_unique<store::LocalStore>(clock_);
        request_ = request_text();
        reply_ = reply_text();
        net::co_spawn(outside_, accept_upstream(), net::detached);
        net::ip::tcp::acceptor front(worker_.ioc, {net::ip::make_address("127.0.0.1"), 0});
        client_.connect(front.local_endpoint());
        net::co_spawn(worker_.ioc,
                      server::serve_connection(front.accept(), worker_, false,
                                               *server::ConnectionSlot::take(services_.open_connections, 1)),
                      net::detached);
        worker_thread_ = std::thread([this, on_worker_thread = std::move(on_worker_thread)] {
            on_worker_thread();
            worker_.ioc.run();
        });
    }

    // The worker's loop ends its coroutines while the worker is whole: the session before the
    // registry of connections goes, then the pooled upstream connections.
    ~ProxiedLoop() {
        boost::system::error_code ignored;
        client_.close(ignored);
        upstream_.close(ignored);
        for (auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5); !on_worker([&] {
                 return worker_.client_connections.empty();
             }) && std::chrono::steady_clock::now() < give_up;)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        on_worker([&] {
            worker_.pools.clear();
            return true;
        });
        work_.reset();
        worker_.ioc.stop();
        worker_thread_.join();
    }
    ProxiedLoop(const ProxiedLoop&) = delete;
    ProxiedLoop& operator=(const ProxiedLoop&) = delete;

    /// `n` requests one after another on one kept-alive connection through the gateway; false
    /// unless every answer was a whole 200.
    bool run(std::size_t n) {
        std::optional<bool> ok;
        net::co_spawn(outside_, exchanges(n), [&](std::exception_ptr, bool r) { ok = r; });
        while (!ok) outside_.run_one();
        return *ok;
    }

private:
    using tcp = net::ip::tcp;
    static constexpr auto k_use = net::as_tuple(net::use_awaitable);
    using Buffer = std::array<char, 1 << 16>;

    static std::string config_text(unsigned short upstream_port) {
        std::string tenants;
        for (int i = 1; i <= 100; ++i)
            tenants += "  - { id: t" + std::to_string(i) + ", tier: standard, keys: [ \"bench-key-" +
                       std::to_string(i) + "\" ] }\n";
        return "upstreams: [ { name: backend, url: \"http://127.0.0.1:" + std::to_string(upstream_port) +
               "\", max_connections: 256 } ]\n"
               "routes:\n"
               "  - path: /v1/chat/completions\n"
               "    upstreams: [backend]\n"
               "    limits: [ { name: route-rps, algorithm: token_bucket, capacity: 1000000000, rate: 1000000000/s } "
               "]\n"
               "models: { llama3-8b: { cost_factor: 1.0 }, \"*\": { cost_factor: 1.0 } }\n"
               "tiers:\n"
               "  standard:\n"
               "    limits:\n"
               "      - { name: requests, algorithm: token_bucket, capacity: 1000000000, rate: 1000000000/s }\n"
               "      - { name: tokens, algorithm: token_bucket, capacity: 10000000000, rate: 10000000000/s, unit: "
               "cost }\n"
               "tenants:\n" +
               tenants +
               "ip_limits: [ { name: per-ip, algorithm: token_bucket, capacity: 100000000, rate: 100000000/s } ]\n"
               "global_limits: [ { name: gpu, algorithm: leaky_bucket, mode: police, capacity: 1000000000, rate: "
               "1000000000/s, unit: cost } ]\n";
    }

    std::string request_text() const {
        std::string content;
        for (int i = 0; i < 14; ++i) content += "Explain token buckets versus leaky buckets for GPU serving. ";
        std::string body = R"({"model":"llama3-8b","max_tokens":64,)";
        if (answer_ == Answer::sse) body += R"("stream":true,)";
        body += R"("messages":[{"role":"user","content":")" + content + R"("}]})";
        return "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer bench-key-7\r\n"
               "Content-Type: application/json\r\nContent-Length: " +
               std::to_string(body.size()) + "\r\n\r\n" + body;
    }

    std::string reply_text() const {
        if (answer_ == Answer::json) {
            std::string body =
                R"({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"llama3-8b","choices":[{"index":0,)"
                R"("message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog."},)"
                R"("finish_reason":"stop"}],"usage":{"prompt_tokens":180,"completion_tokens":12,"total_tokens":192}})";
            return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body;
        }
        std::string out = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
        auto chunk = [&](std::string_view data) {
            char size[16];
            out.append(size, std::snprintf(size, sizeof size, "%zx\r\n", data.size()));
            out.append(data);
            out += "\r\n";
        };
        chunk(R"(data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"The"}}]})"
              "\n\n");
        chunk(R"(data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" fox"}}]})"
              "\n\n");
        chunk(R"(data: {"id":"c","object":"chat.completion.chunk","choices":[],)"
              R"("usage":{"prompt_tokens":180,"completion_tokens":2,"total_tokens":182}})"
              "\n\ndata: [DONE]\n\n");
        return out + "0\r\n\r\n";
    }

    /// Where a header's value starts in `head` (names compared without case), or npos.
    static std::size_t header_value(std::string_view head, std::string_view name) {
        for (std::size_t at = head.find("\r\n"); at != std::string_view::npos; at = head.find("\r\n", at + 2)) {
            auto line = head.substr(at + 2);
            if (line.size() <= name.size() || line[name.size()] != ':') continue;
            bool same = true;
            for (std::size_t i = 0; i < name.size() && same; ++i)
                same = std::tolower(static_cast<unsigned char>(line[i])) == name[i];
            if (same) return at + 2 + name.size() + 1 + (line[name.size() + 1] == ' ' ? 1 : 0);
        }
        return std::string_view::npos;
    }
    static std::size_t number_at(std::string_view text, std::size_t at) {
        std::size_t n = 0;
        while (at < text.size() && text[at] >= '0' && text[at] <= '9') n = n * 10 + (text[at++] - '0');
        return n;
    }
    /// The length of the whole message at the front of `bytes` (Content-Length or chunked),
    /// or nullopt while it is incomplete.
    static std::optional<std::size_t> message_length(std::string_view bytes) {
        auto head_end = bytes.find("\r\n\r\n");
        if (head_end == std::string_view::npos) return std::nullopt;
        auto head = bytes.substr(0, head_end + 2);
        auto body_at = head_end + 4;
        if (auto at = header_value(head, "content-length"); at != std::string_view::npos) {
            auto whole = body_at + number_at(head, at);
            if (bytes.size() < whole) return std::nullopt;
            return whole;
        }
        if (header_value(head, "transfer-encoding") == std::string_view::npos) return body_at;
        auto end = bytes.find("\r\n0\r\n\r\n", body_at - 2);
        if (end == std::string_view::npos) return std::nullopt;
        return end + 7;
    }

    /// Reads into `buffer` (holding `have` bytes) until a whole message is at its front.
    static net::awaitable<std::optional<std::size_t>> read_message(tcp::socket& socket, Buffer& buffer,
                                                                   std::size_t& have) {
        for (;;) {
            if (auto whole = message_length({buffer.data(), have})) co_return whole;
            if (have == buffer.size()) co_return std::nullopt;
            auto [ec, n] =
                co_await socket.async_read_some(net::buffer(buffer.data() + have, buffer.size() - have), k_use);
            if (ec) co_return std::nullopt;
            have += n;
        }
    }
    static void consume(Buffer& buffer, std::size_t& have, std::size_t used) {
        std::memmove(buffer.data(), buffer.data() + used, have - used);
        have -= used;
    }

    net::awaitable<void> accept_upstream() {
        for (;;) {
            auto [ec, socket] = co_await upstream_.async_accept(k_use);
            if (ec) co_return;
            net::co_spawn(outside_, serve_upstream(std::move(socket)), net::detached);
        }
    }
    net::awaitable<void> serve_upstream(tcp::socket socket) {
        Buffer buffer;
        std::size_t have = 0;
        for (;;) {
            auto whole = co_await read_message(socket, buffer, have);
            if (!whole) co_return;
            consume(buffer, have, *whole);
            auto [ec, n] = co_await net::async_write(socket, net::buffer(reply_), k_use);
            if (ec) co_return;
        }
    }

    net::awaitable<bool> exchanges(std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) {
            auto [ec, written] = co_await net::async_write(client_, net::buffer(request_), k_use);
            if (ec) co_return false;
            auto whole = co_await read_message(client_, client_buffer_, client_have_);
            if (!whole) co_return false;
            bool ok = std::string_view(client_buffer_.data(), client_have_).starts_with("HTTP/1.1 200 ");
            consume(client_buffer_, client_have_, *whole);
            if (!ok) co_return false;
        }
        co_return true;
    }
    /// Runs `fn` on the worker's thread and returns what it returned.
    bool on_worker(const std::function<bool()>& fn) {
        std::promise<bool> result;
        net::post(worker_.ioc, [&] { result.set_value(fn()); });
        return result.get_future().get();
    }

    Answer answer_;
    net::io_context outside_{1};  // the client's and the upstream's loop: the caller's thread
    tcp::acceptor upstream_{outside_, {net::ip::make_address("127.0.0.1"), 0}};
    core::SteadyClock clock_;
    server::Services services_;
    server::Worker worker_{services_};
    net::executor_work_guard<net::io_context::executor_type> work_{worker_.ioc.get_executor()};
    tcp::socket client_{outside_};
    std::string request_;
    std::string reply_;
    Buffer client_buffer_{};
    std::size_t client_have_ = 0;
    std::thread worker_thread_;
};

}  // namespace tokengate::testing
