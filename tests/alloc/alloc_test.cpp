// Heap allocations per steady-state proxied request (SPEC §19), made by a real worker's thread
// on loopback: the ceilings below are today's counts, so a change that adds an allocation to
// the request path fails here. Lower them as the path gets leaner; bench/request_allocs_bench.cpp
// reports the figures.
#include <gtest/gtest.h>

#include <cstdlib>

#include "heap_counter.hpp"
#include "proxied_loop.hpp"
#include "redis_batch.hpp"

namespace tokengate::testing {
namespace {

constexpr std::size_t k_warm_up = 300;  // pools, buffers and caches reach their size
constexpr std::size_t k_measured = 2000;

double allocations_per_request(ProxiedLoop::Answer answer) {
    ProxiedLoop loop(answer, count_this_thread);
    if (!loop.run(k_warm_up)) return -1;
    auto before = heap_allocations.load();
    if (!loop.run(k_measured)) return -1;
    return static_cast<double>(heap_allocations.load() - before) / k_measured;
}

void* volatile escaped;  // so that the compiler keeps the allocations below

TEST(Allocations, OnlyTheThreadsThatAskAreCounted) {
    auto before = heap_allocations.load();
    escaped = std::malloc(64);
    std::free(escaped);
    EXPECT_EQ(heap_allocations.load(), before) << "this thread did not ask";
    std::thread([] {
        count_this_thread();
        escaped = std::malloc(64);
        std::free(escaped);
        escaped = new std::string(100, 'x');
        delete static_cast<std::string*>(escaped);
    }).join();
    EXPECT_EQ(heap_allocations.load(), before + 3) << "malloc, then new and the string's buffer";
}

TEST(Allocations, AProxiedJsonRequestStaysUnderItsCeiling) {
    auto per = allocations_per_request(ProxiedLoop::Answer::json);
    ASSERT_GE(per, 0) << "an exchange failed";
    RecordProperty("allocations_per_request", std::to_string(per));
    EXPECT_LE(per, 0.5) << "0.02 measured on 2026-12-05 (a log flush now and then): what added one?";
}

TEST(Allocations, AProxiedStreamStaysUnderItsCeiling) {
    auto per = allocations_per_request(ProxiedLoop::Answer::sse);
    ASSERT_GE(per, 0) << "an exchange failed";
    RecordProperty("allocations_per_request", std::to_string(per));
    EXPECT_LE(per, 0.5) << "0.02 measured on 2026-12-05: what added one?";
}

// The gateway's side of a batch of Redis decisions (SPEC §18): per decision its arguments (the
// vector, and two keys past the short-string buffer) and the reply's one number sent as text,
// plus the call's own vectors shared by its 20.
TEST(Allocations, ADecisionTakenWithOthersOnRedisStaysUnderItsCeiling) {
    RedisBatch batch(20);
    count_this_thread();
    ASSERT_TRUE(batch.run());
    auto before = heap_allocations.load();
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(batch.run());
    auto per = static_cast<double>(heap_allocations.load() - before) / (50.0 * static_cast<double>(batch.size()));
    RecordProperty("allocations_per_decision", std::to_string(per));
    EXPECT_LE(per, 6) << "4.95 measured on 2026-12-06 (24.95 before hiredis built replies in place): what added one?";
}

}  // namespace
}  // namespace tokengate::testing
