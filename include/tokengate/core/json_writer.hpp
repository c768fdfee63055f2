#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tokengate::core {

/// Appends `text` as a JSON string literal: quotes, backslashes and control characters
/// escaped, invalid UTF-8 replaced by U+FFFD, so every line stays valid JSON.
void append_json_string(std::string& out, std::string_view text);

/// Writes `value` into `buf` (32 chars at least) as std::to_chars(double) does, the shortest
/// text that reads back exactly, whole numbers by the integer path. Returns the end.
char* write_shortest_number(char* buf, double value);

/// Appends a number the way JSON libraries print it: shortest round-trip form, with ".0" on
/// whole doubles ("11.0"), so log consumers see one stable format.
void append_json_number(std::string& out, double value);

/// append_json_number(out, nanoseconds / 1e6), the same text, from the integer: a duration in
/// milliseconds is a decimal of at most 15 digits, its own shortest form, so no search for it.
void append_json_milliseconds(std::string& out, std::int64_t nanoseconds);

/// Builds a JSON object without a DOM: the access log and error bodies are on the hot path,
/// where building and serialising a tree cost more than the rest of a 429.
class JsonObjectWriter {
public:
    explicit JsonObjectWriter(std::string& out) : out_(out) { out_.push_back('{'); }
    /// `key`s are written as they are: the caller's literals, with nothing to escape.
    JsonObjectWriter& string(std::string_view key, std::string_view value);
    JsonObjectWriter& number(std::string_view key, double value);
    /// A duration in nanoseconds, written in milliseconds (as number(key, ns / 1e6)).
    JsonObjectWriter& milliseconds(std::string_view key, std::int64_t nanoseconds);
    JsonObjectWriter& integer(std::string_view key, std::uint64_t value);
    JsonObjectWriter& null(std::string_view key);
    JsonObjectWriter& boolean(std::string_view key, bool value);
    /// A nested object under `key`, written in place: fill it and close() it before this
    /// object's next member.
    JsonObjectWriter object(std::string_view k) {
        key(k);
        return JsonObjectWriter(out_);
    }
    void close() { out_.push_back('}'); }

private:
    void key(std::string_view k);
    std::string& out_;
    bool first_ = true;
};

}  // namespace tokengate::core
