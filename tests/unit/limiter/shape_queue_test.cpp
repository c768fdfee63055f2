#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "tokengate/limiter/shape_queue.hpp"

namespace tokengate::limiter {
namespace {

using namespace std::chrono_literals;
constexpr core::Nanos k_ms = 1'000'000;

config::LimitSpec shape(double capacity, double rate, core::Nanos max_wait = 0, bool fair = false,
                        config::Unit unit = config::Unit::requests) {
    config::LimitSpec s;
    s.name = "gpu";
    s.algorithm = config::Algorithm::leaky_bucket;
    s.mode = config::LeakyMode::shape;
    s.capacity = capacity;
    s.rate_per_s = rate;
    s.max_wait = max_wait;
    s.fair = fair;
    s.unit = unit;
    return s;
}

/// Moves the manual clock in 1 ms steps, letting every waiting ticket ask to start, and
/// returns when each ticket started (ms after `origin`).
std::map<std::uint64_t, core::Nanos> run_queue(ShapeQueue& q, core::ManualClock& clock,
                                               std::vector<std::uint64_t> tickets, core::Nanos origin) {
    std::map<std::uint64_t, core::Nanos> started;
    for (int step = 0; step < 20000 && started.size() < tickets.size(); ++step) {
        for (auto t : tickets)
            if (!started.count(t) && q.try_start(t, clock.now()).started) started[t] = (clock.now() - origin) / k_ms;
        clock.advance(1ms);
    }
    return started;
}

TEST(ShapeQueue, ReleasesTenQueuedRequestsExactly200msApart) {
    core::ManualClock clock;
    ShapeQueue q(shape(10, 5, 10'000 * k_ms));
    auto origin = clock.now();
    auto first = q.admit("t", 1, clock.now());
    ASSERT_TRUE(first.verdict.admitted);
    EXPECT_EQ(first.ticket, 0u) << "an empty queue starts the first request at once";
    std::vector<std::uint64_t> tickets;
    for (int i = 0; i < 10; ++i) {
        auto a = q.admit("t", 1, clock.now());
        ASSERT_TRUE(a.verdict.admitted) << i;
        ASSERT_NE(a.ticket, 0u);
        EXPECT_EQ(a.start_at - origin, (i + 1) * 200 * k_ms);
        tickets.push_back(a.ticket);
    }
    EXPECT_EQ(q.waiting(), 10u);
    auto started = run_queue(q, clock, tickets, origin);
    ASSERT_EQ(started.size(), 10u);
    for (std::size_t i = 0; i < tickets.size(); ++i)
        EXPECT_EQ(started[tickets[i]], static_cast<core::Nanos>(200 * (i + 1))) << "ticket " << i;
    EXPECT_EQ(q.waiting(), 0u);
}

TEST(ShapeQueue, RefusesWhenFullAndBeyondMaxWait) {
    core::ManualClock clock;
    ShapeQueue full(shape(2, 1, 100'000 * k_ms));
    EXPECT_TRUE(full.admit("t", 1, clock.now()).verdict.admitted);  // starts now
    EXPECT_TRUE(full.admit("t", 1, clock.now()).verdict.admitted);  // waits 1 s
    EXPECT_TRUE(full.admit("t", 1, clock.now()).verdict.admitted);  // waits 2 s
    auto refused = full.admit("t", 1, clock.now());
    EXPECT_FALSE(refused.verdict.admitted) << "the queue holds its capacity";
    EXPECT_EQ(refused.verdict.retry_after, 1000 * k_ms);

    ShapeQueue short_wait(shape(100, 1, 1500 * k_ms));
    EXPECT_TRUE(short_wait.admit("t", 1, clock.now()).verdict.admitted);
    EXPECT_TRUE(short_wait.admit("t", 1, clock.now()).verdict.admitted);  // starts at +1 s
    auto late = short_wait.check("t", 1, clock.now());                    // would start at +2 s
    EXPECT_FALSE(late.verdict.admitted);
    EXPECT_EQ(late.verdict.retry_after, 500 * k_ms);
}

TEST(ShapeQueue, CancelledRequestsGiveTheirSlotBack) {
    core::ManualClock clock;
    ShapeQueue q(shape(10, 5, 10'000 * k_ms));
    auto origin = clock.now();
    q.admit("t", 1, clock.now());
    auto a = q.admit("t", 1, clock.now()).ticket;  // 200 ms
    auto b = q.admit("t", 1, clock.now()).ticket;  // 400 ms
    auto c = q.admit("t", 1, clock.now()).ticket;  // 600 ms
    int woken = 0;
    q.set_waker(c, [&] { ++woken; });
    q.cancel(b);
    EXPECT_EQ(woken, 1) << "those behind a leaver are told to recompute";
    EXPECT_EQ(q.waiting(), 2u);
    auto started = run_queue(q, clock, {a, c}, origin);
    EXPECT_EQ(started[a], 200);
    EXPECT_EQ(started[c], 400) << "c moved up into b's slot";
    EXPECT_TRUE(q.try_start(b, clock.now()).unknown);
}

TEST(ShapeQueue, ReleaseWakesTheNextHead) {
    core::ManualClock clock;
    ShapeQueue q(shape(10, 10, 10'000 * k_ms));
    q.admit("t", 1, clock.now());
    auto a = q.admit("t", 1, clock.now()).ticket;
    auto b = q.admit("t", 1, clock.now()).ticket;
    int b_woken = 0;
    q.set_waker(b, [&] { ++b_woken; });
    clock.advance(100ms);
    ASSERT_TRUE(q.try_start(a, clock.now()).started);
    EXPECT_EQ(b_woken, 1);
    auto wait = q.try_start(b, clock.now());
    EXPECT_FALSE(wait.started);
    EXPECT_EQ(wait.wait_until, clock.now() + 100 * k_ms);
}

TEST(ShapeQueue, FairQueueingAlternatesTenantsWhenOneFloods) {
    core::ManualClock clock;
    ShapeQueue q(shape(100, 10, 100'000 * k_ms, /*fair=*/true));
    auto origin = clock.now();
    q.admit("flood", 1, clock.now());  // starts at once
    std::vector<std::uint64_t> flood, polite, all;
    for (int i = 0; i < 5; ++i) flood.push_back(q.admit("flood", 1, clock.now()).ticket);
    for (int i = 0; i < 3; ++i) polite.push_back(q.admit("polite", 1, clock.now()).ticket);
    all = flood;
    all.insert(all.end(), polite.begin(), polite.end());
    auto started = run_queue(q, clock, all, origin);
    ASSERT_EQ(started.size(), 8u);
    // Slots are 100 ms apart: flood, polite, flood, polite, flood, polite, flood, flood.
    EXPECT_EQ(started[flood[0]], 100);
    EXPECT_EQ(started[polite[0]], 200);
    EXPECT_EQ(started[flood[1]], 300);
    EXPECT_EQ(started[polite[1]], 400);
    EXPECT_EQ(started[flood[2]], 500);
    EXPECT_EQ(started[polite[2]], 600);
    EXPECT_EQ(started[flood[3]], 700);
    EXPECT_EQ(started[flood[4]], 800);
}

TEST(ShapeQueue, FifoWithoutFairness) {
    core::ManualClock clock;
    ShapeQueue q(shape(100, 10, 100'000 * k_ms));
    auto origin = clock.now();
    q.admit("a", 1, clock.now());
    auto a1 = q.admit("a", 1, clock.now()).ticket;
    auto a2 = q.admit("a", 1, clock.now()).ticket;
    auto b1 = q.admit("b", 1, clock.now()).ticket;
    auto started = run_queue(q, clock, {a1, a2, b1}, origin);
    EXPECT_EQ(started[a1], 100);
    EXPECT_EQ(started[a2], 200);
    EXPECT_EQ(started[b1], 300);
}

TEST(ShapeQueue, CostUnitsOccupyCostOverRate) {
    core::ManualClock clock;
    ShapeQueue q(shape(10, 100, 100'000 * k_ms, false, config::Unit::cost));
    auto origin = clock.now();
    q.admit("t", 50, clock.now());           // starts now, occupies 500 ms
    auto a = q.admit("t", 20, clock.now());  // starts at 500 ms, occupies 200 ms
    auto b = q.admit("t", 1, clock.now());   // starts at 700 ms
    EXPECT_EQ(a.start_at - origin, 500 * k_ms);
    EXPECT_EQ(b.start_at - origin, 700 * k_ms);
    EXPECT_EQ(q.check("t", 1000, clock.now()).start_at - origin, 710 * k_ms) << "b occupies 10 ms";
}

TEST(ShapeQueue, BecomesIdleOnceDrained) {
    core::ManualClock clock;
    ShapeQueue q(shape(10, 10, 10'000 * k_ms));
    q.admit("t", 1, clock.now());
    EXPECT_FALSE(q.idle(clock.now()));
    clock.advance(100ms);
    EXPECT_TRUE(q.idle(clock.now()));
}

}  // namespace
}  // namespace tokengate::limiter
