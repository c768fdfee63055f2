#include <gtest/gtest.h>

#include "tokengate/store/memory_store.hpp"
#include "tokengate/store/state_file.hpp"

namespace tokengate::store {
namespace {

using namespace std::chrono_literals;
using limiter::Charge;

constexpr core::Nanos k_s = core::k_nanos_per_second;
// 2026-11-01T03:00:00Z: 23:00 EDT on Saturday 31 October in New York, an hour before the
// local midnight that starts the 25-hour day of the DST change.
constexpr core::Nanos k_before_ny_midnight = 1'793'502'000 * k_s;

config::LimitSpec quota(double limit, config::Unit unit, const char* zone = "America/New_York") {
    config::LimitSpec s;
    s.name = "daily";
    s.algorithm = config::Algorithm::quota;
    s.unit = unit;
    s.capacity = limit;
    s.zone = core::find_time_zone(zone);
    return s;
}

Charge charge(const config::LimitSpec& s, double amount) {
    return Charge{&s, config::Level::tenant, "tenant:daily:acme", amount, "acme", {}};
}

TEST(QuotaStore, RefusesUntilLocalMidnightThenStartsAfresh) {
    core::ManualClock clock(k_s, k_before_ny_midnight);
    MemoryStore store(clock);
    auto spec = quota(3, config::Unit::requests);
    std::vector one{charge(spec, 1)};
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(store.decide(one).allowed) << i;
    auto refused = store.decide(one);
    ASSERT_FALSE(refused.allowed);
    EXPECT_EQ(refused.retry_after, 3600 * k_s) << "until midnight in New York, not in UTC";
    EXPECT_EQ(refused.statuses[0].window.end, k_before_ny_midnight + 3600 * k_s);
    clock.advance(3600s);
    auto next_day = store.decide(one);
    ASSERT_TRUE(next_day.allowed);
    EXPECT_EQ(next_day.statuses[0].window.end - next_day.statuses[0].window.start, 25 * 3600 * k_s);
    EXPECT_DOUBLE_EQ(next_day.statuses[0].verdict.remaining, 2);
}

TEST(QuotaStore, SettlesTokensInTheWindowTheyWereReservedIn) {
    core::ManualClock clock(k_s, k_before_ny_midnight);
    MemoryStore store(clock);
    auto spec = quota(1000, config::Unit::tokens);
    std::vector big{charge(spec, 800)};
    auto d = store.decide(big);
    ASSERT_TRUE(d.allowed);
    EXPECT_FALSE(store.decide(big).allowed);
    config::Amounts used;
    used.tokens = 120;  // the upstream said 120 tokens
    store.settle(limiter::charged(big, d), used, "");
    auto peeked = store.peek(std::vector{charge(spec, 0)});
    EXPECT_DOUBLE_EQ(peeked.statuses[0].verdict.remaining, 880);
    EXPECT_TRUE(store.decide(big).allowed);
    // A request reserved before midnight settles after it: today's count is untouched.
    auto late = store.decide(std::vector{charge(spec, 50)});
    ASSERT_TRUE(late.allowed);
    clock.advance(2h);
    used.tokens = 50000;
    store.settle(limiter::charged(std::vector{charge(spec, 50)}, late), used, "");
    EXPECT_DOUBLE_EQ(store.peek(std::vector{charge(spec, 0)}).statuses[0].verdict.remaining, 1000);
}

TEST(QuotaStore, AllOrNothingWithTheOtherLimits) {
    core::ManualClock clock(k_s, k_before_ny_midnight);
    MemoryStore store(clock);
    auto daily = quota(10, config::Unit::requests);
    config::LimitSpec burst;
    burst.name = "burst";
    burst.capacity = 2;
    burst.rate_per_s = 0.001;
    std::vector both{charge(daily, 1), Charge{&burst, config::Level::tenant, "tenant:burst:acme", 1, "acme", {}}};
    EXPECT_TRUE(store.decide(both).allowed);
    EXPECT_TRUE(store.decide(both).allowed);
    EXPECT_FALSE(store.decide(both).allowed);  // the burst refuses: the quota is not charged
    auto q = store.quota_admin(both[0], 0, false);
    EXPECT_EQ(q.used, 2);
}

TEST(QuotaStore, TopUpResetAndSnapshotAcrossARestart) {
    core::ManualClock clock(k_s, k_before_ny_midnight);
    MemoryStore store(clock);
    auto spec = quota(5, config::Unit::requests);
    std::vector one{charge(spec, 1)};
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(store.decide(one).allowed);
    ASSERT_FALSE(store.decide(one).allowed);
    auto topped = store.quota_admin(one[0], 2, false);
    EXPECT_EQ(topped.used, 5);
    EXPECT_EQ(topped.added, 2);
    EXPECT_TRUE(store.decide(one).allowed);

    // A restart: the snapshot keeps used and top-ups; the new process refuses as the old did.
    auto bytes = encode_state({clock.unix_now(), store.save()});
    MemoryStore after(clock);
    EXPECT_EQ(after.restore(decode_state(bytes).levels, 10 * k_s), 1u);
    EXPECT_TRUE(after.decide(one).allowed);  // the 7th of 5 + 2
    EXPECT_FALSE(after.decide(one).allowed);
    // Restored after midnight: that window is over, nothing comes back.
    clock.advance(3600s);
    MemoryStore next_day(clock);
    EXPECT_EQ(next_day.restore(decode_state(bytes).levels, 3600 * k_s), 0u);

    auto reset = after.quota_admin(one[0], 0, true);
    EXPECT_EQ(reset.used, 0);
    EXPECT_EQ(reset.added, 0);
}

TEST(QuotaStore, StandingInForASharedStoreEachReplicaHoldsItsShare) {
    core::ManualClock clock(k_s, k_before_ny_midnight);
    MemoryStore store(clock);
    store.set_share_divisor(2);  // Redis is down, two replicas are alive
    auto spec = quota(4, config::Unit::requests);
    std::vector one{charge(spec, 1)};
    EXPECT_TRUE(store.decide(one).allowed);
    EXPECT_TRUE(store.decide(one).allowed);
    EXPECT_FALSE(store.decide(one).allowed) << "half of 4 in this replica";
}

TEST(QuotaStore, AnIdleQuotaIsEvictedAndABusyOneIsNot) {
    core::ManualClock clock(k_s, k_before_ny_midnight);
    MemoryStore store(clock);
    auto spec = quota(5, config::Unit::requests);
    ASSERT_TRUE(store.peek(std::vector{charge(spec, 1)}).allowed);
    EXPECT_EQ(store.size(), 0u) << "a peek creates nothing";
    ASSERT_TRUE(store.decide(std::vector{charge(spec, 1)}).allowed);
    EXPECT_EQ(store.evict_idle(), 0u) << "a quota with usage is kept";
    clock.advance(3600s);
    EXPECT_EQ(store.evict_idle(), 1u) << "its window over, it is as good as none";
}

}  // namespace
}  // namespace tokengate::store
