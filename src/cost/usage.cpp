#include "tokengate/cost/usage.hpp"

#include <simdjson.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/tokenizer.hpp"

namespace tokengate::cost {

namespace {

// Upstream bodies and SSE events are parsed on the data plane for every request: simdjson,
// one reusable parser per thread (nlohmann's lexer was the top symbol of a forwarded request).
simdjson::dom::parser& thread_parser() {
    thread_local simdjson::dom::parser parser;
    return parser;
}

std::uint64_t count_of(simdjson::dom::object o, const char* key) {
    std::uint64_t v = 0;
    return o[key].get_uint64().get(v) == simdjson::SUCCESS ? v : 0;
}

/// OpenAI's and the Responses API's `usage` object.
bool read_usage_object(simdjson::dom::object doc, Usage& out) {
    simdjson::dom::object usage;
    if (doc["usage"].get_object().get(usage) != simdjson::SUCCESS) return false;
    out.known = true;
    out.prompt_known = true;
    simdjson::dom::element ignored;
    bool responses_api = usage["input_tokens"].get(ignored) == simdjson::SUCCESS;
    out.prompt_tokens = count_of(usage, responses_api ? "input_tokens" : "prompt_tokens");
    out.completion_tokens = count_of(usage, responses_api ? "output_tokens" : "completion_tokens");
    simdjson::dom::object details;
    out.cached_tokens = 0;
    if (usage[responses_api ? "input_tokens_details" : "prompt_tokens_details"].get_object().get(details) ==
        simdjson::SUCCESS)
        out.cached_tokens = std::min(count_of(details, "cached_tokens"), out.prompt_tokens);
    return true;
}

/// TGI native: `details.generated_tokens` (a JSON body, or the last event of a stream).
bool read_tgi_details(simdjson::dom::object doc, Usage& out) {
    simdjson::dom::object details;
    std::uint64_t generated = 0;
    if (doc["details"].get_object().get(details) != simdjson::SUCCESS ||
        details["generated_tokens"].get_uint64().get(generated) != simdjson::SUCCESS)
        return false;
    out.known = true;
    out.prompt_known = false;
    out.prompt_tokens = 0;
    out.completion_tokens = generated;
    return true;
}

/// Usage in a JSON body or one event: top level, inside a Responses `response` object
/// (`response.completed`), or TGI's details.
bool read_usage(simdjson::dom::object doc, Usage& out) {
    if (read_usage_object(doc, out)) return true;
    simdjson::dom::object response;
    if (doc["response"].get_object().get(response) == simdjson::SUCCESS && read_usage_object(response, out))
        return true;
    return read_tgi_details(doc, out);
}

/// The text one streamed event carries: chat deltas, completions text, Responses
/// `response.output_text.delta`, TGI's token.
std::uint64_t streamed_text_tokens(simdjson::dom::object doc, const Tokenizer* tokenizer) {
    auto count = [&](std::string_view text) { return tokenizer ? tokenizer->count(text) : estimate_tokens(text); };
    std::uint64_t n = 0;
    std::string_view text;
    simdjson::dom::array choices;
    if (doc["choices"].get_array().get(choices) == simdjson::SUCCESS) {
        for (simdjson::dom::element c : choices) {
            simdjson::dom::object choice;
            if (c.get_object().get(choice) != simdjson::SUCCESS) continue;
            simdjson::dom::object delta;
            if (choice["delta"].get_object().get(delta) == simdjson::SUCCESS) {
                if (delta["content"].get_string().get(text) == simdjson::SUCCESS) n += count(text);
            } else if (choice["text"].get_string().get(text) == simdjson::SUCCESS) {
                n += count(text);
            }
        }
        return n;
    }
    std::string_view type;
    if (doc["type"].get_string().get(type) == simdjson::SUCCESS) {
        if (type == "response.output_text.delta" && doc["delta"].get_string().get(text) == simdjson::SUCCESS)
            n += count(text);
        return n;
    }
    simdjson::dom::object token;
    bool special = false;
    if (doc["token"].get_object().get(token) == simdjson::SUCCESS &&
        !(token["special"].get_bool().get(special) == simdjson::SUCCESS && special) &&
        token["text"].get_string().get(text) == simdjson::SUCCESS)
        n += 1;  // TGI streams one token an event
    return n;
}

/// Finds the end of the first complete event ("\n\n" or "\r\n\r\n"); npos if none yet. One
/// pass over the line feeds: a piece can hold a whole stream's events.
std::pair<std::size_t, std::size_t> event_end(std::string_view s) {
    for (auto i = s.find('\n'); i != std::string_view::npos && i + 1 < s.size(); i = s.find('\n', i + 1)) {
        if (s[i + 1] == '\n') return {i, 2};
        if (i > 0 && s[i - 1] == '\r' && s[i + 1] == '\r' && i + 2 < s.size() && s[i + 2] == '\n') return {i - 1, 4};
    }
    return {std::string_view::npos, 0};
}

constexpr std::string_view k_null_usage = ",\"usage\":null";

}  // namespace

void JsonUsageReader::feed(std::string_view data) {
    if (overflowed_) return;
    if (body_.size() + data.size() > max_bytes_) {
        overflowed_ = true;
        body_.clear();
        return;
    }
    body_.append(data);
}

Usage JsonUsageReader::finish() const {
    Usage u;
    if (overflowed_) return u;
    simdjson::dom::element root;
    if (thread_parser().parse(body_).get(root) != simdjson::SUCCESS) return u;
    // TGI's root route answers an array of one generation.
    simdjson::dom::array many;
    if (root.get_array().get(many) == simdjson::SUCCESS && many.size() > 0) root = many.at(0).value_unsafe();
    simdjson::dom::object doc;
    if (root.get_object().get(doc) != simdjson::SUCCESS) return u;
    if (read_usage(doc, u)) return u;
    // TGI without details: the generated text is what was generated.
    std::string_view text;
    if (doc["generated_text"].get_string().get(text) == simdjson::SUCCESS) {
        u.known = true;
        u.prompt_known = false;
        u.completion_tokens = tokenizer_ ? tokenizer_->count(text) : estimate_tokens(text);
    }
    return u;
}

std::string_view SseUsageFilter::feed(std::string_view data, bool last) {
    out_.clear();
    // Events are read in place: from the caller's piece, or from pending_ when an event
    // straddled two pieces. Unchanged runs of events are passed on without a copy.
    std::string_view source = data;
    if (!pending_.empty()) {
        pending_.append(data);
        source = pending_;
    }
    std::size_t consumed = 0;
    std::size_t copied = 0;  // source[copied, consumed) is verbatim output not yet in out_
    bool edited = false;
    for (;;) {
        auto [end, delimiter] = event_end(source.substr(consumed));
        if (end == std::string_view::npos) break;
        auto event = source.substr(consumed, end + delimiter);
        auto verdict = inspect(event);
        if (verdict != Verdict::keep) {
            out_.append(source.substr(copied, consumed - copied));
            if (verdict == Verdict::strip_null_usage) append_without_null_usage(event);
            copied = consumed + event.size();
            edited = true;
        }
        consumed += event.size();
        if (streamed_tokens_ > stop_after_) {
            stopped_ = true;
            break;
        }
    }
    if (stopped_) {  // the rest of the stream is not the client's any more
        out_.append(source.substr(copied, consumed - copied));
        pending_.clear();
        return out_;
    }
    // An event larger than any real one is passed on unparsed rather than held without bound.
    if (last || source.size() - consumed > max_event_bytes_) consumed = source.size();
    auto tail = source.substr(consumed);
    if (!edited && source.data() == data.data()) {
        pending_.assign(tail);
        return source.substr(0, consumed);
    }
    out_.append(source.substr(copied, consumed - copied));
    if (source.data() == data.data()) pending_.assign(tail);
    else pending_.erase(0, consumed);
    return out_;
}

void SseUsageFilter::append_without_null_usage(std::string_view event) {
    for (auto at = event.find(k_null_usage); at != std::string_view::npos; at = event.find(k_null_usage)) {
        out_.append(event.substr(0, at));
        event.remove_prefix(at + k_null_usage.size());
    }
    out_.append(event);
}

SseUsageFilter::Verdict SseUsageFilter::inspect(std::string_view event) {
    std::size_t line_start = 0;
    while (line_start < event.size()) {
        auto line_end = event.find('\n', line_start);
        if (line_end == std::string::npos) line_end = event.size();
        std::string_view line(event.data() + line_start, line_end - line_start);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.rfind("data:", 0) == 0) {
            auto payload = line.substr(5);
            if (!payload.empty() && payload.front() == ' ') payload.remove_prefix(1);
            simdjson::dom::object doc;
            if (payload != "[DONE]" &&
                thread_parser().parse(payload.data(), payload.size()).get_object().get(doc) == simdjson::SUCCESS) {
                note_dialect(doc);
                Usage u;
                bool has_usage = read_usage(doc, u);
                if (has_usage) usage_ = u;
                streamed_tokens_ += streamed_text_tokens(doc, tokenizer_);
                simdjson::dom::array choices;
                if (hide_usage_ && has_usage && doc["choices"].get_array().get(choices) == simdjson::SUCCESS &&
                    choices.size() == 0)
                    return Verdict::drop;
            }
        }
        line_start = line_end + 1;
    }
    if (hide_usage_ && event.find(k_null_usage) != std::string_view::npos) return Verdict::strip_null_usage;
    return Verdict::keep;
}

}  // namespace tokengate::cost

