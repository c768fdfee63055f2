// The gateway's own side of a Redis decision (SPEC §18), without a Redis: time and heap
// allocations per decision when a turn of the loop's decisions go in one call
// (tests/alloc/redis_batch.hpp).

#include <benchmark/benchmark.h>

#include "alloc/heap_counter.hpp"
#include "alloc/redis_batch.hpp"

namespace {

void BM_DecisionsTakenTogether(benchmark::State& state) {
    tokengate::testing::RedisBatch batch(static_cast<int>(state.range(0)));
    tokengate::testing::count_this_thread();
    std::uint64_t allocations = 0, decided = 0;
    for (auto _ : state) {
        auto before = tokengate::testing::heap_allocations.load();
        if (!batch.run()) state.SkipWithError("a step failed");
        allocations += tokengate::testing::heap_allocations.load() - before;
        decided += batch.size();
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(decided));
    state.counters["ns_per_decision"] =
        benchmark::Counter(static_cast<double>(decided), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    state.counters["allocs_per_decision"] = static_cast<double>(allocations) / static_cast<double>(decided);
}

BENCHMARK(BM_DecisionsTakenTogether)->Arg(20)->Arg(64)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
