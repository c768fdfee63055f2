#include "tokengate/limiter/headers.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>

#include "tokengate/core/calendar.hpp"
#include "tokengate/core/saturate.hpp"

namespace tokengate::limiter {

using config::Algorithm;
using config::Unit;
using core::k_nanos_per_second;
using core::Nanos;

namespace {

Nanos ceil_seconds(Nanos d) { return (std::max<Nanos>(0, d) + k_nanos_per_second - 1) / k_nanos_per_second; }

double ratio(const LimitStatus& s) {
    return s.spec->capacity > 0 ? std::max(0.0, s.verdict.remaining) / s.spec->capacity : 0;
}

/// Header values are written straight into their field (no std::string per number).
template <class Text>
void append_integer(Text& out, std::int64_t value) {
    char digits[24];
    auto* end = std::to_chars(digits, digits + sizeof digits, value).ptr;
    out.append(std::string_view(digits, static_cast<std::size_t>(end - digits)));
}

template <class Text>
void append_remaining(Text& out, const LimitStatus& s) {
    append_integer(out, core::saturate_to_int64(std::floor(std::max(0.0, s.verdict.remaining))));
}

std::string remaining_text(const LimitStatus& s) {
    std::string text;
    append_remaining(text, s);
    return text;
}

/// format_number's text, appended.
template <class Text>
void append_number(Text& out, double value) {
    char buf[352];  // DBL_MAX in %.0f is 309 digits
    if (!std::isfinite(value))
        return void(out.append(std::string_view(value > 0 ? "inf" : value < 0 ? "-inf" : "nan")));
    // Past 2^53 every double is a whole number, and past 2^62 llround would be out of range.
    if (std::fabs(value) >= 1e15) {
        int n = std::snprintf(buf, sizeof buf, "%.0f", value);
        return void(out.append(std::string_view(buf, static_cast<std::size_t>(n))));
    }
    if (std::fabs(value - std::round(value)) < 1e-9) return append_integer(out, std::llround(value));
    std::string_view text(buf, static_cast<std::size_t>(std::snprintf(buf, sizeof buf, "%.3f", value)));
    while (text.back() == '0') text.remove_suffix(1);
    if (text.back() == '.') text.remove_suffix(1);
    out.append(text);
}

/// openai_duration's text, appended.
template <class Text>
void append_duration(Text& out, Nanos duration) {
    constexpr Nanos k_ms = 1'000'000;
    Nanos ms = (std::max<Nanos>(0, duration) + k_ms - 1) / k_ms;
    if (ms < 1000) {
        append_integer(out, ms);
        return void(out.append(std::string_view("ms")));
    }
    Nanos hours = ms / 3'600'000;
    Nanos minutes = ms / 60'000 % 60;
    if (hours) append_integer(out, hours), out.append(std::string_view("h"));
    if (hours || minutes) append_integer(out, minutes), out.append(std::string_view("m"));
    append_integer(out, ms / 1000 % 60);
    if (Nanos millis = ms % 1000) {
        char frac[5] = {'.', static_cast<char>('0' + millis / 100), static_cast<char>('0' + millis / 10 % 10),
                        static_cast<char>('0' + millis % 10), 0};
        std::string_view text(frac, 4);
        while (text.back() == '0') text.remove_suffix(1);
        out.append(text);
    }
    out.append(std::string_view("s"));
}

bool is_rate(const LimitStatus& s) {
    return s.spec->algorithm != Algorithm::concurrency && s.spec->algorithm != Algorithm::quota;
}
bool is_quota(const LimitStatus& s) { return s.spec->algorithm == Algorithm::quota; }

/// The policy window in seconds: a bucket's time to fill, a quota's calendar window.
std::int64_t window_seconds(const LimitStatus& s) {
    if (is_quota(s)) return ceil_seconds(s.window.end - s.window.start);
    return core::saturate_to_int64(std::ceil(s.spec->capacity / s.spec->current_rate()),
                                   core::k_forever / k_nanos_per_second);
}

/// "1000000 tokens a day", "50 USD a month".
std::string quota_terms(const config::LimitSpec& spec) {
    std::string unit = spec.unit == Unit::usd ? "USD" : config::to_string(spec.unit);
    return format_number(spec.capacity) + " " + unit + " a " + core::to_string(spec.period);
}

/// The lowest remaining/limit among enforced limits matching `accept`.
template <typename Pred>
std::optional<std::size_t> tightest(const Decision& d, Pred accept) {
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < d.statuses.size(); ++i) {
        const auto& s = d.statuses[i];
        if (!s.spec->enforce || !accept(s)) continue;
        if (!best || ratio(s) < ratio(d.statuses[*best])) best = i;
    }
    return best;
}

/// One unit's header names (OpenAI's or Anthropic's): limit, remaining, reset.
struct UnitNames {
    std::string_view limit, remaining, reset;
};
constexpr UnitNames k_requests_names{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
                                     "x-ratelimit-reset-requests"};
constexpr UnitNames k_tokens_names{"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens",
                                   "x-ratelimit-reset-tokens"};
constexpr UnitNames k_anthropic_requests_names{"anthropic-ratelimit-requests-limit",
                                               "anthropic-ratelimit-requests-remaining",
                                               "anthropic-ratelimit-requests-reset"};
constexpr UnitNames k_anthropic_tokens_names{"anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-remaining",
                                             "anthropic-ratelimit-tokens-reset"};

/// The tightest limit counting `unit` with its limit and remaining; its reset as `reset`
/// says: OpenAI's duration, or Anthropic's RFC 3339 instant.
template <typename Out, typename Reset>
void add_unit_set(Out& out, const Decision& d, Unit unit, const UnitNames& names, Reset reset) {
    // A token quota belongs with the token (cost unit) headers, a request quota with the requests'.
    auto counts = [&](const LimitStatus& s) {
        return s.spec->unit == unit || (unit == Unit::cost && s.spec->unit == Unit::tokens && is_quota(s));
    };
    auto i = tightest(d, [&](const LimitStatus& s) { return (is_rate(s) || is_quota(s)) && counts(s); });
    if (!i) return;
    const auto& s = d.statuses[*i];
    HeaderField limit{names.limit, {}}, remaining{names.remaining, {}}, reset_at{names.reset, {}};
    append_number(limit.value, s.spec->capacity);
    append_remaining(remaining.value, s);
    reset(reset_at.value, s);
    out.push_back(std::move(limit));
    out.push_back(std::move(remaining));
    out.push_back(std::move(reset_at));
}

}  // namespace

