// The ledger of what answers in flight may still be charged (SPEC §17): holds add up per
// bucket, go away with the answer, and two threads never both count on the same room.
#include "tokengate/limiter/exposure.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tokengate::limiter {
namespace {

Exposure::Hold take_what_is_free(Exposure& e, const std::vector<std::string>& keys, std::vector<double> remaining,
                                 double want) {
    return e.hold_within(keys, remaining, [&](double free, std::size_t) { return free >= want ? want : 0.0; });
}

TEST(Exposure, HoldsAddUpPerBucketAndLeaveWithTheirAnswer) {
    Exposure e;
    auto a = take_what_is_free(e, {"t:x", "g:y"}, {100, 1000}, 40);
    auto b = take_what_is_free(e, {"t:x"}, {100}, 40);
    EXPECT_EQ(e.of("t:x"), 80);
    EXPECT_EQ(e.of("g:y"), 40);
    auto c = take_what_is_free(e, {"t:x", "g:y"}, {100, 1000}, 40);
    EXPECT_EQ(c.amount(), 0) << "100 - 80 held leaves 20: the tightest bucket decides";
    Exposure::Hold moved = std::move(a);
    a.release();  // the moved-from hold gives nothing back
    EXPECT_EQ(e.of("t:x"), 80);
    moved.release();
    moved.release();  // once
    EXPECT_EQ(e.of("t:x"), 40);
    EXPECT_EQ(e.of("g:y"), 0);
    { auto gone = std::move(b); }
    EXPECT_EQ(e.of("t:x"), 0);
}

TEST(Exposure, ConcurrentAnswersNeverHoldMoreThanTheRoom) {
    Exposure e;
    std::atomic<int> granted{0};
    std::vector<Exposure::Hold> holds(64);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 8; ++i) {
                auto h = take_what_is_free(e, {"t:x"}, {1000}, 100);
                if (h.amount() > 0) ++granted;
                holds[t * 8 + i] = std::move(h);
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(granted.load(), 10);
    EXPECT_EQ(e.of("t:x"), 1000);
    holds.clear();
    EXPECT_EQ(e.of("t:x"), 0);
}

}  // namespace
}  // namespace tokengate::limiter
