#include <gtest/gtest.h>

#include "server/log_throttle.hpp"

namespace tokengate::server {
namespace {

constexpr core::Nanos k_s = core::k_nanos_per_second;

TEST(LogThrottle, OneLinePerKeyPerIntervalCountingWhatItHeldBack) {
    LogThrottle throttle(60 * k_s);
    core::Nanos t0 = 5 * k_s;
    std::uint64_t held = 99;
    EXPECT_TRUE(throttle.allow("10.0.0.1", t0, held));
    EXPECT_EQ(held, 0u);
    for (int i = 0; i < 1000; ++i) EXPECT_FALSE(throttle.allow("10.0.0.1", t0 + 1 * k_s, held));
    EXPECT_TRUE(throttle.allow("10.0.0.2", t0 + 1 * k_s, held));  // another peer is its own line
    EXPECT_FALSE(throttle.allow("10.0.0.1", t0 + 59 * k_s, held));
    EXPECT_TRUE(throttle.allow("10.0.0.1", t0 + 60 * k_s, held));
    EXPECT_EQ(held, 1001u);
    EXPECT_FALSE(throttle.allow("10.0.0.1", t0 + 61 * k_s, held));
}

TEST(LogThrottle, ForgetsEverythingRatherThanGrowPastItsBound) {
    LogThrottle throttle(60 * k_s, 3);
    core::Nanos t0 = 5 * k_s;
    std::uint64_t held = 0;
    for (const auto* peer : {"a", "b", "c"}) EXPECT_TRUE(throttle.allow(peer, t0, held));
    EXPECT_FALSE(throttle.allow("a", t0, held));
    EXPECT_TRUE(throttle.allow("d", t0, held));  // the fourth key starts afresh
    EXPECT_TRUE(throttle.allow("a", t0, held));  // so "a" may be reported again
}

}  // namespace
}  // namespace tokengate::server
