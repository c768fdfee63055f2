#include "tokengate/core/inline_string.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace tokengate::core {
namespace {

TEST(InlineString, AppendsWithinItsBufferAndSpillsPastIt) {
    InlineString<8> s("tenant");
    s.append(":a");
    EXPECT_EQ(s, "tenant:a");
    EXPECT_EQ(s.size(), 8u);
    s.append(":acme");  // 13 bytes: past the buffer, the whole string moves to the heap
    EXPECT_EQ(s, "tenant:a:acme");
    s.append(std::string(300, 'x'));
    EXPECT_EQ(s.size(), 313u);
    EXPECT_EQ(s.view().substr(0, 13), "tenant:a:acme");
    s = "ip";
    EXPECT_EQ(s, "ip") << "assigning a short string after a spill";
}

TEST(InlineString, CopiesAndMovesKeepTheText) {
    InlineString<8> small("abc"), spilled(std::string(40, 'k'));
    auto small_copy = small;
    auto spilled_copy = spilled;
    EXPECT_EQ(small_copy, "abc");
    EXPECT_EQ(spilled_copy, std::string(40, 'k'));
    auto moved = std::move(spilled);
    EXPECT_EQ(moved, std::string(40, 'k'));
    small_copy = moved;
    EXPECT_EQ(small_copy, moved);
    moved = std::move(small);
    EXPECT_EQ(moved, "abc");
    EXPECT_EQ(moved.find('c'), 2u);
    EXPECT_EQ(moved.find("zz"), std::string::npos);
}

}  // namespace
}  // namespace tokengate::core