std::string format_number(double value) {
    std::string text;
    append_number(text, value);
    return text;
}

std::string openai_duration(Nanos duration) {
    std::string text;
    append_duration(text, duration);
    return text;
}

template <typename Out>
Out rate_limit_headers(const Decision& d, Nanos unix_now, bool anthropic) {
    Out out;
    out.reserve(anthropic ? 19 : 13);  // 5 X-RateLimit/RateLimit, 3 per unit and dialect, Retry-After, retry-after-ms
    std::optional<std::size_t> main =
        d.rejected >= 0 ? std::optional<std::size_t>(d.rejected) : tightest(d, [](const LimitStatus&) { return true; });
    if (main) {
        const auto& s = d.statuses[*main];
        const auto& name = s.spec->name;
        HeaderField limit{"X-RateLimit-Limit", {}}, remaining{"X-RateLimit-Remaining", {}};
        append_number(limit.value, s.spec->capacity);
        append_remaining(remaining.value, s);
        // A quota resets at its window's end exactly (the decision's clock read is not this one).
        auto reset_at = is_quota(s) ? s.window.end : unix_now + s.verdict.until_full;
        HeaderField reset{"X-RateLimit-Reset", {}};
        append_integer(reset.value, ceil_seconds(reset_at));
        HeaderField policy{"RateLimit-Policy", "\""};
        policy.value.append(name).append("\";q=").append(limit.value.view());
        if (is_rate(s) || is_quota(s)) append_integer(policy.value.append(";w="), window_seconds(s));
        HeaderField state{"RateLimit", "\""};
        state.value.append(name).append("\";r=").append(remaining.value.view()).append(";t=");
        append_integer(state.value, ceil_seconds(s.verdict.until_full));
        out.push_back(std::move(limit));
        out.push_back(std::move(remaining));
        out.push_back(std::move(reset));
        out.push_back(std::move(policy));
        out.push_back(std::move(state));
    }
    auto duration = [](core::InlineString<63>& out, const LimitStatus& s) {
        append_duration(out, s.verdict.until_full);
    };
    add_unit_set(out, d, Unit::requests, k_requests_names, duration);
    add_unit_set(out, d, Unit::cost, k_tokens_names, duration);
    if (anthropic) {
        auto instant = [&](core::InlineString<63>& out, const LimitStatus& s) {
            out.append(core::rfc3339(is_quota(s) ? s.window.end : unix_now + s.verdict.until_full));
        };
        add_unit_set(out, d, Unit::requests, k_anthropic_requests_names, instant);
        add_unit_set(out, d, Unit::cost, k_anthropic_tokens_names, instant);
    }
    if (!d.allowed && d.retry_after >= 0) {
        HeaderField after{"Retry-After", {}}, after_ms{"retry-after-ms", {}};
        append_integer(after.value, std::max<Nanos>(1, ceil_seconds(d.retry_after)));
        // The exact wait: the OpenAI SDKs read it before Retry-After, so a client of a 20/s
        // limit waits 50 ms, not a whole second.
        auto ms = d.retry_after / 1'000'000 + (d.retry_after % 1'000'000 != 0);
        append_integer(after_ms.value, std::max<Nanos>(1, ms));
        out.push_back(std::move(after));
        out.push_back(std::move(after_ms));
    }
    // An exhausted quota is not a moment's congestion: the OpenAI SDKs honour this and do not
    // retry (they would otherwise retry at once, twice, for nothing).
    if (!d.allowed && d.rejected >= 0 && is_quota(d.statuses[d.rejected])) out.push_back({"x-should-retry", "false"});
    return out;
}

