// SPEC §21's bound on end users a tenant: the least recently seen goes first.
#include "tokengate/auth/subjects.hpp"

#include <gtest/gtest.h>

namespace tokengate::auth {
namespace {

TEST(SubjectDirectory, TheLeastRecentlySeenIsPushedOutPerTenant) {
    SubjectDirectory d;
    EXPECT_EQ(d.seen("acme", "a", 2), std::nullopt);
    EXPECT_EQ(d.seen("acme", "b", 2), std::nullopt);
    EXPECT_EQ(d.seen("acme", "a", 2), std::nullopt) << "seen again: now the most recent";
    EXPECT_EQ(d.seen("acme", "c", 2), "b");
    EXPECT_EQ(d.seen("other", "b", 2), std::nullopt) << "another tenant's subjects are its own";
    EXPECT_EQ(d.kept("acme"), 2u);
    EXPECT_EQ(d.seen("acme", "b", 2), "a");
    EXPECT_EQ(d.kept("other"), 1u);
    EXPECT_EQ(d.kept("nobody"), 0u);
}

TEST(SubjectDirectory, ManySubjectsStayWithinTheBound) {
    SubjectDirectory d;
    std::size_t pushed = 0;
    for (int i = 0; i < 50000; ++i) pushed += d.seen("acme", "user-" + std::to_string(i), 1000).has_value();
    EXPECT_EQ(d.kept("acme"), 1000u);
    EXPECT_EQ(pushed, 49000u);
    EXPECT_EQ(d.seen("acme", "user-49999", 1000), std::nullopt) << "the newest is kept";
    EXPECT_EQ(d.seen("acme", "user-0", 1000), "user-49000") << "the oldest kept goes first";
}

}  // namespace
}  // namespace tokengate::auth
