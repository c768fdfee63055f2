#include "tokengate/core/recycled.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace tokengate::core {
namespace {

// Under a sanitizer the allocator is operator new itself: nothing is kept to test.
bool recycling() {
    void* probe = recycled::take(64);
    recycled::give(probe, 64);
    bool kept = recycled::kept_bytes() > 0;
    recycled::give(recycled::take(64), 64);
    return kept;
}

TEST(Recycled, AFreedBlockServesTheNextOfItsClass) {
    if (!recycling()) GTEST_SKIP() << "a sanitizer build: blocks are not kept";
    void* first = recycled::take(1000);
    recycled::give(first, 1000);
    EXPECT_EQ(recycled::take(1024), first) << "1,000 and 1,024 bytes are one class";
    void* other = recycled::take(1025);
    EXPECT_NE(other, first);
    recycled::give(other, 1025);
    recycled::give(first, 1024);
}

TEST(Recycled, KeepsAtMostFourMegabytesAThreadAndNoLargeBlock) {
    if (!recycling()) GTEST_SKIP() << "a sanitizer build: blocks are not kept";
    std::thread([] {
        std::vector<void*> blocks;
        for (int i = 0; i < 200; ++i) blocks.push_back(recycled::take(64 * 1024));
        for (void* b : blocks) recycled::give(b, 64 * 1024);
        EXPECT_EQ(recycled::kept_bytes(), 4u * 1024 * 1024) << "64 of the 200 blocks are kept";
        void* large = recycled::take(64 * 1024 + 1);
        recycled::give(large, 64 * 1024 + 1);
        EXPECT_EQ(recycled::kept_bytes(), 4u * 1024 * 1024) << "a block over 64 KB went back to the heap";
    }).join();
}

TEST(Recycled, AStringBuiltTwiceReusesItsBuffer) {
    if (!recycling()) GTEST_SKIP() << "a sanitizer build: blocks are not kept";
    const char* first = nullptr;
    {
        RecycledString s(500, 'x');
        s.append("tail");  // grows to a block of the 1,024 class (the 512 one is kept)
        first = s.data();
        EXPECT_EQ(s.size(), 504u);
    }
    RecycledString again;
    again.reserve(900);
    EXPECT_EQ(again.data(), first);
}

TEST(Recycled, ABlockFreedOnAnotherThreadIsKeptThere) {
    auto* s = new RecycledString(3000, 'y');
    std::size_t kept_there = 0;
    std::thread([&] {
        auto before = recycled::kept_bytes();
        delete s;  // the string's buffer joins this thread's lists
        kept_there = recycled::kept_bytes() - before;
    }).join();
    if (!recycling()) GTEST_SKIP() << "a sanitizer build: blocks are not kept";
    EXPECT_EQ(kept_there, 4096u);
}

}  // namespace
}  // namespace tokengate::core
