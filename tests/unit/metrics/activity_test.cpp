#include <gtest/gtest.h>

#include <cmath>

#include "tokengate/metrics/activity.hpp"

namespace tokengate::metrics {
namespace {

constexpr core::Nanos k_s = core::k_nanos_per_second;
constexpr core::Nanos k_start = 1'800'000'000 * k_s;  // a fixed Unix time: no clock is read

TEST(Activity, SecondsAndMinutesFallOffTheirRings) {
    Activity a;
    a.request("acme", k_start, false, 10, 5);
    a.request("acme", k_start, true, 0, 0);
    a.request("acme", k_start + 2 * k_s, false, 1, 1);
    auto now = a.tenants(k_start + 2 * k_s);
    ASSERT_EQ(now.size(), 1u);
    const auto& h = now[0];
    ASSERT_EQ(h.prompt.size(), Activity::k_seconds);
    EXPECT_EQ(h.prompt.back(), 1u);
    EXPECT_EQ(h.prompt[Activity::k_seconds - 3], 10u);
    EXPECT_EQ(h.completion[Activity::k_seconds - 3], 5u);
    EXPECT_EQ(h.rejections_last_5m, 1u);
    EXPECT_EQ(h.tokens_last_hour, 17u);

    // 299 s on, the first second is the ring's oldest; at 300 s it is gone, the minutes kept.
    auto later = a.tenants(k_start + 299 * k_s)[0];
    EXPECT_EQ(later.prompt.front(), 10u);
    later = a.tenants(k_start + 300 * k_s)[0];
    EXPECT_EQ(later.prompt.front(), 0u);
    EXPECT_EQ(later.rejections_last_5m, 0u);
    EXPECT_EQ(later.tokens_last_hour, 17u);
    // A slot reused a ring later starts from zero, not from what it held.
    a.request("acme", k_start + 300 * k_s, false, 7, 0);
    EXPECT_EQ(a.tenants(k_start + 300 * k_s)[0].prompt.back(), 7u);
    // An hour without traffic: the tenant leaves the view.
    EXPECT_TRUE(a.tenants(k_start + 3601 * k_s + 300 * k_s).empty());
}

TEST(Activity, HugeCountsSaturateAndTheTableIsBounded) {
    Activity a(2);
    a.request("a", k_start, false, ~std::uint64_t{0}, ~std::uint64_t{0});
    a.request("a", k_start, false, ~std::uint64_t{0}, 0);
    auto h = a.tenants(k_start)[0];
    EXPECT_EQ(h.prompt.back(), 0xffffffffu);
    EXPECT_EQ(h.tokens_last_hour, ~std::uint64_t{0}) << "no wrap to a small number";
    a.request("b", k_start + k_s, false, 1, 0);
    a.request("c", k_start + 2 * k_s, false, 1, 0);  // full: the idlest ("a") goes
    auto all = a.tenants(k_start + 2 * k_s);
    ASSERT_EQ(all.size(), 2u);
    for (const auto& t : all) EXPECT_NE(t.tenant, "a");
    a.request("", k_start, true, 1, 1);  // no key: nobody's
    EXPECT_EQ(a.tenants(k_start + 2 * k_s).size(), 2u);
}

TEST(Activity, FirstByteQuantilesOverTheLastSamples) {
    Activity a;
    EXPECT_EQ(a.first_byte_latency("up").samples, 0u);
    for (int i = 1; i <= 100; ++i) a.first_byte("up", i / 1000.0);
    a.first_byte("up", std::nan(""));
    a.first_byte("up", -1);
    auto l = a.first_byte_latency("up");
    EXPECT_EQ(l.samples, 100u);
    EXPECT_NEAR(l.p50_s, 0.050, 1e-6);
    EXPECT_NEAR(l.p99_s, 0.099, 1e-6);
    for (int i = 0; i < 2000; ++i) a.first_byte("up", 1.0);  // the ring keeps the last 1024
    EXPECT_EQ(a.first_byte_latency("up").samples, Activity::k_ttfb_samples);
    EXPECT_NEAR(a.first_byte_latency("up").p50_s, 1.0, 1e-6);
}

}  // namespace
}  // namespace tokengate::metrics
