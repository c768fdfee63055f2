#pragma once

#include <string>
#include <string_view>

#include "tokengate/core/recycled.hpp"

namespace tokengate::proxy {

/// A request target as routes match it and the upstream receives it.
struct NormalizedTarget {
    bool ok = false;
    core::RecycledString path;  // normalised, always starting with '/' (recycled: most are past 15 bytes)
    std::string_view query;     // verbatim, without the '?' (a view into the original target)
    std::string_view why;       // when !ok: what was wrong, for the 400
    /// Appends path, then '?' and the query if there is one.
    template <class Out>  // std::string or core::RecycledString
    void append_to(Out& out) const {
        out.append(path);
        if (!query.empty()) out.append("?").append(query);
    }
    std::string text() const;
};

/// Normalises the path of a request target so that one resource has one spelling, and a route
/// limit on /v1/chat/completions cannot be walked around with /v1/%63hat/completions:
/// percent-encoded unreserved characters are decoded and other escapes upper-cased (RFC 3986
/// §6.2.2), ';' parameters dropped from each segment, empty and "." segments removed, ".."
/// applied (§5.2.4), and a trailing '/' dropped. Refused: an encoded '/' or '\' (the upstream
/// would see another path than the routes did), NUL, control characters and spaces, raw or
/// encoded, a malformed escape, and anything but origin-form or absolute-form.
NormalizedTarget normalize_target(std::string_view target);

}  // namespace tokengate::proxy
