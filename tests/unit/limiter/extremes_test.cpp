// Property tests over the limiter's whole configurable range: costs up to 2^64 (and NaN),
// rates from 0.001/s to 1e9/s, capacities up to 1e15. An admitted request never costs more
// than the capacity, and the level stays within [-C, C] whatever is charged or settled.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "tokengate/core/saturate.hpp"
#include "tokengate/limiter/headers.hpp"
#include "tokengate/limiter/rate_bucket.hpp"
#include "tokengate/limiter/shape_queue.hpp"
#include "tokengate/store/memory_store.hpp"

namespace tokengate::limiter {
namespace {

using config::Algorithm;
using config::LimitSpec;

constexpr double k_two_to_64 = 18446744073709551616.0;

LimitSpec bucket(double capacity, double rate, Algorithm algorithm = Algorithm::token_bucket) {
    LimitSpec s;
    s.name = "b";
    s.algorithm = algorithm;
    s.capacity = capacity;
    s.rate_per_s = rate;
    s.unit = config::Unit::cost;
    return s;
}

/// A log-uniform draw in [lo, hi]: extremes as likely as the middle.
double log_uniform(std::mt19937_64& rng, double lo, double hi) {
    std::uniform_real_distribution<double> d(std::log(lo), std::log(hi));
    return std::exp(d(rng));
}

double hostile_amount(std::mt19937_64& rng, double capacity) {
    switch (rng() % 8) {
        case 0: return k_two_to_64;
        case 1: return std::numeric_limits<double>::quiet_NaN();
        case 2: return std::numeric_limits<double>::infinity();
        case 3: return capacity;
        case 4: return std::nextafter(capacity, 2 * capacity);
        case 5: return 3.7e17;
        default: return log_uniform(rng, 1e-3, capacity);
    }
}

TEST(LimiterExtremes, TheIssue14BypassIsRefusedAndLeavesTheDebt) {
    // capacity 50 at 0.5/s, then max_tokens 2^64-1 priced at 3.7e17: it used to be admitted
    // (cost/rate overflowed int64 nanoseconds) and to leave the bucket full.
    core::ManualClock clock;
    RateBucket b(bucket(50, 0.5), clock.now());
    ASSERT_TRUE(b.check(50, clock.now()).admitted);
    b.consume(50, clock.now());
    for (double huge : {3.7e17, 2.31e11, 2.30e11, k_two_to_64, 1e300}) {
        auto v = b.check(huge, clock.now());
        EXPECT_FALSE(v.admitted) << huge;
        EXPECT_TRUE(v.never) << huge;
        EXPECT_EQ(v.retry_after, -1) << huge;
        EXPECT_GE(v.until_full, 0) << huge;
    }
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), 0) << "the earlier debt is still there";
    EXPECT_FALSE(b.check(1, clock.now()).admitted);
}

TEST(LimiterExtremes, AWideLimitAdmitsWhatFits) {
    // capacity 1e10 at 1/s: tau is 317 years, past an int64 of nanoseconds.
    core::ManualClock clock;
    RateBucket b(bucket(1e10, 1), clock.now());
    auto v = b.check(5, clock.now());
    EXPECT_TRUE(v.admitted);
    EXPECT_DOUBLE_EQ(v.remaining, 1e10 - 5);
    b.consume(5, clock.now());
    EXPECT_DOUBLE_EQ(b.tokens(clock.now()), 1e10 - 5);
    EXPECT_EQ(b.until_full(clock.now()), 5 * core::k_nanos_per_second);
    // The widest the config allows: 1e15 at 1e-9/s.
    RateBucket widest(bucket(1e15, 1e-9), clock.now());
    ASSERT_TRUE(widest.check(1e15, clock.now()).admitted);
    widest.consume(1e15, clock.now());
    EXPECT_DOUBLE_EQ(widest.tokens(clock.now()), 0);
    EXPECT_EQ(widest.until_full(clock.now()), core::k_forever) << "saturated, not wrapped";
    EXPECT_FALSE(widest.check(1, clock.now()).admitted);
}

