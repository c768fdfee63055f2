#include "tokengate/mock/mock_upstream.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <deque>
#include <list>
#include <unordered_map>

#include "tokengate/core/clock.hpp"
#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/prompt_prefix.hpp"
#include "tokengate/proxy/timed_stream.hpp"
#include "tokengate/server/responses.hpp"
#include "tokengate/tls/context.hpp"

namespace tokengate::mock {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;
using namespace net::experimental::awaitable_operators;

namespace {

constexpr auto k_use = net::as_tuple(net::use_awaitable);
constexpr std::uint64_t k_default_completion_tokens = 64;
constexpr const char* k_words[] = {"The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", "."};

struct Stats {
    std::int64_t running = 0;
    // --max-seqs: requests waiting for a place in the batch, each woken by cancelling its timer.
    std::deque<net::steady_timer*> waiting;
    std::uint64_t requests = 0;
    std::uint64_t cancelled = 0;
    std::uint64_t prompt_tokens = 0;
    std::uint64_t generation_tokens = 0;
    std::uint64_t tls_handshakes = 0;
    std::uint64_t tls_resumed = 0;
    // --prefix-cache: the prefixes held, most recently used first, and vLLM's counters (tokens).
    std::list<std::uint64_t> prefixes;
    std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> cached;
    std::uint64_t prefix_queries = 0;
    std::uint64_t prefix_hits = 0;
    std::shared_ptr<net::ssl::context> tls;  // set: HTTPS
};

std::uint64_t header_number(const http::request<http::string_body>& req, std::string_view name,
                            std::uint64_t fallback) {
    auto v = req[name];
    std::uint64_t out = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    return (v.empty() || ec != std::errc{} || p != v.data() + v.size()) ? fallback : out;
}

/// One completion's content, built outside the coroutines (GCC 12 mishandles array
/// temporaries such as JSON initializer lists inside coroutine bodies).
struct Completion {
    std::string error;
    cost::Endpoint kind = cost::Endpoint::chat;
    bool chat = true;
    bool details = false;  // TGI: parameters.details
    bool stream = false;
    bool include_usage = false;
    std::string id;
    std::string model;
    long long created = 0;
    std::uint64_t prompt_tokens = 0;
    std::uint64_t completion_tokens = 0;
    std::string finish_reason = "stop";
    std::string output_limit;  // "<field>=<n>" as the body named it, for x-mock-output-limit
    // Anthropic Messages: the prompt tokens read from the prompt cache (x-mock-cached-tokens),
    // and the blocks the output fills in turn: thinking (when the body enables it), text, and a
    // tool call (when it offers tools), each a share of the tokens.
    std::uint64_t cached_tokens = 0;
    std::uint64_t thinking_tokens = 0;
    std::uint64_t tool_tokens = 0;
    std::string tool_name;

