#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokengate/core/inline_string.hpp"
#include "tokengate/core/recycled.hpp"
#include "tokengate/limiter/decision.hpp"

namespace tokengate::limiter {

struct HeaderField {
    std::string_view name;         // always a literal: a request's dozen names cost no allocation
    core::InlineString<63> value;  // and their values none either, unless one is over 63 bytes
};

/// Every rate-limit header of SPEC §6/§10 for a decision, describing the state right after
/// admission: X-RateLimit-*, IETF RateLimit-Policy/RateLimit, OpenAI x-ratelimit-*-requests /
/// -tokens, and Retry-After on a refusal that could ever pass. `anthropic` adds Anthropic's
/// anthropic-ratelimit-requests-* / -tokens-* (SPEC §20: reset as an RFC 3339 instant).
/// Out: a std::vector, or HeaderFields (recycled) on the request path.
template <typename Out = std::vector<HeaderField>>
Out rate_limit_headers(const Decision& decision, core::Nanos unix_now, bool anthropic = false);

/// A response's rate-limit headers: a dozen, 19 at most (SPEC §19). In a recycled block, not
/// inline: stage hands them to stage (decision, permit, refusal) by moving one pointer.
using HeaderFields = std::vector<HeaderField, core::RecyclingAllocator<HeaderField>>;
extern template std::vector<HeaderField> rate_limit_headers(const Decision&, core::Nanos, bool);
extern template HeaderFields rate_limit_headers(const Decision&, core::Nanos, bool);

/// OpenAI-style duration, rounded up to the millisecond: "12ms", "1s", "1.5s", "6m0s", "1h2m3s".
std::string openai_duration(core::Nanos duration);

/// A number as configured: "10", "2.5".
std::string format_number(double value);

/// The OpenAI error fields of a 429.
struct Rejection {
    std::string type;  // requests | tokens | concurrency
    std::string code;  // rate_limit_exceeded | request_too_large_for_limit
    std::string message;
};
Rejection describe_rejection(const Decision& decision, std::span<const Charge> charges);

}  // namespace tokengate::limiter