namespace tokengate::cost {

void SseUsageFilter::note_dialect(simdjson::dom::object doc) {
    std::string_view text;
    if (doc["object"].get_string().get(text) == simdjson::SUCCESS) {
        if (text == "chat.completion.chunk") dialect_ = Dialect::chat;
        else if (text == "text_completion") dialect_ = Dialect::completion;
        if (id_.empty() && doc["id"].get_string().get(text) == simdjson::SUCCESS)
            id_ = std::string(text.substr(0, 256));
        if (model_.empty() && doc["model"].get_string().get(text) == simdjson::SUCCESS)
            model_ = std::string(text.substr(0, 256));
        std::int64_t created = 0;
        if (doc["created"].get_int64().get(created) == simdjson::SUCCESS) created_ = created;
        simdjson::dom::array choices;
        if (doc["choices"].get_array().get(choices) == simdjson::SUCCESS)
            for (simdjson::dom::element c : choices) {
                std::uint64_t index = 0;
                if (c["index"].get_uint64().get(index) == simdjson::SUCCESS && index < 128)
                    choices_ = std::max(choices_, index + 1);
            }
        return;
    }
    if (doc["type"].get_string().get(text) == simdjson::SUCCESS && text.rfind("response.", 0) == 0) {
        dialect_ = Dialect::responses;
        simdjson::dom::object response;
        if (id_.empty() && doc["response"].get_object().get(response) == simdjson::SUCCESS) {
            if (response["id"].get_string().get(text) == simdjson::SUCCESS) id_ = std::string(text.substr(0, 256));
            if (response["model"].get_string().get(text) == simdjson::SUCCESS)
                model_ = std::string(text.substr(0, 256));
        }
        return;
    }
    simdjson::dom::object token;
    if (doc["token"].get_object().get(token) == simdjson::SUCCESS) {
        dialect_ = Dialect::tgi;
        ++tgi_index_;
    }
}

std::string SseUsageFilter::final_events(bool client_wants_usage, std::uint64_t prompt_tokens) const {
    using nlohmann::json;
    auto completion = streamed_tokens_;
    std::string out;
    auto data = [&](const json& event) {
        out += "data: " + event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
    };
    switch (dialect_) {
        case Dialect::chat:
        case Dialect::completion: {
            bool chat = dialect_ == Dialect::chat;
            json base = {{"id", id_},
                         {"object", chat ? "chat.completion.chunk" : "text_completion"},
                         {"created", created_},
                         {"model", model_}};
            json choices = json::array();
            for (std::uint64_t i = 0; i < choices_; ++i) {
                json choice = {{"index", i}, {"finish_reason", "length"}};
                if (chat) choice["delta"] = json::object();
                else choice["text"] = "";
                choices.push_back(std::move(choice));
            }
            json last = base;
            last["choices"] = std::move(choices);
            data(last);
            if (client_wants_usage) {
                json usage = base;
                usage["choices"] = json::array();
                usage["usage"] = {{"prompt_tokens", prompt_tokens},
                                  {"completion_tokens", completion},
                                  {"total_tokens", prompt_tokens + completion}};
                data(usage);
            }
            out += "data: [DONE]\n\n";
            break;
        }
        case Dialect::responses: {
            json response = {{"id", id_},
                             {"object", "response"},
                             {"status", "incomplete"},
                             {"incomplete_details", {{"reason", "max_output_tokens"}}},
                             {"model", model_},
                             {"usage",
                              {{"input_tokens", prompt_tokens},
                               {"output_tokens", completion},
                               {"total_tokens", prompt_tokens + completion}}}};
            out += "event: response.incomplete\n";
            data({{"type", "response.incomplete"}, {"response", std::move(response)}});
            break;
        }
        case Dialect::tgi:
            data({{"index", tgi_index_},
                  {"token", {{"id", 0}, {"text", ""}, {"logprob", 0.0}, {"special", true}}},
                  {"generated_text", ""},
                  {"details", {{"finish_reason", "length"}, {"generated_tokens", completion}, {"seed", nullptr}}}});
            break;
        case Dialect::unknown: out += "data: [DONE]\n\n"; break;
    }
    return out;
}

}  // namespace tokengate::cost
