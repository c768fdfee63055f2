// SPEC §22: the prompt prefix that prefix-cache affinity hashes.

#include "tokengate/cost/prompt_prefix.hpp"

#include <simdjson.h>

#include <string>

#include "tokengate/core/hash.hpp"
#include "tokengate/cost/tokenizer.hpp"

namespace tokengate::cost {

namespace {

using simdjson::dom::element;

/// The rendered prompt's text, piece by piece, up to a number of tokens.
class PrefixText {
public:
    PrefixText(std::uint64_t limit, const Tokenizer* tokenizer) : limit_(limit), tokenizer_(tokenizer) {}
    bool full() const { return tokens_ >= limit_; }
    const std::string& text() const { return text_; }

    void add(std::string_view piece) {
        if (full() || piece.empty()) return;
        auto room = limit_ - tokens_;
        // No token is longer than this: what lies past it cannot be in the prefix.
        constexpr std::uint64_t k_bytes_per_token_at_most = 16;
        auto window = piece.substr(
            0, room < piece.size() / k_bytes_per_token_at_most ? room * k_bytes_per_token_at_most : piece.size());
        auto n = count_text(window, tokenizer_);
        if (n <= room) {
            text_.append(window);
            tokens_ += n;
            if (window.size() < piece.size()) tokens_ = limit_;  // the window held fewer tokens than room: full
        } else {
            text_.append(window.substr(0, window.size() * room / n));  // its share of the bytes
            tokens_ = limit_;
        }
        text_.push_back('\n');  // pieces do not run into each other
    }

    /// A string, or the `text` of each part of an array (chat parts, Anthropic blocks).
    void add_content(element v) {
        std::string_view s;
        if (v.get_string().get(s) == simdjson::SUCCESS) return add(s);
        simdjson::dom::array parts;
        if (v.get_array().get(parts) != simdjson::SUCCESS) return;
        for (element part : parts) {
            if (full()) return;
            if (part.get_string().get(s) == simdjson::SUCCESS) add(s);
            else if (part["text"].get_string().get(s) == simdjson::SUCCESS) add(s);
        }
    }

    void add_messages(element v) {
        simdjson::dom::array list;
        if (v.get_array().get(list) != simdjson::SUCCESS) return;
        for (element m : list) {
            if (full()) return;
            std::string_view role;
            if (m["role"].get_string().get(role) == simdjson::SUCCESS) add(role);
            element content;
            if (m["content"].get(content) == simdjson::SUCCESS) add_content(content);
        }
    }

private:
    std::uint64_t limit_;
    const Tokenizer* tokenizer_;
    std::uint64_t tokens_ = 0;
    std::string text_;
};

}  // namespace

std::optional<std::uint64_t> prompt_prefix_hash(std::string_view body, Endpoint endpoint, std::uint64_t prefix_tokens,
                                                const Tokenizer* tokenizer) {
    thread_local simdjson::dom::parser parser;
    simdjson::dom::object root;
    if (parser.parse(body.data(), body.size()).get_object().get(root) != simdjson::SUCCESS) return std::nullopt;
    PrefixText prefix(prefix_tokens, tokenizer);
    element v;
    auto field = [&](const char* key) { return root.at_key(key).get(v) == simdjson::SUCCESS; };
    switch (endpoint) {
        case Endpoint::messages:
        case Endpoint::count_tokens:
            if (field("system")) prefix.add("system"), prefix.add_content(v);
            if (field("messages")) prefix.add_messages(v);
            break;
        case Endpoint::responses:
            if (field("instructions")) prefix.add_content(v);
            if (field("input")) {
                if (v.is_array()) prefix.add_messages(v);  // items: role and content
                else prefix.add_content(v);
            }
            break;
        case Endpoint::completions:
        case Endpoint::infill:
            if (field("prompt")) prefix.add_content(v);
            break;
        case Endpoint::tgi:
            if (field("inputs")) prefix.add_content(v);
            break;
        case Endpoint::sglang:
            if (field("text")) prefix.add_content(v);
            break;
        default:
            if (field("messages")) prefix.add_messages(v);
            break;
    }
    if (prefix.text().empty()) return std::nullopt;
    return core::hash_bytes(prefix.text(), 0x5052454649584831ull);  // "PREFIXH1": its own table
}

}  // namespace tokengate::cost
