#include "tokengate/cost/output_history.hpp"

#include <gtest/gtest.h>

namespace tokengate::cost {
namespace {

OutputHistory::Settings small(std::uint32_t window = 10, std::uint32_t min_samples = 3, double quantile = 0.9) {
    return {window, quantile, min_samples, 100'000};
}

TEST(OutputHistory, ASampleIsNeverReadBackLowerAndAtMostFourPercentHigher) {
    for (std::uint64_t t :
         {0ull, 1ull, 2ull, 3ull, 15ull, 16ull, 40ull, 199ull, 1000ull, 4096ull, 50'000ull, 62'755ull}) {
        auto back = OutputHistory::decode(OutputHistory::encode(t));
        EXPECT_GE(back, t);
        EXPECT_LE(static_cast<double>(back), static_cast<double>(t + 1) * 1.0443) << t;
    }
    EXPECT_EQ(OutputHistory::encode(1'000'000), 255) << "saturates";
}

TEST(OutputHistory, NothingIsTrustedBeforeMinSamples) {
    OutputHistory h;
    auto s = small();
    h.record("acme", "m", 40, s);
    h.record("acme", "m", 40, s);
    auto e = h.estimate("acme", "m", s);
    EXPECT_EQ(e.samples, 2u);
    EXPECT_FALSE(e.tokens);
    h.record("acme", "m", 40, s);
    e = h.estimate("acme", "m", s);
    ASSERT_TRUE(e.tokens);
    EXPECT_EQ(*e.tokens, OutputHistory::decode(OutputHistory::encode(40)));
    EXPECT_FALSE(h.estimate("acme", "other-model", s).tokens);
    EXPECT_FALSE(h.estimate("other-tenant", "m", s).tokens);
}

TEST(OutputHistory, TheQuantileIsTheNearestRankOfTheWindow) {
    OutputHistory h;
    auto s = small(10, 1, 0.9);
    for (std::uint64_t t = 1; t <= 10; ++t) h.record("t", "m", t * 100, s);
    // 90% of ten samples: the 9th smallest.
    EXPECT_EQ(*h.estimate("t", "m", s).tokens, OutputHistory::decode(OutputHistory::encode(900)));
    s.quantile = 1.0;
    h.record("t", "m", 50, s);  // the 100 falls out of the window
    EXPECT_EQ(*h.estimate("t", "m", s).tokens, OutputHistory::decode(OutputHistory::encode(1000)));
}

TEST(OutputHistory, AJumpInUsageIsFollowedWithinTheWindow) {
    OutputHistory h;
    auto s = small(20, 5, 0.95);
    for (int i = 0; i < 20; ++i) h.record("t", "m", 40, s);
    EXPECT_LT(*h.estimate("t", "m", s).tokens, 45u);
    int settled = 0;
    while (*h.estimate("t", "m", s).tokens < 400 && settled < 100) {
        h.record("t", "m", 400, s);
        ++settled;
    }
    // p95 of 20: the 19th smallest, so it moves once 2 of the 20 are the new usage.
    EXPECT_EQ(settled, 2);
}

TEST(OutputHistory, AReloadThatChangesTheWindowKeepsTheNewestSamples) {
    OutputHistory h;
    auto s = small(10, 1, 1.0);
    for (std::uint64_t t = 1; t <= 10; ++t) h.record("t", "m", t, s);
    s.window = 3;
    h.record("t", "m", 1, s);  // the window is now 9, 10, 1
    EXPECT_EQ(h.estimate("t", "m", s).samples, 3u);
    EXPECT_EQ(*h.estimate("t", "m", s).tokens, OutputHistory::decode(OutputHistory::encode(10)));
}

TEST(OutputHistory, SeriesAreBoundedTheLeastRecentGoFirst) {
    OutputHistory h;
    auto s = small(4, 1);
    s.max_series = 64 * 2;  // two a shard
    for (int i = 0; i < 10'000; ++i) h.record("tenant" + std::to_string(i), "m", 10, s);
    EXPECT_LE(h.series(), 128u);
    EXPECT_TRUE(h.estimate("tenant9999", "m", s).tokens) << "the newest is kept";
    EXPECT_FALSE(h.estimate("tenant0", "m", s).tokens) << "the oldest went";
}

TEST(OutputHistory, AHugeModelNameIsNotLearned) {
    OutputHistory h;
    auto s = small(4, 1);
    std::string model(OutputHistory::k_max_model + 1, 'm');
    h.record("t", model, 10, s);
    EXPECT_EQ(h.series(), 0u);
    EXPECT_FALSE(h.estimate("t", model, s).tokens);
}

}  // namespace
}  // namespace tokengate::cost
