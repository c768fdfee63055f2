// The replica's side of leased limits (SPEC §18): what is leased, all or nothing across leases,
// renewal ahead of depletion, settlement into the lease, and what goes back when it ends.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "tokengate/core/clock.hpp"
#include "tokengate/redis/lease_book.hpp"

namespace tokengate::redis {
namespace {

using namespace std::chrono_literals;
using config::Algorithm;
using config::Level;
using limiter::Charge;

config::LimitSpec spec(Algorithm algorithm, double capacity) {
    config::LimitSpec s;
    s.name = "l";
    s.algorithm = algorithm;
    s.capacity = capacity;
    s.rate_per_s = algorithm == Algorithm::concurrency ? 0 : 10;
    s.unit = config::Unit::cost;
    return s;
}

Charge charge(const config::LimitSpec& s, Level level, const char* key, double amount) {
    return Charge{&s, level, key, amount, {}};
}

TEST(LeaseBook, LeasesTheRateLimitsSharedByManyTenantsOnly) {
    auto bucket = spec(Algorithm::token_bucket, 100);
    auto slots = spec(Algorithm::concurrency, 10);
    auto quota = spec(Algorithm::quota, 100);
    EXPECT_FALSE(LeaseBook::leased(charge(bucket, Level::tenant, "tenant:l:a", 1)));
    EXPECT_TRUE(LeaseBook::leased(charge(bucket, Level::global, "global:l:*", 1)));
    EXPECT_TRUE(LeaseBook::leased(charge(bucket, Level::route, "route:l:/v1", 1)));
    EXPECT_TRUE(LeaseBook::leased(charge(bucket, Level::ip, "ip:l:10.0.0.1", 1)));
    EXPECT_FALSE(LeaseBook::leased(charge(slots, Level::global, "global:s:*", 1)));
    EXPECT_FALSE(LeaseBook::leased(charge(quota, Level::global, "global:q:*", 1)));
}

TEST(LeaseBook, TakesFromEveryLeaseOrFromNone) {
    core::ManualClock clock;
    LeaseBook book(0.05, 200'000'000, clock);
    auto big = spec(Algorithm::token_bucket, 1000), small = spec(Algorithm::token_bucket, 100);
    auto a = charge(big, Level::global, "global:big:*", 30), b = charge(small, Level::route, "route:small:/", 4);
    EXPECT_EQ(book.lease_size(a), 50);  // 5% of 1000
    EXPECT_EQ(book.lease_size(b), 5);
    const Charge* both[] = {&a, &b};
    EXPECT_EQ(book.take(both), 0u) << "nothing leased yet";
    book.granted(a, 50, 950);
    EXPECT_EQ(book.take(both), 1u);
    book.granted(b, 5, 95);
    EXPECT_EQ(book.take(both), std::nullopt);
    // 20 and 1 left: a second request finds a short, and takes nothing from b either.
    EXPECT_EQ(book.take(both), 0u);
    EXPECT_NEAR(book.held(), 21, 1e-9);
    book.give_back(both);  // the tenant's decision in Redis refused the first
    EXPECT_NEAR(book.held(), 55, 1e-9);
}

TEST(LeaseBook, RenewsBelowHalfItsSizeOnceAtATime) {
    core::ManualClock clock;
    LeaseBook book(0.1, 200'000'000, clock);
    auto s = spec(Algorithm::token_bucket, 100);
    auto c = charge(s, Level::global, "global:l:*", 3);
    const Charge* one[] = {&c};
    book.granted(c, 10, 90);
    ASSERT_EQ(book.take(one), std::nullopt);  // 7 left of 10
    EXPECT_TRUE(book.due(one).empty());
    ASSERT_EQ(book.take(one), std::nullopt);  // 4 left: below half
    auto due = book.due(one);
    ASSERT_EQ(due.size(), 1u);
    EXPECT_EQ(due[0].charge.amount, 10);
    EXPECT_TRUE(book.due(one).empty()) << "one renewal on its way";
    EXPECT_FALSE(book.start_renewal(c));
    book.granted(c, 10, 80);
    EXPECT_NEAR(book.held(), 14, 1e-9);
    EXPECT_TRUE(book.start_renewal(c));
    book.granted(c, 0, 0);  // refused: the shared bucket is empty
    EXPECT_NEAR(book.held(), 14, 1e-9);
}

TEST(LeaseBook, SettlementsMoveTheLeaseAndWhatIsLeftGoesBackWhenItEnds) {
    core::ManualClock clock;
    LeaseBook book(0.1, 200'000'000, clock);
    auto s = spec(Algorithm::token_bucket, 100);
    auto used = charge(s, Level::global, "global:a:*", 6), over = charge(s, Level::ip, "ip:a:10.0.0.1", 6);
    const Charge* first[] = {&used};
    const Charge* second[] = {&over};
    book.granted(used, 10, 90);
    book.granted(over, 10, 90);
    ASSERT_EQ(book.take(first), std::nullopt);
    ASSERT_EQ(book.take(second), std::nullopt);
    book.settle(used, -4);  // used 2 of the 6 it took
    book.settle(over, 9);   // used 15: past the lease, a debt
    EXPECT_TRUE(book.expire(false).empty()) << "used just now";
    clock.advance(199ms);
    EXPECT_TRUE(book.expire(false).empty());
    clock.advance(1ms);
    auto back = book.expire(false);
    ASSERT_EQ(back.size(), 2u);
    std::map<std::string, double> amounts;
    for (const auto& u : back) amounts[std::string(u.charge.key.view())] = u.charge.amount;
    EXPECT_NEAR(amounts["global:a:*"], 8, 1e-9);
    EXPECT_NEAR(amounts["ip:a:10.0.0.1"], -5, 1e-9) << "the debt is charged to the shared bucket";
    EXPECT_EQ(book.held(), 0);
    // At shutdown everything goes, used or not.
    book.granted(used, 10, 80);
    EXPECT_EQ(book.expire(true).size(), 1u);
    // Nonsense from the wire changes nothing.
    book.granted(used, std::nan(""), std::nan(""));
    book.settle(used, std::numeric_limits<double>::infinity());
    EXPECT_EQ(book.held(), 0);
}

TEST(LeaseBook, AVerdictShowsTheLeaseAndTheSharedBucketAsLastSeen) {
    core::ManualClock clock;
    LeaseBook book(0.1, 200'000'000, clock);
    auto s = spec(Algorithm::token_bucket, 100);
    auto c = charge(s, Level::global, "global:l:*", 30);
    book.granted(c, 10, 5);
    auto refused = book.verdict(c, false);
    EXPECT_FALSE(refused.admitted);
    EXPECT_NEAR(refused.remaining, 15, 1e-9);
    EXPECT_EQ(refused.retry_after, 1'500'000'000);  // 15 more at 10/s
    auto never = charge(s, Level::global, "global:l:*", 101);
    EXPECT_EQ(book.verdict(never, false).retry_after, -1);
}

}  // namespace
}  // namespace tokengate::redis
