#include "tokengate/proxy/target.hpp"

#include <vector>

namespace tokengate::proxy {

namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool unreserved(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

/// A byte no path may carry, raw or encoded.
bool forbidden(unsigned char c) { return c <= 0x20 || c == 0x7F || c == '\\'; }

NormalizedTarget refuse(std::string_view why) {
    NormalizedTarget t;
    t.why = why;
    return t;
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
    if (s.size() < prefix.size()) return false;
    for (std::size_t i = 0; i < prefix.size(); ++i)
        if ((s[i] | 0x20) != prefix[i]) return false;
    return true;
}

/// A path already in normal form (the usual case): no escape, parameter, forbidden byte,
/// empty or dot segment, or trailing slash. One pass, no allocation but the copy.
bool already_normal(std::string_view path) {
    for (std::size_t i = 0; i < path.size(); ++i) {
        auto c = static_cast<unsigned char>(path[i]);
        if (c == '%' || c == ';' || c == '#' || forbidden(c)) return false;
        if (c != '/') continue;
        if (i + 1 == path.size()) return i == 0;                     // "/" alone is normal, a trailing one is not
        if (path[i + 1] == '/' || path[i + 1] == '.') return false;  // "//", or maybe "/." or "/.."
    }
    return true;
}

}  // namespace

std::string NormalizedTarget::text() const {
    std::string out;
    append_to(out);
    return out;
}

NormalizedTarget normalize_target(std::string_view target) {
    // absolute-form (RFC 9112 §3.2.2): the path is what follows the authority.
    for (std::string_view scheme : {"http://", "https://"}) {
        if (!starts_with_nocase(target, scheme)) continue;
        auto rest = target.substr(scheme.size());
        auto slash = rest.find_first_of("/?");
        target = slash == std::string_view::npos ? std::string_view("/") : rest.substr(slash);
        if (target.front() == '?') return refuse("an absolute-form target without a path");
        break;
    }
    if (target.empty() || target.front() != '/') return refuse("the request target must be a path");
    auto question = target.find('?');
    std::string_view raw_path = target.substr(0, question);
    NormalizedTarget out;
    if (question != std::string_view::npos) out.query = target.substr(question + 1);
    if (already_normal(raw_path)) {
        out.ok = true;
        out.path = raw_path;
        return out;
    }
    if (raw_path.find('#') != std::string_view::npos) return refuse("a fragment in the request target");

    std::vector<std::string> segments;
    std::string segment;
    bool in_params = false;  // after ';' in this segment
    auto end_segment = [&] {
        if (segment == "..") {
            if (!segments.empty()) segments.pop_back();
        } else if (!segment.empty() && segment != ".") {
            segments.push_back(std::move(segment));
        }
        segment.clear();
        in_params = false;
    };
    for (std::size_t i = 1; i <= raw_path.size(); ++i) {
        if (i == raw_path.size() || raw_path[i] == '/') {
            end_segment();
            continue;
        }
        auto c = static_cast<unsigned char>(raw_path[i]);
        if (forbidden(c)) return refuse("a control character, space or backslash in the path");
        if (c == '%') {
            int hi = i + 2 < raw_path.size() ? hex_value(raw_path[i + 1]) : -1;
            int lo = hi >= 0 ? hex_value(raw_path[i + 2]) : -1;
            if (lo < 0) return refuse("a malformed percent-escape in the path");
            auto decoded = static_cast<unsigned char>(hi * 16 + lo);
            if (decoded == '/') return refuse("an encoded slash in the path");
            if (forbidden(decoded)) return refuse("an encoded control character, space or backslash in the path");
            i += 2;
            if (in_params) continue;
            if (unreserved(decoded)) {
                segment.push_back(static_cast<char>(decoded));
            } else {
                static constexpr char k_hex[] = "0123456789ABCDEF";
                segment.push_back('%');
                segment.push_back(k_hex[decoded >> 4]);
                segment.push_back(k_hex[decoded & 15]);
            }
            continue;
        }
        if (c == ';') in_params = true;
        if (!in_params) segment.push_back(static_cast<char>(c));
    }
    out.ok = true;
    out.path.reserve(raw_path.size());
    if (segments.empty()) out.path.push_back('/');
    for (const auto& s : segments) {
        out.path.push_back('/');
        out.path += s;
    }
    return out;
}

}  // namespace tokengate::proxy