template std::vector<HeaderField> rate_limit_headers(const Decision&, Nanos, bool);
template HeaderFields rate_limit_headers(const Decision&, Nanos, bool);

namespace {

Rejection describe_quota(const Decision& d, const LimitStatus& s, const Charge& c) {
    Rejection r;
    r.type = s.spec->unit == Unit::requests ? "requests" : "tokens";
    r.code = "insufficient_quota";
    std::string quota =
        std::string(config::to_string(s.level)) + " quota '" + s.spec->name + "' (" + quota_terms(*s.spec) + ")";
    if (d.never()) {
        r.message = "This request needs " + format_number(c.amount) + ", more than the " + quota +
                    " allows. Lower max_tokens or shorten the prompt.";
        return r;
    }
    double allowance = s.spec->capacity + s.quota_added;
    r.message = "You exceeded your " + quota + ": used " +
                format_number(std::max(0.0, allowance - s.verdict.remaining)) + " of " + format_number(allowance) +
                ", this request needs " + format_number(c.amount) + ". It resets at " + core::rfc3339(s.window.end) +
                ".";
    return r;
}

}  // namespace

Rejection describe_rejection(const Decision& d, std::span<const Charge> charges) {
    Rejection r;
    if (d.rejected < 0) return r;
    const auto& s = d.statuses[d.rejected];
    const auto& c = charges[d.rejected];
    std::string where = std::string(config::to_string(s.level)) + " limit '" + s.spec->name + "'";
    if (is_quota(s)) return describe_quota(d, s, c);
    if (d.never()) {
        r.type = "tokens";
        r.code = "request_too_large_for_limit";
        r.message = "This request costs " + format_number(c.amount) + " " + config::to_string(s.spec->unit) +
                    ", more than the " + where + " can ever hold (" + format_number(s.spec->capacity) +
                    "). Lower max_tokens or shorten the prompt.";
        return r;
    }
    r.type = s.spec->algorithm == Algorithm::concurrency ? "concurrency"
             : s.spec->unit == Unit::cost                ? "tokens"
                                                         : "requests";
    r.code = "rate_limit_exceeded";
    r.message = "Rate limit exceeded on " + where + ": requested " + format_number(c.amount) + ", remaining " +
                remaining_text(s) + ". Retry after " + std::to_string(std::max<Nanos>(1, ceil_seconds(d.retry_after))) +
                "s.";
    return r;
}

}  // namespace tokengate::limiter
