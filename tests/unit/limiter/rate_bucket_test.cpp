#include <gtest/gtest.h>

#include <chrono>

#include "tokengate/limiter/rate_bucket.hpp"

namespace tokengate::limiter {
namespace {

using namespace std::chrono_literals;
using config::Algorithm;
using config::LimitSpec;

LimitSpec token_bucket(double capacity, double rate, double initial = 1.0) {
    LimitSpec s;
    s.name = "tb";
    s.algorithm = Algorithm::token_bucket;
    s.capacity = capacity;
    s.rate_per_s = rate;
    s.initial = initial;
    return s;
}

LimitSpec leaky_police(double capacity, double rate) {
    LimitSpec s = token_bucket(capacity, rate);
    s.algorithm = Algorithm::leaky_bucket;
    return s;
}

TEST(RateBucket, StartsFullAndRefillsLazily) {
    core::ManualClock clock;
    RateBucket b(token_bucket(10, 1), clock.now());
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), 10);
    for (int i = 0; i < 10; ++i) {
        auto v = b.check(1, clock.now());
        ASSERT_TRUE(v.admitted) << i;
        EXPECT_DOUBLE_EQ(v.remaining, 9 - i);
        b.consume(1, clock.now());
    }
    auto refused = b.check(1, clock.now());
    EXPECT_FALSE(refused.admitted);
    EXPECT_EQ(refused.retry_after, core::k_nanos_per_second);
    EXPECT_EQ(refused.until_full, 10 * core::k_nanos_per_second);
    clock.advance(999ms);
    EXPECT_FALSE(b.check(1, clock.now()).admitted);
    clock.advance(1ms);
    EXPECT_TRUE(b.check(1, clock.now()).admitted);
    clock.advance(1h);
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), 10) << "never above capacity";
}

TEST(RateBucket, InitialFill) {
    core::ManualClock clock;
    RateBucket b(token_bucket(100, 10, 0.5), clock.now());
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), 50);
    EXPECT_TRUE(b.check(50, clock.now()).admitted);
    EXPECT_FALSE(b.check(51, clock.now()).admitted);
    EXPECT_EQ(b.check(51, clock.now()).retry_after, 100'000'000);
}

TEST(RateBucket, CostLargerThanCapacityNeverPasses) {
    core::ManualClock clock;
    RateBucket b(token_bucket(10, 1), clock.now());
    auto v = b.check(11, clock.now());
    EXPECT_FALSE(v.admitted);
    EXPECT_TRUE(v.never);
    EXPECT_LT(v.retry_after, 0);
}

TEST(RateBucket, SettlementRefundsAndDebt) {
    core::ManualClock clock;
    RateBucket b(token_bucket(100, 10), clock.now());
    b.consume(60, clock.now());
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), 40);
    b.adjust(-50, clock.now());  // used less than reserved
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), 90);
    b.adjust(-50, clock.now());  // a refund never lifts the bucket above capacity
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), 100);
    b.adjust(150, clock.now());  // used more than reserved: debt
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), -50);
    b.adjust(500, clock.now());  // SPEC §17: no floor at -C; the debt is paid back, not forgiven
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), -550);
    auto v = b.check(1, clock.now());
    EXPECT_FALSE(v.admitted);
    EXPECT_EQ(v.retry_after, 55'100'000'000) << "from -550 to +1 token at 10/s";
    EXPECT_EQ(b.check(100, clock.now()).retry_after, 65 * core::k_nanos_per_second);
    clock.advance(55'099ms);
    EXPECT_FALSE(b.check(1, clock.now()).admitted);
    clock.advance(1ms);
    EXPECT_TRUE(b.check(1, clock.now()).admitted);
    b.adjust(1e30, clock.now());  // a hostile report sinks it to the state file's floor, no further
    EXPECT_GE(b.tokens(clock.now()), -core::k_max_counter * (1 + 1e-12));
}

/// The seed scenario: C=5, R=2/s, 20 requests 0.1 s apart.
std::vector<int> seed_admits(const LimitSpec& spec) {
    core::ManualClock clock;
    RateBucket b(spec, clock.now());
    std::vector<int> admitted;
    for (int i = 0; i < 20; ++i) {
        if (b.check(1, clock.now()).admitted) {
            b.consume(1, clock.now());
            admitted.push_back(i);
        }
        clock.advance(100ms);
    }
    return admitted;
}

TEST(RateBucket, SeedScenarioPoliceMeter) {
    // t = 0.0-0.5 s, then 1.0 s and 1.5 s: W + c <= C, as nginx admits with `burst`.
    EXPECT_EQ(seed_admits(leaky_police(5, 2)), (std::vector<int>{0, 1, 2, 3, 4, 5, 10, 15}));
}

TEST(RateBucket, SeedScenarioTokenBucketAdmitsTheSameSet) {
    EXPECT_EQ(seed_admits(token_bucket(5, 2)), seed_admits(leaky_police(5, 2)));
}

TEST(RateBucket, ReconfigureKeepsAbsoluteLevel) {
    core::ManualClock clock;
    RateBucket b(token_bucket(100, 10), clock.now());
    b.consume(70, clock.now());
    b.reconfigure(token_bucket(200, 20), clock.now());
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), 30);
    b.reconfigure(token_bucket(20, 20), clock.now());
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), 20) << "clamped to the new capacity";
}

TEST(ConcurrencyGauge, AcquireAndRelease) {
    ConcurrencyGauge g(2);
    EXPECT_TRUE(g.check(1).admitted);
    g.acquire(1);
    g.acquire(1);
    auto v = g.check(1);
    EXPECT_FALSE(v.admitted);
    EXPECT_EQ(v.retry_after, core::k_nanos_per_second);
    g.release(1);
    EXPECT_TRUE(g.check(1).admitted);
    g.release(5);
    EXPECT_DOUBLE_EQ(g.in_flight(), 0);
}

}  // namespace
}  // namespace tokengate::limiter