TEST(LimiterExtremes, AdmittedNeverExceedsCapacityAndTheLevelStaysWithinRange) {
    std::mt19937_64 rng(14);
    for (int trial = 0; trial < 300; ++trial) {
        double capacity = log_uniform(rng, 1, 1e15);
        double rate = log_uniform(rng, 1e-3, 1e9);
        auto algorithm = trial % 2 ? Algorithm::token_bucket : Algorithm::leaky_bucket;
        core::ManualClock clock;
        RateBucket b(bucket(capacity, rate, algorithm), clock.now());
        for (int step = 0; step < 200; ++step) {
            double amount = hostile_amount(rng, capacity);
            auto v = b.check(amount, clock.now());
            if (v.admitted) {
                ASSERT_LE(amount, capacity) << "trial " << trial << " step " << step;
                ASSERT_GE(v.until_full, 0);
                b.consume(amount, clock.now());
            } else {
                ASSERT_TRUE(v.retry_after == -1 || v.retry_after >= 0);
                ASSERT_EQ(v.never, !(amount <= capacity));
            }
            // Settlement with a hostile actual cost: refunds and extra charges of any size.
            if (rng() % 3 == 0) b.adjust((rng() % 2 ? 1 : -1) * hostile_amount(rng, capacity), clock.now());
            double level = b.tokens(clock.now());
            ASSERT_LE(level, capacity) << "trial " << trial << " step " << step;
            // Debt goes as deep as settled (SPEC §17), never past what the state file keeps.
            ASSERT_GE(level, -core::k_max_counter * (1 + 1e-12) - capacity) << "trial " << trial << " step " << step;
            ASSERT_LE(b.until_full(clock.now()), core::k_forever);
            clock.advance(std::chrono::nanoseconds(static_cast<core::Nanos>(log_uniform(rng, 1, 1e12))));
        }
    }
}

TEST(LimiterExtremes, AShapingQueueByCostRefusesASlotLongerThanMaxWait) {
    // A 2^64-token request must not book the queue for ever ahead of everyone else.
    core::ManualClock clock;
    LimitSpec s = bucket(10, 0.5, Algorithm::leaky_bucket);
    s.mode = config::LeakyMode::shape;
    s.max_wait = 5 * core::k_nanos_per_second;
    ShapeQueue q(s);
    for (double huge : {3.7e17, k_two_to_64, std::numeric_limits<double>::quiet_NaN(), 2.6}) {
        auto a = q.admit("t", huge, clock.now());
        EXPECT_FALSE(a.verdict.admitted) << huge;
        EXPECT_TRUE(a.verdict.never) << huge;
    }
    EXPECT_TRUE(q.admit("t", 2.5, clock.now()).verdict.admitted) << "a 5 s slot fits max_wait";
    EXPECT_TRUE(q.admit("t", 1, clock.now()).verdict.admitted) << "and starts at 5 s";
}

TEST(LimiterExtremes, ShapingTimesStayInRangeAtTheSlowestRate) {
    core::ManualClock clock;
    LimitSpec s = bucket(1e15, 1e-9, Algorithm::leaky_bucket);
    s.mode = config::LeakyMode::shape;
    s.unit = config::Unit::requests;
    ShapeQueue q(s);  // no max_wait: C/R = 1e24 s, saturated
    int admitted = 0;
    for (int i = 0; i < 5; ++i) {
        auto a = q.admit("t", 1, clock.now());
        ASSERT_GE(a.verdict.until_full, 0) << i;
        ASSERT_GE(a.verdict.retry_after, 0) << i;
        if (!a.verdict.admitted) continue;
        ++admitted;
        ASSERT_GE(a.start_at, clock.now()) << i;
    }
    EXPECT_EQ(admitted, 2) << "one at once, one a (saturated) 36-year slot later, then max_wait";
}

TEST(LimiterExtremes, HeadersOfExtremeLimitsAreWholeNumbers) {
    core::ManualClock clock;
    LimitSpec wide = bucket(1e15, 1e-9);
    store::MemoryStore store(clock);
    std::vector<Charge> charges = {Charge{&wide, config::Level::tenant, "tenant:b:x", k_two_to_64, "x"}};
    auto d = store.decide(charges);
    ASSERT_FALSE(d.allowed);
    EXPECT_TRUE(d.never());
    for (const auto& h : rate_limit_headers(d, clock.unix_now())) {
        EXPECT_EQ(h.value.find('-'), std::string::npos) << h.name << ": " << h.value;
        EXPECT_EQ(h.value.find("e+"), std::string::npos) << h.name << ": " << h.value;
    }
    EXPECT_EQ(format_number(1e15), "1000000000000000");
    EXPECT_EQ(format_number(k_two_to_64), "18446744073709551616");
    EXPECT_EQ(format_number(3.7e17), "370000000000000000");
    auto why = describe_rejection(d, charges);
    EXPECT_EQ(why.code, "request_too_large_for_limit");
}

}  // namespace
}  // namespace tokengate::limiter
