// SPEC §11: every request body the upstreams accept, priced by its shape.

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <optional>

#include "tokengate/core/saturate.hpp"
#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/count_budget.hpp"
#include "tokengate/cost/image.hpp"
#include "tokengate/cost/tokenizer.hpp"

namespace tokengate::cost {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

constexpr std::uint64_t k_reply_priming = 3;   // the template's opening of the assistant's turn
constexpr std::uint64_t k_block_overhead = 1;  // an Anthropic content block other than text (SPEC §20)

/// Tokens for every string inside a JSON value (tool schemas, content parts, tool calls).
std::uint64_t tokens_in(element v, const Tokenizer* tokenizer) {
    switch (v.type()) {
        case element_type::STRING: return count_text(std::string_view(v.get_string().value_unsafe()), tokenizer);
        case element_type::OBJECT: {
            std::uint64_t n = 0;
            simdjson::dom::object object = v.get_object().value_unsafe();
            for (auto it = object.begin(); it != object.end(); ++it)
                n += count_text(it.key(), tokenizer) + tokens_in(it.value(), tokenizer);
            return n;
        }
        case element_type::ARRAY: {
            std::uint64_t n = 0;
            simdjson::dom::array array = v.get_array().value_unsafe();
            for (auto it = array.begin(); it != array.end(); ++it) n += tokens_in(*it, tokenizer);
            return n;
        }
        case element_type::INT64:
        case element_type::UINT64:
        case element_type::DOUBLE: return 1;
        default: return 0;
    }
}

bool is_token_id(element v) { return v.is_int64() || v.is_uint64(); }

/// A JSON pointer segment (RFC 6901: '~' and '/' escaped).
std::string pointer_segment(std::string_view key) {
    std::string out = "/";
    for (char c : key) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

/// SPEC §17: no object anywhere may hold a key twice. Parsers disagree on duplicates (the
/// upstream's Python keeps the last, simdjson's lookup finds the first), so any repeated key
/// could be priced by one and honoured by the other. Returns the JSON pointer to the second
/// occurrence of the first duplicate found, depth first.
std::optional<std::string> duplicate_at(element v) {
    if (v.is_array()) {
        std::size_t i = 0;
        simdjson::dom::array list = v.get_array().value_unsafe();
        for (element item : list) {
            if (auto inner = duplicate_at(item)) return "/" + std::to_string(i) + *inner;
            ++i;
        }
        return std::nullopt;
    }
    if (!v.is_object()) return std::nullopt;
    simdjson::dom::object object = v.get_object().value_unsafe();
    constexpr std::size_t k_pairwise = 16;  // small objects (the usual case): compared pairwise, no allocation
    if (object.size() <= k_pairwise) {
        std::array<std::string_view, k_pairwise> keys;
        std::size_t n = 0;
        for (auto it = object.begin(); it != object.end(); ++it) {
            auto key = it.key();
            for (std::size_t j = 0; j < n; ++j)
                if (keys[j] == key) return pointer_segment(key);
            keys[n++] = key;
        }
    } else {
        std::vector<std::string_view> keys;
        keys.reserve(object.size());
        for (auto it = object.begin(); it != object.end(); ++it) keys.push_back(it.key());
        std::sort(keys.begin(), keys.end());
        if (auto twice = std::adjacent_find(keys.begin(), keys.end()); twice != keys.end())
            return pointer_segment(*twice);
    }
    for (auto it = object.begin(); it != object.end(); ++it)
        if (auto inner = duplicate_at(it.value())) return pointer_segment(it.key()) + *inner;
    return std::nullopt;
}

/// Reads one body into a summary; each step returns false with `error` set on a bad field.
class BodyReader {
public:
    BodyReader(simdjson::dom::object root, const Tokenizers* tokenizers, const std::vector<config::ModelCost>* models,
               RequestSummary& summary, std::uint64_t count_limit)
        : root_(root), tokenizers_(tokenizers), models_(models), s_(summary), count_limit_(count_limit) {}

    std::string error;

    /// The model's settings found by common(); null if none matched.
    const config::ModelCost* model() const { return model_ == &k_no_model ? nullptr : model_; }
    /// The tokenizer common() chose for the model; null: the heuristic.
    const Tokenizer* tokenizer() const { return budget_ ? chosen_ : tokenizer_; }
    bool count_stopped() const { return budget_ && budget_->stopped(); }
    bool common();
    bool chat();
    bool completions();
    bool embeddings();
    bool rerank();
    bool responses();
    bool tgi(bool stream_path);
    bool sglang();
    bool infill();
    bool anthropic_messages();

private:
    bool fail(std::string message) {
        error = std::move(message);
        return false;
    }
    /// "'key' must ...", built by appending: GCC 12 warns falsely (-Wrestrict, its bug
    /// 105329) on the chain of operator+ this would otherwise be, once inlined.
    bool fail_field(std::string_view key, std::string_view must, std::string_view more = {}) {
        std::string message;
        message.reserve(key.size() + must.size() + more.size() + 3);
        message += '\'';
        message += key;
        message += "' ";
        message += must;
        message += more;
        error = std::move(message);
        return false;
    }
    bool get(std::string_view key, element& v) { return get(root_, key, v); }
    static bool get(simdjson::dom::object o, std::string_view key, element& v) {
        return o.at_key(key).get(v) == simdjson::SUCCESS && !v.is_null();
    }
    /// A non-negative integer, or absent/null.
    bool count(simdjson::dom::object o, std::string_view key, std::optional<std::uint64_t>& out);
    /// A positive integer up to k_max_sequences, or absent/null.
    bool sequence_count(simdjson::dom::object o, std::string_view key, std::optional<std::uint64_t>& out);
    /// A string, strings, token ids (one token each) or arrays of ids; `items` counts the
    /// prompts (a flat array of ids is one).
    bool texts_or_ids(element v, std::string_view key, std::uint64_t& items);
    bool strings_or_objects(std::string_view key);
    /// An array the template renders whole (tools, functions, documents): every key and string.
    bool rendered_array(std::string_view key);
    /// Chat `messages`: every value of every message (role and name too: the template renders them).
    bool messages(element v);
    /// Completions' `prompt_embeds`: refused unless the model prices them by decoded size.
    bool prompt_embeds(element v, std::uint64_t& items);
    /// Tokens of message content: text as text; images and other media by their own rules
    /// (their base64 is never text).
    bool content_tokens(element v, std::uint64_t& tokens);
    bool media_part(simdjson::dom::object part, std::string_view type, std::uint64_t& tokens, bool& was_media);
    bool image(element url_or_object, std::string_view detail, std::uint64_t& tokens);
    /// Anthropic content: a string, or blocks priced by type (SPEC §20).
    bool anthropic_content(element v, std::uint64_t& tokens);
    bool anthropic_block(simdjson::dom::object block, std::uint64_t& tokens);
    bool anthropic_source(simdjson::dom::object source, bool document, std::uint64_t& tokens);
    void name_output(std::optional<std::uint64_t> limit, OutputField field) {
        s_.output_named = limit.has_value();
        if (limit) s_.output_per_sequence = *limit;
        s_.output_field = field;
    }
    /// llama.cpp reads n_predict before max_tokens.
    void name_max_tokens_or_n_predict(std::optional<std::uint64_t> max_tokens, std::optional<std::uint64_t> n_predict) {
        if (n_predict) name_output(n_predict, OutputField::n_predict);
        else name_output(max_tokens, OutputField::max_tokens);
    }

    /// Tokens of one prompt as the upstream encodes it alone (`add_special_tokens`: a BOS).
    std::uint64_t prompt_tokens(std::string_view text) const {
        return count_text(text, tokenizer_) + (tokenizer_ ? tokenizer_->added_per_sequence() : 0);
    }

    simdjson::dom::object root_;
    const Tokenizers* tokenizers_;
    const Tokenizer* tokenizer_ = nullptr;
    const std::vector<config::ModelCost>* models_;
    const config::ModelCost* model_ = &k_no_model;
    RequestSummary& s_;
    std::uint64_t count_limit_;
    std::optional<CountBudget> budget_;  // counts in tokenizer_'s place when there is a count limit
    const Tokenizer* chosen_ = nullptr;

    static const config::ModelCost k_no_model;
};

const config::ModelCost BodyReader::k_no_model{};

bool BodyReader::image(element v, std::string_view detail, std::uint64_t& tokens) {
    std::string_view url;
    if (v.is_object()) {  // chat: {"url": ..., "detail": ...}
        simdjson::dom::object o = v.get_object().value_unsafe();
        std::string_view d;
        if (o["detail"].get_string().get(d) == simdjson::SUCCESS) detail = d;
        if (o["url"].get_string().get(url) != simdjson::SUCCESS) return fail("an image part without its 'url'");
    } else if (v.get_string().get(url) != simdjson::SUCCESS) {
        return fail("an image part's 'image_url' must be a string or an object");
    }
    ++s_.images;
    if (url.substr(0, 5) != "data:") {  // behind a URL: its size is not ours to fetch
        tokens += model_->image_default_tokens;
        return true;
    }
    auto probe = probe_data_url(url);
    switch (probe.result) {
        case ImageProbe::Result::size: tokens += image_tokens(probe.size, model_->image_tokens, detail == "low"); break;
        case ImageProbe::Result::unreadable: tokens += model_->image_default_tokens; break;
        case ImageProbe::Result::malformed: return fail("an image part holds " + std::string(probe.why));
    }
    return true;
}

bool BodyReader::media_part(simdjson::dom::object part, std::string_view type, std::uint64_t& tokens, bool& was_media) {
    was_media = true;
    element v;
    if (type == "image_url" || type == "input_image") {
        std::string_view detail;
        if (part["detail"].get_string().get(detail) != simdjson::SUCCESS) detail = {};
        if (part["image_url"].get(v) == simdjson::SUCCESS) return image(v, detail, tokens);
        ++s_.images;  // a file id: its size is not in the request
        tokens += model_->image_default_tokens;
        return true;
    }
    static constexpr std::array<std::string_view, 7> k_media = {"input_audio", "audio_url", "audio",     "video_url",
                                                                "video",       "file",      "input_file"};
    if (std::find(k_media.begin(), k_media.end(), type) != k_media.end()) {
        tokens += model_->media_default_tokens;
        return true;
    }
    was_media = false;
    return true;
}

bool BodyReader::content_tokens(element v, std::uint64_t& tokens) {
    if (v.is_array()) {
        simdjson::dom::array parts = v.get_array().value_unsafe();
        for (element part : parts)
            if (!content_tokens(part, tokens)) return false;
        return true;
    }
    if (!v.is_object()) {
        tokens += tokens_in(v, tokenizer_);
        return true;
    }
    simdjson::dom::object o = v.get_object().value_unsafe();
    std::string_view type;
    bool typed = o["type"].get_string().get(type) == simdjson::SUCCESS;
    if (typed) {
        bool was_media = false;
        if (!media_part(o, type, tokens, was_media)) return false;
        if (was_media) return true;
    }
    for (auto it = o.begin(); it != o.end(); ++it) {
        // A typed part's `type` is not rendered, nor the name of its `text`: its text alone is.
        if (typed && it.key() == "type") continue;
        if (!(typed && it.key() == "text")) tokens += count_text(it.key(), tokenizer_);
        if (!content_tokens(it.value(), tokens)) return false;
    }
    return true;
}

bool BodyReader::count(simdjson::dom::object o, std::string_view key, std::optional<std::uint64_t>& out) {
    element v;
    if (!get(o, key, v)) return true;
    if (v.type() == element_type::UINT64) out = v.get_uint64().value_unsafe();
    else if (v.type() == element_type::INT64 && v.get_int64().value_unsafe() >= 0)
        out = static_cast<std::uint64_t>(v.get_int64().value_unsafe());
    else return fail_field(key, "must be a non-negative integer");
    return true;
}

bool BodyReader::sequence_count(simdjson::dom::object o, std::string_view key, std::optional<std::uint64_t>& out) {
    element v;
    if (!get(o, key, v)) return true;
    std::int64_t n = 0;
    if (v.get_int64().get(n) != simdjson::SUCCESS || n < 1 || static_cast<std::uint64_t>(n) > k_max_sequences)
        return fail_field(key, "must be an integer from 1 to ", std::to_string(k_max_sequences));
    out = static_cast<std::uint64_t>(n);
    return true;
}

bool BodyReader::texts_or_ids(element v, std::string_view key, std::uint64_t& items) {
    auto bad = [&] { return fail_field(key, "must be a string, strings, token ids or arrays of them"); };
    if (v.is_string()) {
        s_.input_tokens += prompt_tokens(std::string_view(v.get_string().value_unsafe()));
        items = 1;
        return true;
    }
    if (!v.is_array()) return bad();
    items = 0;
    bool ids = false;
    simdjson::dom::array entries = v.get_array().value_unsafe();
    for (element e : entries) {
        if (e.is_string()) {
            s_.input_tokens += prompt_tokens(std::string_view(e.get_string().value_unsafe()));
            ++items;
        } else if (is_token_id(e)) {
            s_.input_tokens += 1;  // a pre-tokenized prompt: one token an id
            ids = true;
        } else if (e.is_array()) {
            simdjson::dom::array prompt = e.get_array().value_unsafe();
            for (element id : prompt)
                if (!is_token_id(id)) return bad();
            s_.input_tokens += prompt.size();
            ++items;
        } else {
            return bad();
        }
    }
    if (ids) ++items;
    return true;
}

bool BodyReader::common() {
    element v;
    if (root_.at_key("model").get(v) == simdjson::SUCCESS) {
        std::string_view model;
        if (v.get_string().get(model) != simdjson::SUCCESS) return fail("'model' must be a string");
        s_.model = std::string(model);
    }
    std::size_t model_index = std::string::npos;
    if (models_)
        if (const auto* m = find_model(*models_, s_.model)) {
            model_ = m;
            model_index = static_cast<std::size_t>(m - models_->data());
        }
    if (tokenizers_) tokenizer_ = tokenizers_->for_model(model_index);
    if (count_limit_ != UINT64_MAX) {
        chosen_ = tokenizer_;
        tokenizer_ = &budget_.emplace(chosen_, count_limit_);
    }
    if (get("stream", v) && v.get_bool().get(s_.stream) != simdjson::SUCCESS) return fail("'stream' must be a boolean");
    if (get("stream_options", v)) {
        simdjson::dom::object options;
        if (v.get_object().get(options) != simdjson::SUCCESS) return fail("'stream_options' must be an object");
        s_.has_stream_options = true;
        bool include = false;
        s_.client_wants_usage = options.at_key("include_usage").get_bool().get(include) == simdjson::SUCCESS && include;
    }
    return true;
}

bool BodyReader::messages(element v) {
    simdjson::dom::array list;
    if (v.get_array().get(list) != simdjson::SUCCESS) return fail("'messages' must be an array");
    for (element m : list) {
        simdjson::dom::object message;
        if (m.get_object().get(message) != simdjson::SUCCESS) return fail("each entry of 'messages' must be an object");
        s_.input_tokens += model_->message_overhead;
        for (auto it = message.begin(); it != message.end(); ++it) {
            // A field beyond role and content (name, tool_call_id, tool_calls) is rendered
            // with a separator or label of its own: a token for it.
            if (it.key() != "role" && it.key() != "content") s_.input_tokens += 1;
            if (!content_tokens(it.value(), s_.input_tokens)) return false;
        }
    }
    s_.input_tokens += k_reply_priming;
    return true;
}

bool BodyReader::chat() {
    element v;
    if (get("messages", v) && !messages(v)) return false;
    // RAG documents and the template's own arguments are rendered into the prompt too.
    if (!rendered_array("documents")) return false;
    if (get("chat_template_kwargs", v)) {
        if (!v.is_object()) return fail("'chat_template_kwargs' must be an object");
        s_.input_tokens += tokens_in(v, tokenizer_);
    }
    if (!rendered_array("tools") || !rendered_array("functions")) return false;
    if (get("response_format", v)) {
        if (!v.is_object()) return fail("'response_format' must be an object");
        s_.input_tokens += tokens_in(v, tokenizer_);
    }
    std::optional<std::uint64_t> max_tokens, max_completion_tokens, n;
    if (!count(root_, "max_tokens", max_tokens) || !count(root_, "max_completion_tokens", max_completion_tokens) ||
        !sequence_count(root_, "n", n))
        return false;
    // vLLM and SGLang take `max_completion_tokens or max_tokens`: a 0 falls through.
    if (max_completion_tokens && *max_completion_tokens > 0)
        name_output(max_completion_tokens, OutputField::max_completion_tokens);
    else name_output(max_tokens, OutputField::max_tokens);
    s_.sequences = n.value_or(1);
    return true;
}

bool BodyReader::prompt_embeds(element v, std::uint64_t& items) {
    if (model_->embeds_bytes_per_token == 0)
        return fail("'prompt_embeds' is not accepted for this model (models.<m>.embeds_bytes_per_token is not set)");
    auto price = [&](element e) {
        std::string_view b64;
        if (e.get_string().get(b64) != simdjson::SUCCESS) return false;
        auto decoded = b64.size() / 4 * 3 + 3;  // an upper bound, padding included
        s_.input_tokens += (decoded + model_->embeds_bytes_per_token - 1) / model_->embeds_bytes_per_token;
        ++items;
        return true;
    };
    if (v.is_array()) {
        simdjson::dom::array list = v.get_array().value_unsafe();
        for (element e : list)
            if (!price(e)) return fail("'prompt_embeds' must be a base64 string or an array of them");
        return true;
    }
    return price(v) || fail("'prompt_embeds' must be a base64 string or an array of them");
}

bool BodyReader::completions() {
    element v;
    std::uint64_t prompts = 0, embeds = 0;
    if (get("prompt", v) && !texts_or_ids(v, "prompt", prompts)) return false;
    if (get("prompt_embeds", v) && !prompt_embeds(v, embeds)) return false;
    prompts += embeds;
    std::optional<std::uint64_t> max_tokens, n, best_of, n_predict;
    if (!count(root_, "max_tokens", max_tokens) || !sequence_count(root_, "n", n) ||
        !sequence_count(root_, "best_of", best_of) || !count(root_, "n_predict", n_predict))
        return false;
    if (best_of && *best_of < n.value_or(1)) return fail("'best_of' must be at least 'n'");
    name_max_tokens_or_n_predict(max_tokens, n_predict);
    s_.sequences = std::max<std::uint64_t>(prompts, 1) * std::max(n.value_or(1), best_of.value_or(1));
    return true;
}

bool BodyReader::embeddings() {
    element v;
    std::uint64_t items = 0;
    if (get("input", v) && !texts_or_ids(v, "input", items)) return false;
    if (get("messages", v) && !messages(v)) return false;  // vLLM embeds chat conversations too
    s_.sequences = 0;                                      // embeddings, pooling and classification generate nothing
    return true;
}

bool BodyReader::strings_or_objects(std::string_view key) {
    element v;
    if (!get(key, v)) return true;
    if (!v.is_string() && !v.is_array() && !v.is_object())
        return fail_field(key, "must be a string, an array or an object");
    s_.input_tokens += tokens_in(v, tokenizer_);
    return true;
}

bool BodyReader::rendered_array(std::string_view key) {
    element v;
    if (!get(key, v)) return true;
    if (!v.is_array()) return fail_field(key, "must be an array");
    s_.input_tokens += tokens_in(v, tokenizer_);
    return true;
}

bool BodyReader::rerank() {
    for (std::string_view key : {"query", "documents", "text_1", "text_2"})
        if (!strings_or_objects(key)) return false;
    s_.sequences = 0;
    return true;
}

bool BodyReader::responses() {
    element v;
    if (get("instructions", v)) {
        if (!v.is_string()) return fail("'instructions' must be a string");
        s_.input_tokens += tokens_in(v, tokenizer_);
    }
    if (get("input", v)) {
        if (!v.is_string() && !v.is_array()) return fail("'input' must be a string or an array of items");
        if (!content_tokens(v, s_.input_tokens)) return false;
    }
    if (!rendered_array("tools")) return false;
    std::optional<std::uint64_t> max_output_tokens;
    if (!count(root_, "max_output_tokens", max_output_tokens)) return false;
    name_output(max_output_tokens, OutputField::max_output_tokens);
    return true;
}

bool BodyReader::tgi(bool stream_path) {
    element v;
    if (get("inputs", v)) {
        if (!v.is_string()) return fail("'inputs' must be a string");
        s_.input_tokens += prompt_tokens(std::string_view(v.get_string().value_unsafe()));
    }
    if (stream_path) s_.stream = true;
    if (!get("parameters", v)) return true;
    simdjson::dom::object parameters;
    if (v.get_object().get(parameters) != simdjson::SUCCESS) return fail("'parameters' must be an object");
    std::optional<std::uint64_t> max_new_tokens, best_of;
    if (!count(parameters, "max_new_tokens", max_new_tokens) || !sequence_count(parameters, "best_of", best_of))
        return fail("'parameters." + error.substr(1));
    name_output(max_new_tokens, OutputField::max_new_tokens);
    s_.sequences = best_of.value_or(1);
    return true;
}

bool BodyReader::sglang() {
    element v;
    std::uint64_t texts = 0, ids = 0;
    if (get("text", v) && !texts_or_ids(v, "text", texts)) return false;
    if (get("input_ids", v) && !texts_or_ids(v, "input_ids", ids)) return false;
    std::optional<std::uint64_t> max_new_tokens, n;
    if (get("sampling_params", v)) {
        simdjson::dom::object params;
        if (v.get_object().get(params) != simdjson::SUCCESS) return fail("'sampling_params' must be an object");
        if (!count(params, "max_new_tokens", max_new_tokens) || !sequence_count(params, "n", n))
            return fail("'sampling_params." + error.substr(1));
    }
    name_output(max_new_tokens, OutputField::sampling_max_new_tokens);
    s_.sequences = std::max<std::uint64_t>({texts, ids, 1}) * n.value_or(1);
    return true;
}

bool BodyReader::infill() {
    element v;
    for (std::string_view key : {"input_prefix", "input_suffix", "prompt"})
        if (get(key, v)) {
            if (!v.is_string()) return fail_field(key, "must be a string");
            s_.input_tokens += count_text(std::string_view(v.get_string().value_unsafe()), tokenizer_);
        }
    if (get("input_extra", v)) {
        if (!v.is_array()) return fail("'input_extra' must be an array");
        s_.input_tokens += tokens_in(v, tokenizer_);
    }
    std::optional<std::uint64_t> max_tokens, n_predict;
    if (!count(root_, "max_tokens", max_tokens) || !count(root_, "n_predict", n_predict)) return false;
    name_max_tokens_or_n_predict(max_tokens, n_predict);
    return true;
}

bool BodyReader::anthropic_source(simdjson::dom::object source, bool document, std::uint64_t& tokens) {
    std::string_view type, text;
    if (source["type"].get_string().get(type) != simdjson::SUCCESS) return fail("a block's 'source' needs its 'type'");
    if (type == "text") {  // a document's plain text
        if (source["data"].get_string().get(text) != simdjson::SUCCESS) return fail("a text source needs its 'data'");
        tokens += count_text(text, tokenizer_);
        return true;
    }
    if (type == "content") {  // a document made of blocks
        element content;
        if (source["content"].get(content) != simdjson::SUCCESS) return fail("a content source needs its 'content'");
        return anthropic_content(content, tokens);
    }
    if (!document && type == "base64") {  // its base64 is never text: its header gives its size
        if (source["data"].get_string().get(text) != simdjson::SUCCESS) return fail("a base64 source needs its 'data'");
        ++s_.images;
        auto probe = probe_base64(text);
        switch (probe.result) {
            case ImageProbe::Result::size: tokens += image_tokens(probe.size, model_->image_tokens, false); break;
            case ImageProbe::Result::unreadable: tokens += model_->image_default_tokens; break;
            case ImageProbe::Result::malformed: return fail("an image block holds " + std::string(probe.why));
        }
        return true;
    }
    // An image behind a URL or a file id, a PDF: sizes that are not in the request.
    if (document) tokens += model_->media_default_tokens;
    else {
        ++s_.images;
        tokens += model_->image_default_tokens;
    }
    return true;
}

bool BodyReader::anthropic_block(simdjson::dom::object block, std::uint64_t& tokens) {
    std::string_view type, text;
    if (block["type"].get_string().get(type) != simdjson::SUCCESS) return fail("each content block needs its 'type'");
    element v;
    auto text_of = [&](std::string_view key) {
        if (block[key].get_string().get(text) == simdjson::SUCCESS) tokens += count_text(text, tokenizer_);
    };
    if (type == "text") {  // as a chat text part: its text alone
        text_of("text");
        return true;
    }
    // Any other block is rendered inside markers of its template's own: a token for them.
    tokens += k_block_overhead;
    if (type == "image" || type == "document") {
        simdjson::dom::object source;
        if (block["source"].get_object().get(source) != simdjson::SUCCESS)
            return fail_field(type, "blocks need their 'source' object");
        if (type == "document") text_of("title"), text_of("context");
        return anthropic_source(source, type == "document", tokens);
    }
    if (type == "tool_use" || type == "server_tool_use") {
        text_of("name");
        if (get(block, "input", v)) tokens += tokens_in(v, tokenizer_);
        return true;
    }
    if (type == "tool_result") return !get(block, "content", v) || anthropic_content(v, tokens);
    if (type == "thinking") {
        text_of("thinking");
        return true;
    }
    // redacted_thinking, search results and whatever comes next: every string in the block.
    for (auto it = block.begin(); it != block.end(); ++it)
        if (it.key() != "type") tokens += tokens_in(it.value(), tokenizer_);
    return true;
}

bool BodyReader::anthropic_content(element v, std::uint64_t& tokens) {
    if (v.is_string()) {
        tokens += count_text(std::string_view(v.get_string().value_unsafe()), tokenizer_);
        return true;
    }
    simdjson::dom::array blocks;
    if (v.get_array().get(blocks) != simdjson::SUCCESS) return fail("content must be a string or an array of blocks");
    for (element b : blocks) {
        simdjson::dom::object block;
        if (b.get_object().get(block) != simdjson::SUCCESS) return fail("each content block must be an object");
        if (!anthropic_block(block, tokens)) return false;
    }
    return true;
}

bool BodyReader::anthropic_messages() {
    element v;
    // The system prompt is rendered as a message of its own, as chat's system message is.
    if (get("system", v)) {
        if (!v.is_string() && !v.is_array()) return fail("'system' must be a string or an array of text blocks");
        s_.input_tokens += model_->message_overhead + count_text("system", tokenizer_);
        if (!anthropic_content(v, s_.input_tokens)) return false;
    }
    if (get("messages", v)) {
        simdjson::dom::array list;
        if (v.get_array().get(list) != simdjson::SUCCESS) return fail("'messages' must be an array");
        for (element m : list) {
            simdjson::dom::object message;
            if (m.get_object().get(message) != simdjson::SUCCESS)
                return fail("each entry of 'messages' must be an object");
            s_.input_tokens += model_->message_overhead;
            std::string_view role;
            if (message["role"].get_string().get(role) == simdjson::SUCCESS)
                s_.input_tokens += count_text(role, tokenizer_);
            element content;
            if (get(message, "content", content) && !anthropic_content(content, s_.input_tokens)) return false;
        }
        s_.input_tokens += k_reply_priming;
    }
    if (!rendered_array("tools")) return false;
    std::optional<std::uint64_t> max_tokens;
    if (!count(root_, "max_tokens", max_tokens)) return false;
    // The API requires max_tokens; a body without it reserves the default, written upstream.
    name_output(max_tokens, OutputField::max_tokens);
    return true;
}

}  // namespace

const char* to_string(Endpoint e) {
    switch (e) {
        case Endpoint::chat: return "chat";
        case Endpoint::completions: return "completions";
        case Endpoint::embeddings: return "embeddings";
        case Endpoint::rerank: return "rerank";
        case Endpoint::responses: return "responses";
        case Endpoint::tgi: return "tgi";
        case Endpoint::sglang: return "sglang";
        case Endpoint::infill: return "infill";
        case Endpoint::messages: return "messages";
        case Endpoint::count_tokens: return "count_tokens";
        case Endpoint::unknown: break;
    }
    return "unknown";
}

Endpoint endpoint_for_path(std::string_view path) {
    while (!path.empty() && path.back() == '/') path.remove_suffix(1);
    auto slash = path.rfind('/');
    auto last = slash == std::string_view::npos ? path : path.substr(slash + 1);
    auto before = slash == std::string_view::npos ? std::string_view{} : path.substr(0, slash);
    if (last == "completions") {
        auto parent = before.substr(before.rfind('/') == std::string_view::npos ? 0 : before.rfind('/') + 1);
        return parent == "chat" ? Endpoint::chat : Endpoint::completions;
    }
    if (last == "embeddings" || last == "pooling" || last == "classify") return Endpoint::embeddings;
    if (last == "rerank" || last == "score") return Endpoint::rerank;
    if (last == "responses") return Endpoint::responses;
    if (last == "generate" || last == "generate_stream") return Endpoint::tgi;
    if (last == "infill") return Endpoint::infill;
    if (last == "messages") return Endpoint::messages;
    if (last == "count_tokens" && before.ends_with("/messages")) return Endpoint::count_tokens;
    return Endpoint::unknown;
}

namespace {

/// One parser per thread, its buffers reused: a body costs no allocation to parse.
simdjson::dom::parser& body_parser() {
    thread_local simdjson::dom::parser parser;
    return parser;
}

}  // namespace

std::optional<std::string> sniff_model(std::string_view body) {
    element doc;
    simdjson::dom::object root;
    if (body_parser().parse(body.data(), body.size()).get(doc) != simdjson::SUCCESS ||
        doc.get_object().get(root) != simdjson::SUCCESS)
        return std::nullopt;
    std::string_view model;
    return root.at_key("model").get_string().get(model) == simdjson::SUCCESS ? std::string(model) : std::string();
}

ParsedBody parse_request_body(std::string_view body, const config::CostConfig& cost, const Tokenizers* tokenizers,
                              std::string_view path, const std::vector<config::ModelCost>* models,
                              std::uint64_t count_limit, std::string_view subject_field) {
    ParsedBody out;
    auto& s = out.summary;
    s.endpoint = endpoint_for_path(path);
    // A request without a body (GET /v1/models) generates nothing: it costs the minimum.
    if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
        s.sequences = 0;
        return out;
    }
    // simdjson validates the whole document at a few GB/s.
    element doc;
    if (body_parser().parse(body.data(), body.size()).get(doc) != simdjson::SUCCESS) {
        out.error = BodyError::invalid_json;
        out.message = "We could not parse the JSON body of your request.";
        return out;
    }
    auto invalid = [&](std::string message) {
        out.error = BodyError::invalid_body;
        out.message = std::move(message);
        return out;
    };
    simdjson::dom::object root;
    if (doc.get_object().get(root) != simdjson::SUCCESS) return invalid("The request body must be a JSON object.");
    if (auto pointer = duplicate_at(doc)) {
        out.error = BodyError::duplicate_key;
        out.message = "The request body holds the key at '" + *pointer + "' twice.";
        return out;
    }
    s.body_bytes = body.size();
    if (!subject_field.empty()) {
        std::string_view subject;
        if (root.at_key(subject_field).get_string().get(subject) == simdjson::SUCCESS) out.subject = subject;
    }
    auto has = [&](std::string_view key) {
        element v;
        return root.at_key(key).get(v) == simdjson::SUCCESS;
    };
    if (s.endpoint == Endpoint::unknown) {
        element system;
        bool anthropic =
            has("anthropic_version") || (root.at_key("system").get(system) == simdjson::SUCCESS && system.is_array());
        if (has("messages")) s.endpoint = anthropic ? Endpoint::messages : Endpoint::chat;
        else if (has("prompt")) s.endpoint = Endpoint::completions;
        else if (has("inputs")) s.endpoint = Endpoint::tgi;
    }
    // SGLang's /generate shares TGI's path: its body has `text` or `input_ids`, TGI's `inputs`.
    if ((s.endpoint == Endpoint::tgi || s.endpoint == Endpoint::unknown) && !has("inputs") &&
        (has("text") || has("input_ids")) && !path.ends_with("generate_stream"))
        s.endpoint = Endpoint::sglang;
    BodyReader reader(root, tokenizers, models, s, count_limit);
    bool ok = reader.common();
    switch (s.endpoint) {
        case Endpoint::chat: ok = ok && reader.chat(); break;
        case Endpoint::completions: ok = ok && reader.completions(); break;
        case Endpoint::embeddings: ok = ok && reader.embeddings(); break;
        case Endpoint::rerank: ok = ok && reader.rerank(); break;
        case Endpoint::responses: ok = ok && reader.responses(); break;
        case Endpoint::tgi: ok = ok && reader.tgi(path.ends_with("generate_stream")); break;
        case Endpoint::sglang: ok = ok && reader.sglang(); break;
        case Endpoint::infill: ok = ok && reader.infill(); break;
        case Endpoint::messages: ok = ok && reader.anthropic_messages(); break;
        case Endpoint::count_tokens:  // priced as the request it counts; it generates nothing
            ok = ok && reader.anthropic_messages();
            s.sequences = 0;
            break;
        case Endpoint::unknown: s.sequences = 0; break;  // not a shape we know: the minimum cost
    }
    if (!ok) return invalid(reader.error);
    if (!s.output_named) s.output_per_sequence = s.sequences ? cost.default_max_tokens : 0;
    s.max_output_tokens = core::saturating_product(s.sequences, s.output_per_sequence);
    out.model = reader.model();
    out.tokenizer = reader.tokenizer();
    s.input_count_stopped = reader.count_stopped();
    apply_model_default(s, out.model);
    // Where the output bound would be written: in place, or with a parse when something is there.
    auto written = output_field_written(s);
    s.output_key_present = written == OutputField::max_new_tokens            ? has("parameters")
                           : written == OutputField::sampling_max_new_tokens ? has("sampling_params")
                                                                             : has(to_string(written));
    return out;
}

void apply_model_default(RequestSummary& s, const config::ModelCost* model) {
    if (!model || !model->max_output_tokens || s.output_named || s.sequences == 0) return;
    s.output_per_sequence = *model->max_output_tokens;
    s.max_output_tokens = core::saturating_product(s.sequences, s.output_per_sequence);
}

}  // namespace tokengate::cost
