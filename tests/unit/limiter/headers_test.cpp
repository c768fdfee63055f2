#include <gtest/gtest.h>

#include <map>

#include "tokengate/limiter/headers.hpp"

namespace tokengate::limiter {
namespace {

constexpr core::Nanos k_s = core::k_nanos_per_second;
constexpr core::Nanos k_ms = 1'000'000;

TEST(OpenAiDuration, Formats) {
    EXPECT_EQ(openai_duration(0), "0ms");
    EXPECT_EQ(openai_duration(12 * k_ms), "12ms");
    EXPECT_EQ(openai_duration(11 * k_ms + 1), "12ms") << "rounded up to the millisecond";
    EXPECT_EQ(openai_duration(1 * k_s), "1s");
    EXPECT_EQ(openai_duration(1500 * k_ms), "1.5s");
    EXPECT_EQ(openai_duration(360 * k_s), "6m0s");
    EXPECT_EQ(openai_duration(3723 * k_s), "1h2m3s");
    EXPECT_EQ(openai_duration(3600 * k_s), "1h0m0s");
}

TEST(FormatNumber, IntegersAndFractions) {
    EXPECT_EQ(format_number(10), "10");
    EXPECT_EQ(format_number(2.5), "2.5");
    EXPECT_EQ(format_number(24.5), "24.5");
}

std::map<std::string, std::string> as_map(const std::vector<HeaderField>& fields) {
    std::map<std::string, std::string> m;
    for (const auto& f : fields) m[std::string(f.name)] = f.value;
    return m;
}

struct Fixture {
    config::LimitSpec requests, tokens;
    Fixture() {
        requests.name = "requests";
        requests.capacity = 10;
        requests.rate_per_s = 1;
        tokens.name = "tokens";
        tokens.unit = config::Unit::cost;
        tokens.capacity = 100;
        tokens.rate_per_s = 10;
    }
};

TEST(RateLimitHeaders, AdmittedRequestShowsTightestLimit) {
    Fixture f;
    Decision d;
    d.statuses.push_back({&f.requests, config::Level::tenant, {true, false, 9, 1 * k_s, 0}, true});
    d.statuses.push_back({&f.tokens, config::Level::tenant, {true, false, 20.7, 8 * k_s, 0}, true});
    resolve(d);
    auto h = as_map(rate_limit_headers(d, 1000 * k_s + 1));
    // tokens: 20.7/100 is tighter than requests: 9/10.
    EXPECT_EQ(h["X-RateLimit-Limit"], "100");
    EXPECT_EQ(h["X-RateLimit-Remaining"], "20");
    EXPECT_EQ(h["X-RateLimit-Reset"], "1009");
    EXPECT_EQ(h["RateLimit-Policy"], "\"tokens\";q=100;w=10");
    EXPECT_EQ(h["RateLimit"], "\"tokens\";r=20;t=8");
    EXPECT_EQ(h["x-ratelimit-limit-requests"], "10");
    EXPECT_EQ(h["x-ratelimit-remaining-requests"], "9");
    EXPECT_EQ(h["x-ratelimit-reset-requests"], "1s");
    EXPECT_EQ(h["x-ratelimit-limit-tokens"], "100");
    EXPECT_EQ(h["x-ratelimit-remaining-tokens"], "20");
    EXPECT_EQ(h["x-ratelimit-reset-tokens"], "8s");
    EXPECT_EQ(h.count("Retry-After"), 0u);
}

TEST(RateLimitHeaders, RefusalCarriesRetryAfterAndNamesTheLimit) {
    Fixture f;
    Decision d;
    d.statuses.push_back({&f.requests, config::Level::tenant, {false, false, 0.4, 9600 * k_ms, 600 * k_ms}, false});
    resolve(d);
    auto h = as_map(rate_limit_headers(d, 0));
    EXPECT_EQ(h["Retry-After"], "1");
    EXPECT_EQ(h["retry-after-ms"], "600") << "the exact wait, which the OpenAI SDKs prefer";
    EXPECT_EQ(h["X-RateLimit-Remaining"], "0");
    EXPECT_EQ(h.count("x-ratelimit-limit-tokens"), 0u) << "no unit: cost limit applies";
    std::vector<Charge> charges = {{&f.requests, config::Level::tenant, "tenant:requests:t", 1, {}}};
    auto why = describe_rejection(d, charges);
    EXPECT_EQ(why.type, "requests");
    EXPECT_EQ(why.code, "rate_limit_exceeded");
    EXPECT_NE(why.message.find("tenant limit 'requests'"), std::string::npos);
}

TEST(RateLimitHeaders, NeverPassingRequestHasNoRetryAfter) {
    Fixture f;
    Decision d;
    d.statuses.push_back({&f.tokens, config::Level::tenant, {false, true, 100, 0, -1}, false});
    resolve(d);
    EXPECT_TRUE(d.never());
    auto h = as_map(rate_limit_headers(d, 0));
    EXPECT_EQ(h.count("Retry-After"), 0u);
    EXPECT_EQ(h.count("retry-after-ms"), 0u);
    std::vector<Charge> charges = {{&f.tokens, config::Level::tenant, "tenant:tokens:t", 300, {}}};
    auto why = describe_rejection(d, charges);
    EXPECT_EQ(why.type, "tokens");
    EXPECT_EQ(why.code, "request_too_large_for_limit");
}

TEST(RateLimitHeaders, AnExhaustedQuotaSaysDoNotRetryAndWhenItResets) {
    Fixture f;
    config::LimitSpec daily;
    daily.name = "daily-tokens";
    daily.algorithm = config::Algorithm::quota;
    daily.unit = config::Unit::tokens;
    daily.capacity = 1e6;
    daily.period = core::CalendarPeriod::day;
    // 2026-12-01T21:00:00Z; the window ends at 2026-12-02T00:00:00Z, in 3 hours.
    constexpr core::Nanos now = 1'796'158'800 * k_s;
    constexpr core::Nanos midnight = 1'796'169'600 * k_s;
    Decision d;
    d.statuses.push_back({&f.requests, config::Level::tenant, {true, false, 9, 1 * k_s, 0}, true});
    LimitStatus q{&daily, config::Level::tenant, {false, false, 400, 3 * 3600 * k_s, 3 * 3600 * k_s}, false};
    q.window = {midnight - 86400 * k_s, midnight};
    q.quota_added = 500;
    d.statuses.push_back(q);
    resolve(d);
    ASSERT_FALSE(d.allowed);
    auto h = as_map(rate_limit_headers(d, now));
    EXPECT_EQ(h["x-should-retry"], "false") << "the OpenAI SDKs then do not retry";
    EXPECT_EQ(h["Retry-After"], "10800");
    EXPECT_EQ(h["retry-after-ms"], "10800000");
    EXPECT_EQ(h["X-RateLimit-Reset"], "1796169600");
    EXPECT_EQ(h["X-RateLimit-Limit"], "1000000");
    EXPECT_EQ(h["RateLimit-Policy"], "\"daily-tokens\";q=1000000;w=86400");
    EXPECT_EQ(h["x-ratelimit-limit-tokens"], "1000000") << "a token quota counts with the token headers";

    std::vector<Charge> charges(2);
    charges[1] = Charge{&daily, config::Level::tenant, "tenant:daily-tokens:acme", 900, "acme", {}};
    auto why = describe_rejection(d, charges);
    EXPECT_EQ(why.code, "insufficient_quota");
    EXPECT_EQ(why.type, "tokens");
    EXPECT_EQ(why.message,
              "You exceeded your tenant quota 'daily-tokens' (1000000 tokens a day): used 1000100 of 1000500, "
              "this request needs 900. It resets at 2026-12-02T00:00:00Z.");
}

TEST(RateLimitHeaders, ARateRefusalIsStillRetried) {
    Fixture f;
    Decision d;
    d.statuses.push_back({&f.requests, config::Level::tenant, {false, false, 0, 1 * k_s, 50 * k_ms}, false});
    resolve(d);
    auto h = as_map(rate_limit_headers(d, 1000 * k_s));
    EXPECT_EQ(h.count("x-should-retry"), 0u);
    EXPECT_EQ(h["retry-after-ms"], "50");
}

}  // namespace
}  // namespace tokengate::limiter