    bool messages() const { return kind == cost::Endpoint::messages; }
    enum class Block { thinking, text, tool_use };
    /// The blocks in order, each with its first token.
    std::vector<std::pair<Block, std::uint64_t>> blocks() const {
        std::vector<std::pair<Block, std::uint64_t>> out;
        if (thinking_tokens) out.emplace_back(Block::thinking, 0);
        if (completion_tokens > thinking_tokens + tool_tokens || !tool_tokens)
            out.emplace_back(Block::text, thinking_tokens);
        if (tool_tokens) out.emplace_back(Block::tool_use, completion_tokens - tool_tokens);
        return out;
    }
    std::string words(std::uint64_t from, std::uint64_t to) const {
        std::string out;
        for (std::uint64_t i = from; i < to; ++i) out += k_words[i % std::size(k_words)];
        return out;
    }
    /// The tool call's arguments, streamed a word at a time as partial JSON.
    std::string tool_piece(std::uint64_t i) const {
        auto first = completion_tokens - tool_tokens;
        std::string piece = i == first ? "{\"query\": \"" : "";
        piece += k_words[i % std::size(k_words)];
        if (i + 1 == completion_tokens) piece += "\"}";
        return piece;
    }
    json anthropic_usage(bool started) const {
        return {{"input_tokens", prompt_tokens - cached_tokens},
                {"cache_creation_input_tokens", 0},
                {"cache_read_input_tokens", cached_tokens},
                {"output_tokens", started ? std::min<std::uint64_t>(completion_tokens, 1) : completion_tokens}};
    }
    std::string stop_reason() const {
        if (finish_reason == "length") return "max_tokens";
        return tool_tokens ? "tool_use" : "end_turn";
    }
    json anthropic_block(Block b, std::uint64_t from, bool whole) const {
        auto to = b == Block::thinking ? thinking_tokens
                  : b == Block::text   ? completion_tokens - tool_tokens
                                       : completion_tokens;
        switch (b) {
            case Block::thinking:
                return {{"type", "thinking"}, {"thinking", whole ? words(from, to) : ""}, {"signature", "mock"}};
            case Block::text: return {{"type", "text"}, {"text", whole ? words(from, to) : ""}};
            case Block::tool_use: {
                json input = json::object();
                if (whole) input["query"] = words(from, to);
                return {{"type", "tool_use"}, {"id", "toolu_" + id}, {"name", tool_name}, {"input", input}};
            }
        }
        return {};
    }
    json anthropic_message(bool started) const {
        json content = json::array();
        if (!started)
            for (auto [b, from] : blocks()) content.push_back(anthropic_block(b, from, true));
        return {{"id", id},
                {"type", "message"},
                {"role", "assistant"},
                {"model", model},
                {"content", std::move(content)},
                {"stop_reason", started ? json(nullptr) : json(stop_reason())},
                {"stop_sequence", nullptr},
                {"usage", anthropic_usage(started)}};
    }
    static std::size_t block_index(const std::vector<std::pair<Block, std::uint64_t>>& all, std::uint64_t token) {
        std::size_t index = 0;
        for (std::size_t k = 0; k < all.size(); ++k)
            if (all[k].second <= token) index = k;
        return index;
    }
    std::string anthropic_token_event(std::uint64_t i) const {
        std::string out;
        auto all = blocks();
        auto index = block_index(all, i);
        if (i > 0 && all[index].second == i) {  // the previous block ends, this one starts
            out += named_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index - 1}});
            out += named_event("content_block_start", {{"type", "content_block_start"},
                                                       {"index", index},
                                                       {"content_block", anthropic_block(all[index].first, i, false)}});
        }
        json delta;
        switch (all[index].first) {
            case Block::thinking: delta = {{"type", "thinking_delta"}, {"thinking", words(i, i + 1)}}; break;
            case Block::text: delta = {{"type", "text_delta"}, {"text", words(i, i + 1)}}; break;
            case Block::tool_use: delta = {{"type", "input_json_delta"}, {"partial_json", tool_piece(i)}}; break;
        }
        out +=
            named_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index}, {"delta", delta}});
        return out;
    }

    json usage() const {
        json out = {{"prompt_tokens", prompt_tokens},
                    {"completion_tokens", completion_tokens},
                    {"total_tokens", prompt_tokens + completion_tokens}};
        if (cached_tokens) out["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
        return out;
    }
    json envelope(json choices) const {
        json out = {{"id", id},
                    {"object", chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
                    {"created", created},
                    {"model", model},
                    {"choices", std::move(choices)}};
        return out;
    }
    std::string text() const {
        std::string out;
        for (std::uint64_t i = 0; i < completion_tokens; ++i) out += k_words[i % std::size(k_words)];
        return out;
    }
    /// A Responses API object; usage and output only once it is completed, as OpenAI sends it.
    json responses_object(bool completed) const {
        json out = {{"id", id},
                    {"object", "response"},
                    {"created_at", created},
                    {"status", completed ? "completed" : "in_progress"},
                    {"model", model},
                    {"output", json::array()},
                    {"usage", nullptr}};
        if (!completed) return out;
        out["output"] = json::array({{{"type", "message"},
                                      {"role", "assistant"},
                                      {"content", json::array({{{"type", "output_text"}, {"text", text()}}})}}});
        out["usage"] = {{"input_tokens", prompt_tokens},
                        {"output_tokens", completion_tokens},
                        {"total_tokens", prompt_tokens + completion_tokens}};
        return out;
    }
    json tgi_details() const {
        return {{"finish_reason", finish_reason == "length" ? "length" : "eos_token"},
                {"generated_tokens", completion_tokens}};
    }
    std::string json_response() const {
        if (kind == cost::Endpoint::embeddings) {
            json out = {{"object", "list"}, {"model", model}};
            out["data"] =
                json::array({{{"object", "embedding"}, {"index", 0}, {"embedding", json::array({0.0, 0.5, 1.0})}}});
            out["usage"] = {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}};
            return out.dump();
        }
        if (kind == cost::Endpoint::responses) return responses_object(true).dump();
        if (messages()) return anthropic_message(false).dump();
        if (kind == cost::Endpoint::tgi) {
            json out = {{"generated_text", text()}};
            if (details) out["details"] = tgi_details();
            return out.dump();
        }
        json choice =
            chat ? json{{"index", 0},
                        {"message", {{"role", "assistant"}, {"content", text()}}},
                        {"finish_reason", finish_reason}}
                 : json{{"index", 0}, {"text", text()}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
        json out = envelope(json::array({choice}));
        out["usage"] = usage();
        return out.dump();
    }
    std::string event(const json& content, const json& finish) const {
        json choice = chat ? json{{"index", 0}, {"delta", content}, {"finish_reason", finish}}
                           : json{{"index", 0}, {"text", content}, {"logprobs", nullptr}, {"finish_reason", finish}};
        json chunk = envelope(json::array({choice}));
        if (include_usage) chunk["usage"] = nullptr;
        return "data: " + chunk.dump() + "\n\n";
    }
    static std::string named_event(std::string_view name, const json& data) {
        return "event: " + std::string(name) + "\ndata: " + data.dump() + "\n\n";
    }
    std::string opening_event() const {
        if (kind == cost::Endpoint::responses)
            return named_event("response.created",
                               {{"type", "response.created"}, {"response", responses_object(false)}});
        if (kind == cost::Endpoint::tgi) return {};
        if (messages()) {
            auto first = blocks().front();
            return named_event("message_start", {{"type", "message_start"}, {"message", anthropic_message(true)}}) +
                   named_event("content_block_start", {{"type", "content_block_start"},
                                                       {"index", 0},
                                                       {"content_block", anthropic_block(first.first, 0, false)}}) +
                   named_event("ping", {{"type", "ping"}});
        }
        return chat ? event({{"role", "assistant"}, {"content", ""}}, nullptr) : std::string();
    }
    std::string token_event(std::uint64_t i) const {
        if (messages()) return anthropic_token_event(i);
        std::string word = k_words[i % std::size(k_words)];
        if (kind == cost::Endpoint::responses)
            return named_event("response.output_text.delta", {{"type", "response.output_text.delta"}, {"delta", word}});
        if (kind == cost::Endpoint::tgi) {
            json e = {{"index", i}, {"token", {{"id", i}, {"text", word}, {"logprob", 0.0}, {"special", false}}}};
            bool last = i + 1 == completion_tokens;
            e["generated_text"] = last ? json(text()) : json(nullptr);
            e["details"] = last && details ? tgi_details() : json(nullptr);
            return "data: " + e.dump() + "\n\n";
        }
        return event(chat ? json{{"content", word}} : json(word), nullptr);
    }
    std::string closing_events() const {
        if (kind == cost::Endpoint::responses)
            return named_event("response.completed",
                               {{"type", "response.completed"}, {"response", responses_object(true)}});
        if (kind == cost::Endpoint::tgi) return {};
        if (messages())
            return named_event("content_block_stop", {{"type", "content_block_stop"}, {"index", blocks().size() - 1}}) +
                   named_event("message_delta",
                               {{"type", "message_delta"},
                                {"delta", {{"stop_reason", stop_reason()}, {"stop_sequence", nullptr}}},
                                {"usage", {{"output_tokens", completion_tokens}}}}) +
                   named_event("message_stop", {{"type", "message_stop"}});
        std::string out = event(chat ? json::object() : json(""), finish_reason);
        if (include_usage) {
            json last = envelope(json::array());
            last["usage"] = usage();
            out += "data: " + last.dump() + "\n\n";
        }
        return out + "data: [DONE]\n\n";
    }
};

Completion plan_completion(const http::request<http::string_body>& req, std::string_view path, std::uint64_t serial) {
    Completion c;
    config::CostConfig cost_config;
    auto parsed = cost::parse_request_body(req.body(), cost_config, nullptr, path);
    if (parsed.error != cost::BodyError::none) {
        c.error = parsed.message;
        return c;
    }
    const auto& s = parsed.summary;
    c.kind = s.endpoint;
    c.chat = s.endpoint == cost::Endpoint::chat;
    std::uint64_t want = s.endpoint == cost::Endpoint::embeddings ? 0 : k_default_completion_tokens;
    if (s.output_named && s.output_per_sequence <= want) {
        c.finish_reason = "length";
        want = s.output_per_sequence;
    }
    c.completion_tokens =
        s.endpoint == cost::Endpoint::embeddings ? 0 : header_number(req, "x-mock-completion-tokens", want);
    // As a model server does: never past the output limit the body names.
    if (s.output_named && c.completion_tokens > s.output_per_sequence) {
        c.completion_tokens = s.output_per_sequence;
        c.finish_reason = "length";
    }
    json body = json::parse(req.body(), nullptr, false);
    c.details = body.is_object() && body.contains("parameters") && body["parameters"].is_object() &&
                body["parameters"].value("details", false);
    c.stream = s.stream;
    if (s.output_named)
        c.output_limit = std::string(cost::to_string(s.output_field)) + "=" + std::to_string(s.output_per_sequence);
    c.include_usage = s.client_wants_usage;
    c.prompt_tokens = s.input_tokens;
    if (c.messages()) {
        c.cached_tokens = std::min(header_number(req, "x-mock-cached-tokens", 0), c.prompt_tokens);
        bool thinking = body.is_object() && body.contains("thinking") && body["thinking"].is_object() &&
                        body["thinking"].value("type", "") == "enabled";
        if (thinking) c.thinking_tokens = c.completion_tokens / 4;
        if (body.is_object() && body.contains("tools") && body["tools"].is_array() && !body["tools"].empty() &&
            body["tools"][0].is_object() && c.completion_tokens - c.thinking_tokens >= 2) {
            c.tool_tokens = std::max<std::uint64_t>(1, (c.completion_tokens - c.thinking_tokens) / 4);
            c.tool_name = body["tools"][0].value("name", "tool");
        }
    } else if (auto cached = header_number(req, "x-mock-cached-tokens", 0)) {
        c.cached_tokens = std::min(cached, c.prompt_tokens);
    }
    c.model = s.model.empty() ? "mock-model" : s.model;
    c.id = std::string(c.chat                                    ? "chatcmpl-"
                       : s.endpoint == cost::Endpoint::responses ? "resp_"
                       : c.messages()                            ? "msg_"
                                                                 : "cmpl-") +
           std::to_string(serial);
    static const core::SteadyClock wall_clock;
    c.created = wall_clock.unix_now() / core::k_nanos_per_second;
    return c;
}

class MockSession {
public:
    MockSession(tcp::socket socket, const MockOptions& options, Stats& stats)
        : stream_(std::move(socket)), options_(options), stats_(stats) {}

    net::awaitable<void> run() {
        if (stats_.tls) {
            auto ec = co_await stream_.tls_accept(stats_.tls);
            if (ec) co_return;
            ++stats_.tls_handshakes;
            if (stream_.tls_resumed()) ++stats_.tls_resumed;
        }
        beast::flat_buffer buffer;
        for (;;) {
            http::request_parser<http::string_body> parser;
            parser.body_limit(64u << 20);
            auto [ec, n] = co_await http::async_read(stream_, buffer, parser, k_use);
            if (ec) break;
            auto req = parser.release();
            bool keep = co_await dispatch(req);
            if (!keep || !req.keep_alive()) break;
        }
        if (stream_.tls()) co_await stream_.tls_close(std::chrono::seconds(1));
        beast::error_code ignored;
        stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    }

private:
    net::awaitable<bool> send(http::response<http::string_body>& res, bool keep_alive) {
        res.keep_alive(keep_alive);
        res.prepare_payload();
        auto [ec, n] = co_await http::async_write(stream_, res, k_use);
        co_return !ec;
    }

    net::awaitable<bool> send_json(http::status status, const json& body, bool keep_alive) {
        http::response<http::string_body> res{status, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = body.dump();
        co_return co_await send(res, keep_alive);
    }

    net::awaitable<bool> send_error(http::status status, std::string_view message, bool keep_alive) {
        http::response<http::string_body> res{status, 11};
        res.set(http::field::content_type, "application/json");
        res.body() =
            server::error_body(message, status == http::status::bad_request ? "invalid_request_error" : "server_error",
                               std::to_string(static_cast<unsigned>(status)));
        co_return co_await send(res, keep_alive);
    }

    /// Waits as a GPU would; false if the client went away meanwhile (the work is abandoned).
    net::awaitable<bool> pause(std::chrono::microseconds d) {
        if (d.count() <= 0) co_return true;
        net::steady_timer timer(stream_.get_executor(), d);
        char scratch[256];
        auto result =
            co_await (timer.async_wait(k_use) || stream_.socket().async_read_some(net::buffer(scratch), k_use));
        co_return result.index() == 0;
    }

    std::chrono::microseconds per_token() const {
        if (options_.tokens_per_s <= 0) return std::chrono::microseconds(0);
        return std::chrono::microseconds(static_cast<std::int64_t>(1e6 / options_.tokens_per_s));
    }

    net::awaitable<bool> dispatch(http::request<http::string_body>& req) {
        auto target = std::string_view(req.target());
        auto path = target.substr(0, target.find('?'));
        bool keep = req.keep_alive();
        if (req.method() == http::verb::get && path == "/v1/models") {
            json body = {
                {"object", "list"},
                {"data", json::array({{{"id", "mock-model"}, {"object", "model"}, {"owned_by", "tokengate-mock"}}})}};
            co_return co_await send_json(http::status::ok, body, keep);
        }
        if (req.method() == http::verb::get && path == "/health")
            co_return co_await send_json(http::status::ok, json::object(), keep);
        if (req.method() == http::verb::get && path == "/metrics") {
            http::response<http::string_body> res{http::status::ok, 11};
            res.set(http::field::content_type, "text/plain; version=0.0.4");
            res.body() =
                "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running " + std::to_string(stats_.running) +
                "\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting " +
                std::to_string(stats_.waiting.size()) +
                // The KV cache as the batch's share of its room (vLLM's own name since v0.10).
                "\n# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc " +
                std::to_string(std::min(1.0, static_cast<double>(stats_.running) /
                                                 static_cast<double>(options_.max_seqs ? options_.max_seqs : 64))) +
                "\n"
                "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total " +
                std::to_string(stats_.prompt_tokens) +
                "\n# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total " +
                std::to_string(stats_.generation_tokens) +
                "\n# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total " +
                std::to_string(stats_.prefix_queries) +
                "\n# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total " +
                std::to_string(stats_.prefix_hits) + "\n# TYPE mock_requests_total counter\nmock_requests_total " +
                std::to_string(stats_.requests) + "\n# TYPE mock_cancelled_total counter\nmock_cancelled_total " +
                std::to_string(stats_.cancelled) +
                "\n# TYPE mock_tls_handshakes_total counter\nmock_tls_handshakes_total " +
                std::to_string(stats_.tls_handshakes) +
                "\n# TYPE mock_tls_resumed_total counter\nmock_tls_resumed_total " +
                std::to_string(stats_.tls_resumed) + "\n";
            co_return co_await send(res, keep);
        }
        static constexpr std::array<std::string_view, 8> k_served = {
            "/v1/chat/completions", "/v1/completions", "/v1/embeddings",   "/v1/responses",
            "/v1/messages",         "/generate",       "/generate_stream", "/pooling"};
        if (req.method() != http::verb::post || std::find(k_served.begin(), k_served.end(), path) == k_served.end())
            co_return co_await send_error(http::status::not_found, "Not found: " + std::string(path), keep);
        co_return co_await complete(req, std::string(path));
    }

    net::awaitable<bool> complete(http::request<http::string_body>& req, std::string path) {
        bool keep = req.keep_alive();
        ++stats_.requests;
        auto delay = std::chrono::milliseconds(header_number(req, "x-mock-delay-ms", 0));
        if (auto forced = header_number(req, "x-mock-status", 0); forced >= 400 && forced < 600) {
            if (!co_await pause(delay)) co_return false;
            co_return co_await send_error(static_cast<http::status>(forced), "mock failure requested", keep);
        }
        auto plan = plan_completion(req, path, stats_.requests);
        if (!plan.error.empty()) co_return co_await send_error(http::status::bad_request, plan.error, keep);

        if (!co_await take_a_place()) co_return false;
        stats_.prompt_tokens += plan.prompt_tokens;
        struct Running {
            Stats& stats;
            ~Running() {  // the place passes to the first in line, else is freed
                if (stats.waiting.empty()) {
                    --stats.running;
                    return;
                }
                stats.waiting.front()->cancel();
                stats.waiting.pop_front();
            }
        } running{stats_};
        auto abandon = [&] {
            ++stats_.cancelled;
            return false;
        };

        if (!co_await pause(delay)) co_return abandon();
        if (!co_await prefill(req, plan)) co_return abandon();
        if (!plan.stream) {
            if (!co_await pause(per_token() * static_cast<std::int64_t>(plan.completion_tokens))) co_return abandon();
            stats_.generation_tokens += plan.completion_tokens;
            http::response<http::string_body> res{http::status::ok, 11};
            res.set(http::field::content_type, "application/json");
            if (!plan.output_limit.empty()) res.set("x-mock-output-limit", plan.output_limit);
            res.body() = plan.json_response();
            co_return co_await send(res, keep);
        }

        http::response<http::empty_body> head{http::status::ok, 11};
        head.set(http::field::content_type, "text/event-stream");
        head.set(http::field::cache_control, "no-cache");
        if (!plan.output_limit.empty()) head.set("x-mock-output-limit", plan.output_limit);
        head.chunked(true);
        head.keep_alive(keep);
        http::response_serializer<http::empty_body> serializer{head};
        auto [hec, hn] = co_await http::async_write_header(stream_, serializer, k_use);
        if (hec) co_return abandon();
        for (std::uint64_t i = 0; i <= plan.completion_tokens; ++i) {
            // Event 0 opens the stream (the role for chat); events 1..n carry one token each.
            if (i > 1 && !co_await pause(per_token())) co_return abandon();
            std::string text = i == 0 ? plan.opening_event() : plan.token_event(i - 1);
            if (text.empty()) continue;
            auto [ec, n] = co_await net::async_write(stream_, http::make_chunk(net::buffer(text)), k_use);
            if (ec) co_return abandon();
            if (i > 0) ++stats_.generation_tokens;
        }
        std::string tail = plan.closing_events();
        if (!tail.empty()) {  // (an empty chunk would be the last chunk)
            auto [tec, tn] = co_await net::async_write(stream_, http::make_chunk(net::buffer(tail)), k_use);
            if (tec) co_return false;
        }
        auto [lec, ln] = co_await net::async_write(stream_, http::make_chunk_last(), k_use);
        co_return !lec;
    }

    /// --prefix-cache (SPEC §22): a cached prefix starts generating after --cached-ttft, any other
    /// prompt after its prefill, and its prefix is cached then. False if the client left meanwhile.
    net::awaitable<bool> prefill(const http::request<http::string_body>& req, const Completion& plan) {
        if (!options_.prefix_cache) co_return true;
        auto prefix = cost::prompt_prefix_hash(req.body(), plan.kind, options_.prefix_tokens, nullptr);
        stats_.prefix_queries += plan.prompt_tokens;
        auto hit = prefix ? stats_.cached.find(*prefix) : stats_.cached.end();
        if (hit != stats_.cached.end()) {
            stats_.prefix_hits += std::min(plan.prompt_tokens, options_.prefix_tokens);
            stats_.prefixes.splice(stats_.prefixes.begin(), stats_.prefixes, hit->second);
            co_return co_await pause(
                std::chrono::microseconds(static_cast<std::int64_t>(options_.cached_ttft_ms * 1e3)));
        }
        auto seconds = static_cast<double>(plan.prompt_tokens) / options_.prefill_tokens_per_s;
        if (!co_await pause(std::chrono::microseconds(static_cast<std::int64_t>(seconds * 1e6)))) co_return false;
        if (prefix && !stats_.cached.contains(*prefix)) {
            stats_.prefixes.push_front(*prefix);
            stats_.cached[*prefix] = stats_.prefixes.begin();
            if (stats_.prefixes.size() > options_.prefix_cache) {
                stats_.cached.erase(stats_.prefixes.back());
                stats_.prefixes.pop_back();
            }
        }
        co_return true;
    }

    /// A place in the batch (counted in `running`). --max-seqs: a full batch queues the request,
    /// first come first served; a finishing request hands its place over, so nobody overtakes
    /// and the batch never passes N (the mock runs one thread: no lock). False if the wait failed.
    net::awaitable<bool> take_a_place() {
        if (!options_.max_seqs || static_cast<std::uint64_t>(stats_.running) < options_.max_seqs) {
            ++stats_.running;
            co_return true;
        }
        net::steady_timer turn(stream_.get_executor(), net::steady_timer::time_point::max());
        stats_.waiting.push_back(&turn);
        auto [ec] = co_await turn.async_wait(k_use);
        if (ec != net::error::operation_aborted) {  // not woken by a finishing request
            std::erase(stats_.waiting, &turn);
            co_return false;
        }
        co_return true;
    }

    proxy::TimedStream stream_;
    const MockOptions& options_;
    Stats& stats_;
};

net::awaitable<void> accept_loop(tcp::acceptor& acceptor, const MockOptions& options, Stats& stats) {
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept(k_use);
        if (ec) co_return;
        socket.set_option(tcp::no_delay(true));
        net::co_spawn(
            acceptor.get_executor(),
            [s = std::make_shared<MockSession>(std::move(socket), options, stats)]() -> net::awaitable<void> {
                co_await s->run();
            },
            net::detached);
    }
}

}  // namespace

