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

using config::Priority;

TEST(ShapeQueue, CriticalStartsBeforeStandardAndStandardBeforeSheddable) {
    core::ManualClock clock;
    ShapeQueue q(shape(100, 10, 100'000 * k_ms));
    auto origin = clock.now();
    q.admit("x", 1, clock.now());  // starts at once; the next slot is at 100 ms
    std::vector<std::uint64_t> shed, standard, critical, all;
    for (int i = 0; i < 3; ++i) shed.push_back(q.admit("free", 1, clock.now(), Priority::sheddable).ticket);
    for (int i = 0; i < 3; ++i) standard.push_back(q.admit("pro", 1, clock.now(), Priority::standard).ticket);
    auto first_critical = q.admit("bank", 1, clock.now(), Priority::critical);
    EXPECT_EQ(first_critical.start_at - origin, 100 * k_ms) << "admitted last, it is first in line";
    critical.push_back(first_critical.ticket);
    for (int i = 0; i < 2; ++i) critical.push_back(q.admit("bank", 1, clock.now(), Priority::critical).ticket);
    for (auto* v : {&shed, &standard, &critical}) all.insert(all.end(), v->begin(), v->end());
    auto started = run_queue(q, clock, all, origin);
    ASSERT_EQ(started.size(), 9u);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(started[critical[i]], 100 * (i + 1)) << "critical " << i;
        EXPECT_EQ(started[standard[i]], 100 * (i + 4)) << "standard " << i;
        EXPECT_EQ(started[shed[i]], 100 * (i + 7)) << "sheddable " << i;
    }
}

TEST(ShapeQueue, FairQueueingWorksWithinEachClass) {
    core::ManualClock clock;
    ShapeQueue q(shape(100, 10, 100'000 * k_ms, /*fair=*/true));
    auto origin = clock.now();
    q.admit("x", 1, clock.now());
    auto low = q.admit("free", 1, clock.now(), Priority::sheddable).ticket;
    std::vector<std::uint64_t> a, b;
    for (int i = 0; i < 3; ++i) a.push_back(q.admit("a", 1, clock.now(), Priority::critical).ticket);
    b.push_back(q.admit("b", 1, clock.now(), Priority::critical).ticket);
    auto started = run_queue(q, clock, {low, a[0], a[1], a[2], b[0]}, origin);
    EXPECT_EQ(started[a[0]], 100);
    EXPECT_EQ(started[b[0]], 200) << "b's one request is not behind a's burst";
    EXPECT_EQ(started[a[1]], 300);
    EXPECT_EQ(started[a[2]], 400);
    EXPECT_EQ(started[low], 500);
}

TEST(ShapeQueue, AFullQueueDisplacesTheNewestRequestOfTheLowestClassBelow) {
    core::ManualClock clock;
    ShapeQueue q(shape(3, 1, 100'000 * k_ms));
    q.admit("x", 1, clock.now());  // starts at once
    auto s1 = q.admit("free", 1, clock.now(), Priority::sheddable).ticket;
    auto s2 = q.admit("free", 1, clock.now(), Priority::sheddable).ticket;
    auto p1 = q.admit("pro", 1, clock.now(), Priority::standard).ticket;
    ASSERT_EQ(q.waiting(), 3u);
    EXPECT_FALSE(q.admit("free", 1, clock.now(), Priority::sheddable).verdict.admitted) << "full, nobody below";
    int s2_woken = 0;
    q.set_waker(s2, [&] { ++s2_woken; });
    auto c1 = q.admit("bank", 1, clock.now(), Priority::critical);
    ASSERT_TRUE(c1.verdict.admitted);
    EXPECT_EQ(c1.displaces, s2) << "the newest sheddable one goes first";
    EXPECT_EQ(s2_woken, 1) << "its holder is told at once";
    EXPECT_EQ(q.waiting(), 3u);
    EXPECT_TRUE(q.holds_tickets());
    auto told = q.try_start(s2, clock.now());
    EXPECT_TRUE(told.displaced);
    EXPECT_FALSE(told.started);
    EXPECT_TRUE(q.try_start(s2, clock.now()).unknown) << "told once";

    EXPECT_EQ(q.admit("bank", 1, clock.now(), Priority::critical).displaces, s1);
    auto c3 = q.admit("bank", 1, clock.now(), Priority::critical);
    EXPECT_EQ(c3.displaces, p1) << "no sheddable one left: the newest standard one";
    auto refused = q.admit("bank", 1, clock.now(), Priority::critical);
    EXPECT_FALSE(refused.verdict.admitted) << "a queue full of its own class refuses it";
    EXPECT_GT(refused.verdict.retry_after, 0);
    EXPECT_EQ(q.waiting(), 3u);
    EXPECT_TRUE(q.try_start(s1, clock.now()).displaced);
    EXPECT_TRUE(q.try_start(p1, clock.now()).displaced);
    EXPECT_EQ(q.try_start(c1.ticket, clock.now()).wait_until, clock.now() + 1000 * k_ms);
}

TEST(ShapeQueue, AWaitingRequestPushedPastMaxWaitIsDisplaced) {
    core::ManualClock clock;
    ShapeQueue q(shape(100, 10, 1000 * k_ms));
    q.admit("x", 1, clock.now());  // the next slot is at 100 ms
    std::vector<std::uint64_t> shed;
    for (int i = 0; i < 5; ++i) shed.push_back(q.admit("free", 1, clock.now(), Priority::sheddable).ticket);
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(q.admit("bank", 1, clock.now(), Priority::critical).verdict.admitted) << i;
    // The critical ones take 100–800 ms; the sheddable ones move to 900–1300 ms, and max_wait is
    // 1 s (with a tenth of it, and 50 ms, allowed for drift).
    EXPECT_EQ(q.try_start(shed[0], clock.now()).wait_until - clock.now(), 900 * k_ms);
    EXPECT_EQ(q.try_start(shed[2], clock.now()).wait_until - clock.now(), 1100 * k_ms);
    EXPECT_TRUE(q.try_start(shed[3], clock.now()).displaced) << "1200 ms is past 1 s + 150 ms";
    EXPECT_TRUE(q.try_start(shed[4], clock.now()).displaced) << "it moved up to 1200 ms, still too late";
    EXPECT_EQ(q.waiting(), 11u);
}

TEST(ShapeQueue, ALowerRatePushesWaitersPastMaxWaitToo) {
    core::ManualClock clock;
    auto spec = shape(100, 10, 1000 * k_ms);
    ShapeQueue q(spec);
    q.admit("x", 1, clock.now());
    std::vector<std::uint64_t> t;
    for (int i = 0; i < 9; ++i) t.push_back(q.admit("a", 1, clock.now()).ticket);  // 100–900 ms
    spec.rate_per_s = 5;  // an adaptive rate halved: 200 ms slots after the one running
    q.reconfigure(spec);
    EXPECT_EQ(q.try_start(t[4], clock.now()).wait_until - clock.now(), 900 * k_ms);
    EXPECT_EQ(q.try_start(t[5], clock.now()).wait_until - clock.now(), 1100 * k_ms);
    EXPECT_TRUE(q.try_start(t[6], clock.now()).displaced) << "1300 ms";
}

}  // namespace
}  // namespace tokengate::limiter
