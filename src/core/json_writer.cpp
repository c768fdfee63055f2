#include "tokengate/core/json_writer.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstring>

namespace tokengate::core {

namespace {

/// Length of the valid UTF-8 sequence at `s[i]`, or 0 if it is not one.
std::size_t utf8_length(std::string_view s, std::size_t i) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (std::size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
    return n;
}

/// Bytes written as they are: printable ASCII but the quote and the backslash.
constexpr auto k_plain = [] {
    std::array<bool, 256> plain{};
    for (int c = 0x20; c < 0x80; ++c) plain[c] = c != '"' && c != '\\';
    return plain;
}();

std::size_t plain_run(std::string_view text, std::size_t from) {
    while (from < text.size() && k_plain[static_cast<unsigned char>(text[from])]) ++from;
    return from;
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
    static constexpr char k_hex[] = "0123456789abcdef";
    // An access line's values are short and plain: quoted in one append.
    if (char quoted[128]; text.size() <= sizeof quoted - 2 && plain_run(text, 0) == text.size()) {
        quoted[0] = '"';
        std::memcpy(quoted + 1, text.data(), text.size());
        quoted[text.size() + 1] = '"';
        out.append(quoted, text.size() + 2);
        return;
    }
    out.push_back('"');
    std::size_t i = 0;
    while (i < text.size()) {
        // Copy the longest run that needs no escaping in one append.
        std::size_t run = plain_run(text, i);
        out.append(text.data() + i, run - i);
        i = run;
        if (i == text.size()) break;
        auto c = static_cast<unsigned char>(text[i]);
        if (c >= 0x80) {
            auto n = utf8_length(text, i);
            if (n == 0) {
                out += "\\ufffd";
                ++i;
            } else {
                out.append(text.data() + i, n);
                i += n;
            }
            continue;
        }
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                out += "\\u00";
                out.push_back(k_hex[c >> 4]);
                out.push_back(k_hex[c & 15]);
        }
        ++i;
    }
    out.push_back('"');
}

char* write_shortest_number(char* buf, double value) {
    if (value != 0 && value == std::trunc(value) && std::fabs(value) < 0x1p53) {
        // Whole numbers (costs, token counts, limits) as integers: a tenth of the shortest-double
        // search. The same text as to_chars(double): scientific only where shorter ("1e+05",
        // "1.5e+06").
        auto* end = std::to_chars(buf, buf + 32, static_cast<std::int64_t>(value)).ptr;
        std::string_view whole(buf, static_cast<std::size_t>(end - buf));
        std::size_t sign = value < 0 ? 1 : 0;
        std::size_t digits = whole.size() - sign;
        std::size_t significant = whole.find_last_not_of('0') + 1 - sign;
        if (significant + (significant > 1 ? 1 : 0) + 4 >= digits) return end;
        // Shorter in scientific: its digits are the integer's significant ones (below 2^53 no
        // shorter decimal names the same double), the exponent two digits (at most 15).
        char* out = buf + sign + 1;
        if (significant > 1) {
            std::memmove(out + 1, out, significant - 1);
            *out = '.';
            out += significant;
        }
        auto exponent = digits - 1;
        *out++ = 'e';
        *out++ = '+';
        *out++ = static_cast<char>('0' + exponent / 10);
        *out++ = static_cast<char>('0' + exponent % 10);
        return out;
    }
    return std::to_chars(buf, buf + 32, value).ptr;
}

void append_json_number(std::string& out, double value) {
    if (!std::isfinite(value)) {
        out += "null";
        return;
    }
    char buf[32];
    std::string_view text(buf, static_cast<std::size_t>(write_shortest_number(buf, value) - buf));
    out.append(text);
    if (text.find_first_of(".en") == std::string_view::npos) out += ".0";
}

void append_json_milliseconds(std::string& out, std::int64_t nanoseconds) {
    // Past 15 digits the decimal is no longer its double's shortest form.
    if (nanoseconds <= 0 || nanoseconds >= 1'000'000'000'000'000) {
        return append_json_number(out, static_cast<double>(nanoseconds) / 1e6);
    }
    char digits[20];
    auto length = static_cast<std::size_t>(std::to_chars(digits, digits + sizeof digits, nanoseconds).ptr - digits);
    std::size_t significant = length;
    while (digits[significant - 1] == '0') --significant;
    // Fixed: the digits with the point six places from the right. to_chars writes scientific
    // where that is shorter (under a microsecond, or long and round: "5e+06"): left to it.
    std::size_t whole = length > 6 ? length - 6 : 0;
    std::size_t fraction = significant > whole ? (length > 6 ? significant - whole : significant + 6 - length) : 0;
    std::size_t fixed_size = (whole ? whole : 1) + (fraction ? 1 + fraction : 0);
    std::size_t scientific_size = significant + (significant > 1 ? 1 : 0) + 4;  // d.ddde-XX
    if (scientific_size < fixed_size) return append_json_number(out, static_cast<double>(nanoseconds) / 1e6);
    char text[40];
    std::size_t n = 0;
    if (whole) {
        for (std::size_t i = 0; i < whole; ++i) text[n++] = digits[i];
    } else {
        text[n++] = '0';
    }
    text[n++] = '.';
    if (fraction) {
        for (std::size_t i = length; i < 6; ++i) text[n++] = '0';  // leading zeros after the point
        for (std::size_t i = whole; i < significant; ++i) text[n++] = digits[i];
    } else {
        text[n++] = '0';  // a whole number of milliseconds: "5.0", as append_json_number writes it
    }
    out.append(text, n);
}

JsonObjectWriter& JsonObjectWriter::milliseconds(std::string_view k, std::int64_t nanoseconds) {
    key(k);
    append_json_milliseconds(out_, nanoseconds);
    return *this;
}

void JsonObjectWriter::key(std::string_view k) {
    // Keys are the code's own literals: nothing in them to escape (every access line has 20),
    // and short: the separator, the key and its quotes leave in one append.
    char piece[64];
    if (k.size() + 4 > sizeof piece) {
        out_.append(first_ ? "\"" : ",\"").append(k).append("\":");
        first_ = false;
        return;
    }
    std::size_t n = 0;
    if (!first_) piece[n++] = ',';
    first_ = false;
    piece[n++] = '"';
    std::memcpy(piece + n, k.data(), k.size());
    n += k.size();
    piece[n++] = '"';
    piece[n++] = ':';
    out_.append(piece, n);
}

JsonObjectWriter& JsonObjectWriter::string(std::string_view k, std::string_view value) {
    key(k);
    append_json_string(out_, value);
    return *this;
}

JsonObjectWriter& JsonObjectWriter::number(std::string_view k, double value) {
    key(k);
    append_json_number(out_, value);
    return *this;
}

JsonObjectWriter& JsonObjectWriter::integer(std::string_view k, std::uint64_t value) {
    key(k);
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
    out_.append(buf, static_cast<std::size_t>(end - buf));
    return *this;
}

JsonObjectWriter& JsonObjectWriter::null(std::string_view k) {
    key(k);
    out_ += "null";
    return *this;
}

JsonObjectWriter& JsonObjectWriter::boolean(std::string_view k, bool value) {
    key(k);
    out_ += value ? "true" : "false";
    return *this;
}

}  // namespace tokengate::core