int run_mock_upstream(const MockOptions& options) {
    net::io_context ioc(1);
    tcp::endpoint endpoint{net::ip::make_address(options.host), options.port};
    tcp::acceptor acceptor(ioc);
    acceptor.open(endpoint.protocol());
    acceptor.set_option(net::socket_base::reuse_address(true));
    acceptor.bind(endpoint);
    acceptor.listen(net::socket_base::max_listen_connections);
    Stats stats;
    if (!options.tls_cert.empty() || !options.tls_key.empty()) {
        config::ServerTlsConfig tls;
        tls.cert.path = options.tls_cert;
        tls.key.path = options.tls_key;
        stats.tls = tls::make_server_context(tls, "mock-upstream");
        if (!options.tls_client_ca.empty()) tls::require_client_certificates(*stats.tls, options.tls_client_ca);
    }
    net::signal_set signals(ioc, SIGINT, SIGTERM);
    signals.async_wait([&](const beast::error_code&, int) { ioc.stop(); });
    net::co_spawn(ioc, accept_loop(acceptor, options, stats), net::detached);
    spdlog::info("mock upstream listening on {}:{} ({} tokens/s{})", options.host, acceptor.local_endpoint().port(),
                 options.tokens_per_s, stats.tls ? ", https" : "");
    ioc.run();
    return 0;
}

}  // namespace tokengate::mock
