#include "tokengate/limiter/quota.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace tokengate::limiter {
namespace {

constexpr core::Nanos k_s = core::k_nanos_per_second;
constexpr core::Nanos k_day = 86400 * k_s;
// 2026-12-01T00:00:00Z.
constexpr core::Nanos k_dec1 = 1'796'083'200 * k_s;

config::LimitSpec daily(double limit) {
    config::LimitSpec s;
    s.name = "daily";
    s.algorithm = config::Algorithm::quota;
    s.capacity = limit;
    s.period = core::CalendarPeriod::day;
    s.zone = core::find_time_zone("UTC");
    return s;
}

TEST(QuotaCounter, AdmitsUpToTheLimitThenWaitsForTheWindowsEnd) {
    auto spec = daily(10);
    QuotaCounter q;
    auto noon = k_dec1 + 12 * 3600 * k_s;
    q.place(spec, noon);
    EXPECT_EQ(q.window(), (core::CalendarWindow{k_dec1, k_dec1 + k_day}));
    auto v = q.check(7, 10, noon);
    ASSERT_TRUE(v.admitted);
    EXPECT_DOUBLE_EQ(v.remaining, 3);
    EXPECT_EQ(v.until_full, 12 * 3600 * k_s) << "the reset is the window's end";
    q.consume(7);
    v = q.check(4, 10, noon);
    EXPECT_FALSE(v.admitted);
    EXPECT_FALSE(v.never);
    EXPECT_DOUBLE_EQ(v.remaining, 3);
    EXPECT_EQ(v.retry_after, 12 * 3600 * k_s);
    EXPECT_TRUE(q.check(3, 10, noon).admitted) << "exactly the limit passes";
    EXPECT_TRUE(q.check(11, 10, noon).never);
    // At midnight a new window starts at zero.
    q.place(spec, k_dec1 + k_day);
    EXPECT_EQ(q.used(), 0);
    EXPECT_TRUE(q.check(10, 10, k_dec1 + k_day).admitted);
}

TEST(QuotaCounter, SettlementCountsOnlyInItsOwnWindowAndNeverBelowZero) {
    auto spec = daily(1000);
    QuotaCounter q;
    q.place(spec, k_dec1);
    auto today = q.window();
    q.consume(500);
    q.adjust(-450, today);  // reserved 500, used 50
    EXPECT_DOUBLE_EQ(q.used(), 50);
    q.adjust(-1e18, today);
    EXPECT_EQ(q.used(), 0);
    q.adjust(std::nan(""), today);
    q.adjust(INFINITY, today);
    EXPECT_EQ(q.used(), 0) << "a non-finite settlement changes nothing";
    q.consume(100);
    q.place(spec, k_dec1 + k_day);
    q.adjust(300, today);  // yesterday's request settles after midnight
    EXPECT_EQ(q.used(), 0) << "today's count is not charged for yesterday";
}

TEST(QuotaCounter, TopUpsAndResetsAreForTheCurrentWindow) {
    auto spec = daily(10);
    QuotaCounter q;
    q.place(spec, k_dec1);
    q.consume(10);
    EXPECT_FALSE(q.check(5, 10, k_dec1).admitted);
    q.top_up(5);
    auto v = q.check(5, 10, k_dec1);
    EXPECT_TRUE(v.admitted);
    EXPECT_DOUBLE_EQ(v.remaining, 0);
    EXPECT_TRUE(q.check(15, 10, k_dec1).admitted == false && !q.check(15, 10, k_dec1).never);
    q.place(spec, k_dec1 + k_day);
    EXPECT_EQ(q.added(), 0) << "a top-up does not outlive its window";
    q.consume(4);
    q.reset();
    EXPECT_EQ(q.used(), 0);
}

TEST(QuotaCounter, CentsAddUpWithoutRefusingTheLastOne) {
    // 0.1 ten times is 0.9999999999999999 in binary: the tenth dime must still fit a $1 quota.
    auto spec = daily(1);
    QuotaCounter q;
    q.place(spec, k_dec1);
    for (int i = 0; i < 10; ++i) {
        ASSERT_TRUE(q.check(0.1, 1, k_dec1).admitted) << i;
        q.consume(0.1);
    }
    EXPECT_FALSE(q.check(0.01, 1, k_dec1).admitted);
}

TEST(QuotaCounter, AReloadToAnotherPeriodKeepsWhatWasUsed) {
    auto spec = daily(100);
    QuotaCounter q;
    q.place(spec, k_dec1 + k_s);
    q.consume(40);
    auto monthly = spec;
    monthly.period = core::CalendarPeriod::month;
    q.place(monthly, k_dec1 + 2 * k_s);
    EXPECT_EQ(q.used(), 40);
    EXPECT_EQ(q.window().end, 1'798'761'600 * k_s);  // 2027-01-01T00:00:00Z
    // A restored counter (no zone yet) takes its window from the config on first use.
    auto back = QuotaCounter::restored(30, 5, {k_dec1, k_dec1 + k_day});
    back.place(spec, k_dec1 + 3 * k_s);
    EXPECT_EQ(back.used(), 30);
    EXPECT_EQ(back.added(), 5);
    auto late = QuotaCounter::restored(30, 5, {k_dec1, k_dec1 + k_day});
    late.place(spec, k_dec1 + k_day + k_s);
    EXPECT_EQ(late.used(), 0) << "restored after its window ended: a fresh window";
}

}  // namespace
}  // namespace tokengate::limiter
