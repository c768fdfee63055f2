#include "tokengate/cost/usage.hpp"

#include <simdjson.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "tokengate/core/saturate.hpp"
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

/// Anthropic's `input_tokens` leaves out what the prompt cache wrote and read: both are prompt,
/// and what it read is cached (SPEC §20). The Responses API has neither field.
void add_anthropic_cache(simdjson::dom::object usage, Usage& out) {
    auto written = count_of(usage, "cache_creation_input_tokens");
    auto read = count_of(usage, "cache_read_input_tokens");
    out.prompt_tokens = core::saturating_add(out.prompt_tokens, core::saturating_add(written, read));
    out.cached_tokens = std::min(core::saturating_add(out.cached_tokens, read), out.prompt_tokens);
}

/// OpenAI's, the Responses API's and Anthropic's `usage` object.
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
    if (responses_api) add_anthropic_cache(usage, out);
    return true;
}

/// Anthropic's Messages stream: `message_start` carries the prompt's usage, each
/// `message_delta` the output so far (newer servers repeat the prompt's counts there too).
bool read_anthropic_event(simdjson::dom::object doc, Usage& out) {
    std::string_view type;
    if (doc["type"].get_string().get(type) != simdjson::SUCCESS) return false;
    simdjson::dom::object usage, message;
    if (type == "message_start") {
        if (doc["message"].get_object().get(message) != simdjson::SUCCESS ||
            message["usage"].get_object().get(usage) != simdjson::SUCCESS)
            return false;
    } else if (type != "message_delta" || doc["usage"].get_object().get(usage) != simdjson::SUCCESS) {
        return false;
    }
    out.known = true;
    out.prompt_known = true;
    simdjson::dom::element ignored;
    if (usage["input_tokens"].get(ignored) == simdjson::SUCCESS) {
        out.prompt_tokens = count_of(usage, "input_tokens");
        out.cached_tokens = 0;
        add_anthropic_cache(usage, out);
    }
    out.completion_tokens = count_of(usage, "output_tokens");
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

/// SGLang native: `meta_info.prompt_tokens` / `completion_tokens`.
bool read_sglang_meta(simdjson::dom::object doc, Usage& out) {
    simdjson::dom::object meta;
    if (doc["meta_info"].get_object().get(meta) != simdjson::SUCCESS) return false;
    out.known = true;
    out.prompt_known = true;
    out.prompt_tokens = count_of(meta, "prompt_tokens");
    out.completion_tokens = count_of(meta, "completion_tokens");
    out.cached_tokens = std::min(count_of(meta, "cached_tokens"), out.prompt_tokens);
    return true;
}

/// Usage in a JSON body or one event: top level, inside a Responses `response` object
/// (`response.completed`), TGI's details or SGLang's meta_info.
bool read_usage(simdjson::dom::object doc, Usage& out) {
    if (read_usage_object(doc, out)) return true;
    simdjson::dom::object response;
    if (doc["response"].get_object().get(response) == simdjson::SUCCESS && read_usage_object(response, out))
        return true;
    return read_tgi_details(doc, out) || read_sglang_meta(doc, out);
}

/// SPEC §17: every channel a chat delta or message generates into: content, reasoning (vLLM
/// ≥ 0.19 and older), tool-call and function-call arguments (and names).
std::uint64_t message_tokens(simdjson::dom::object m, const Tokenizer* tokenizer) {
    std::uint64_t n = 0;
    std::string_view text;
    for (const char* key : {"content", "reasoning", "reasoning_content", "refusal"})
        if (m[key].get_string().get(text) == simdjson::SUCCESS) n += count_text(text, tokenizer);
    auto function_tokens = [&](simdjson::dom::object call) {
        simdjson::dom::object function;
        if (call.at_key("function").get_object().get(function) == simdjson::SUCCESS) call = function;
        for (const char* key : {"name", "arguments"})
            if (call[key].get_string().get(text) == simdjson::SUCCESS) n += count_text(text, tokenizer);
    };
    simdjson::dom::array calls;
    if (m["tool_calls"].get_array().get(calls) == simdjson::SUCCESS)
        for (simdjson::dom::element c : calls) {
            simdjson::dom::object call;
            if (c.get_object().get(call) == simdjson::SUCCESS) function_tokens(call);
        }
    simdjson::dom::object call;
    if (m["function_call"].get_object().get(call) == simdjson::SUCCESS) function_tokens(call);
    return n;
}

/// Responses, Anthropic and TGI event types whose text is generated output.
std::uint64_t typed_event_tokens(simdjson::dom::object doc, std::string_view type, const Tokenizer* tokenizer) {
    std::string_view text;
    if (type == "response.output_text.delta" || type == "response.reasoning_text.delta" ||
        type == "response.reasoning_summary_text.delta" || type == "response.function_call_arguments.delta" ||
        type == "response.refusal.delta")
        return doc["delta"].get_string().get(text) == simdjson::SUCCESS ? count_text(text, tokenizer) : 0;
    simdjson::dom::object delta;
    if (type == "content_block_delta" && doc["delta"].get_object().get(delta) == simdjson::SUCCESS) {
        std::uint64_t n = 0;
        for (const char* key : {"text", "thinking", "partial_json"})
            if (delta[key].get_string().get(text) == simdjson::SUCCESS) n += count_text(text, tokenizer);
        return n;
    }
    return 0;
}

/// The output one streamed event (or a whole non-stream body) carries, in every channel.
std::uint64_t output_tokens_of(simdjson::dom::object doc, const Tokenizer* tokenizer) {
    std::uint64_t n = 0;
    std::string_view text;
    simdjson::dom::array choices;
    if (doc["choices"].get_array().get(choices) == simdjson::SUCCESS) {
        for (simdjson::dom::element c : choices) {
            simdjson::dom::object choice, message;
            if (c.get_object().get(choice) != simdjson::SUCCESS) continue;
            if (choice["delta"].get_object().get(message) == simdjson::SUCCESS ||
                choice["message"].get_object().get(message) == simdjson::SUCCESS)
                n += message_tokens(message, tokenizer);
            else if (choice["text"].get_string().get(text) == simdjson::SUCCESS) n += count_text(text, tokenizer);
        }
        return n;
    }
    std::string_view type;
    if (doc["type"].get_string().get(type) == simdjson::SUCCESS) return typed_event_tokens(doc, type, tokenizer);
    simdjson::dom::object token;
    bool special = false;
    if (doc["token"].get_object().get(token) == simdjson::SUCCESS) {
        // TGI streams one token an event
        return !(token["special"].get_bool().get(special) == simdjson::SUCCESS && special) ? 1 : 0;
    }
    simdjson::dom::array output;  // a Responses body: output[].content[].text, arguments
    if (doc["output"].get_array().get(output) == simdjson::SUCCESS) {
        for (simdjson::dom::element item : output) {
            simdjson::dom::object o;
            if (item.get_object().get(o) != simdjson::SUCCESS) continue;
            if (o["arguments"].get_string().get(text) == simdjson::SUCCESS) n += count_text(text, tokenizer);
            for (const char* list : {"content", "summary"}) {
                simdjson::dom::array parts;
                if (o[list].get_array().get(parts) != simdjson::SUCCESS) continue;
                for (simdjson::dom::element p : parts)
                    if (p["text"].get_string().get(text) == simdjson::SUCCESS) n += count_text(text, tokenizer);
            }
        }
        return n;
    }
    simdjson::dom::array blocks;  // an Anthropic message: its text, thinking and tool input
    if (doc["content"].get_array().get(blocks) == simdjson::SUCCESS) {
        for (simdjson::dom::element b : blocks) {
            simdjson::dom::object block;
            if (b.get_object().get(block) != simdjson::SUCCESS) continue;
            for (const char* key : {"text", "thinking"})
                if (block[key].get_string().get(text) == simdjson::SUCCESS) n += count_text(text, tokenizer);
            simdjson::dom::element input;
            if (block["input"].get(input) == simdjson::SUCCESS) n += count_text(simdjson::minify(input), tokenizer);
        }
        return n;
    }
    // llama.cpp's `content`; TGI's and SGLang's whole `generated_text` / `text` in a body.
    for (const char* key : {"content", "generated_text", "text"})
        if (doc[key].get_string().get(text) == simdjson::SUCCESS) return count_text(text, tokenizer);
    return 0;
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
    // Room for simdjson's padding, so that finish() parses the body where it is, with no copy.
    body_.reserve(body_.size() + data.size() + simdjson::SIMDJSON_PADDING);
    body_.append(data);
}

Usage JsonUsageReader::finish() const {
    Usage u;
    if (overflowed_) return u;
    simdjson::dom::element root;
    bool padded = body_.capacity() - body_.size() >= simdjson::SIMDJSON_PADDING;
    if (thread_parser().parse(body_.data(), body_.size(), !padded).get(root) != simdjson::SUCCESS) return u;
    // TGI's root route and SGLang's batches answer an array: each item counts.
    simdjson::dom::array many;
    if (root.get_array().get(many) == simdjson::SUCCESS) {
        for (simdjson::dom::element item : many) {
            simdjson::dom::object doc;
            if (item.get_object().get(doc) != simdjson::SUCCESS) continue;
            auto one = body_usage(doc);
            if (!one.known) continue;
            u.prompt_known = (u.known ? u.prompt_known : true) && one.prompt_known;
            u.known = true;
            u.prompt_tokens = core::saturating_add(u.prompt_tokens, one.prompt_tokens);
            u.completion_tokens = core::saturating_add(u.completion_tokens, one.completion_tokens);
            u.cached_tokens = core::saturating_add(u.cached_tokens, one.cached_tokens);
        }
        return u;
    }
    simdjson::dom::object doc;
    if (root.get_object().get(doc) != simdjson::SUCCESS) return u;
    return body_usage(doc);
}

Usage JsonUsageReader::body_usage(simdjson::dom::object doc) const {
    Usage u;
    if (read_usage(doc, u)) return u;
    // SPEC §17: no usage, so the output is counted in every channel the body carries.
    simdjson::dom::element ignored;
    bool generated = doc["choices"].get(ignored) == simdjson::SUCCESS ||
                     doc["output"].get(ignored) == simdjson::SUCCESS ||
                     doc["generated_text"].get(ignored) == simdjson::SUCCESS ||
                     doc["content"].get(ignored) == simdjson::SUCCESS || doc["text"].get(ignored) == simdjson::SUCCESS;
    if (!generated) return u;
    u.known = true;
    u.prompt_known = false;
    u.completion_tokens = output_tokens_of(doc, tokenizer_);
    return u;
}

std::string_view SseUsageFilter::resume(std::uint64_t tokens) {
    paused_ = false;
    pause_after_ = tokens;
    return feed({}, false);
}

std::string_view SseUsageFilter::feed(std::string_view data, bool last) {
    out_.clear();
    if (paused_) {  // held until the budget says (the relay asks it after every piece)
        pending_.append(data);
        return {};
    }
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
        if (streamed_tokens_ > pause_after_) {
            (last ? stopped_ : paused_) = true;
            break;
        }
    }
    if (stopped_ || paused_) {
        out_.append(source.substr(copied, consumed - copied));
        // Stopped, the rest of the stream is not the client's any more; paused, it waits.
        core::RecycledString held;
        if (paused_) held.assign(source.substr(consumed));
        pending_ = std::move(held);
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

std::uint64_t SseUsageFilter::stream_event_tokens(simdjson::dom::object doc) {
    simdjson::dom::object meta;
    std::string_view text;
    if (doc["meta_info"].get_object().get(meta) != simdjson::SUCCESS ||
        doc["text"].get_string().get(text) != simdjson::SUCCESS)
        return output_tokens_of(doc, tokenizer_);
    // SGLang: cumulative text, unless a shorter one shows it streams increments.
    auto added = text.size() >= sglang_text_bytes_ ? text.substr(sglang_text_bytes_) : text;
    sglang_text_bytes_ = text.size() >= sglang_text_bytes_ ? text.size() : sglang_text_bytes_ + text.size();
    auto counted = core::saturating_add(streamed_tokens_, count_text(added, tokenizer_));
    auto reported = count_of(meta, "completion_tokens");
    return std::max(counted, reported) - streamed_tokens_;
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
                // Anthropic's events first: a message_delta's `usage` holds the output alone.
                Usage u = usage_;
                bool has_usage = false;
                if (read_anthropic_event(doc, u)) usage_ = u;
                else if ((has_usage = read_usage(doc, u))) usage_ = u;
                streamed_tokens_ += stream_event_tokens(doc);
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
        if (id_.empty() && doc["id"].get_string().get(text) == simdjson::SUCCESS) id_.assign(text.substr(0, 256));
        if (model_.empty() && doc["model"].get_string().get(text) == simdjson::SUCCESS)
            model_.assign(text.substr(0, 256));
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
            if (response["id"].get_string().get(text) == simdjson::SUCCESS) id_.assign(text.substr(0, 256));
            if (response["model"].get_string().get(text) == simdjson::SUCCESS) model_.assign(text.substr(0, 256));
        }
        return;
    }
    if (doc["type"].get_string().get(text) == simdjson::SUCCESS) {
        std::uint64_t index = 0;
        if (text == "message_start") dialect_ = Dialect::anthropic;
        else if (text == "content_block_start" && doc["index"].get_uint64().get(index) == simdjson::SUCCESS)
            open_block_ = index;
        else if (text == "content_block_stop") open_block_.reset();
        if (dialect_ == Dialect::anthropic) return;
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
            json base = {{"id", std::string_view(id_)},
                         {"object", chat ? "chat.completion.chunk" : "text_completion"},
                         {"created", created_},
                         {"model", std::string_view(model_)}};
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
            json response = {{"id", std::string_view(id_)},
                             {"object", "response"},
                             {"status", "incomplete"},
                             {"incomplete_details", {{"reason", "max_output_tokens"}}},
                             {"model", std::string_view(model_)},
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
        case Dialect::anthropic: {
            // The open block closed, then the message, as the API ends one at max_tokens.
            auto event = [&](const char* type, json body) {
                body["type"] = type;
                out += std::string("event: ") + type + "\n";
                data(body);
            };
            if (open_block_) event("content_block_stop", {{"index", *open_block_}});
            event("message_delta", {{"delta", {{"stop_reason", "max_tokens"}, {"stop_sequence", nullptr}}},
                                    {"usage", {{"output_tokens", completion}}}});
            event("message_stop", json::object());
            break;
        }
        case Dialect::unknown: out += "data: [DONE]\n\n"; break;
    }
    return out;
}

}  // namespace tokengate::cost
