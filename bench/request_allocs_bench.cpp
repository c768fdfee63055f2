// Heap allocations and in-process time per proxied request (SPEC §19): a gateway worker on its
// own thread, on loopback, between a client and an upstream on the benchmark's thread.
// allocs_per_request counts the worker thread's allocations only: the gateway's.
#include <benchmark/benchmark.h>

#include "alloc/heap_counter.hpp"
#include "alloc/proxied_loop.hpp"

namespace {

using tokengate::testing::heap_allocations;
using tokengate::testing::ProxiedLoop;

void measure(benchmark::State& state, ProxiedLoop::Answer answer) {
    ProxiedLoop loop(answer, tokengate::testing::count_this_thread);
    constexpr std::size_t k_batch = 100;
    if (!loop.run(300)) state.SkipWithError("an exchange failed");
    std::uint64_t allocations = 0, requests = 0;
    for (auto _ : state) {
        auto before = heap_allocations.load();
        if (!loop.run(k_batch)) state.SkipWithError("an exchange failed");
        allocations += heap_allocations.load() - before;
        requests += k_batch;
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(requests));
    state.counters["allocs_per_request"] = static_cast<double>(allocations) / static_cast<double>(requests);
}

void BM_ProxiedJson(benchmark::State& s) { measure(s, ProxiedLoop::Answer::json); }
void BM_ProxiedSse(benchmark::State& s) { measure(s, ProxiedLoop::Answer::sse); }

BENCHMARK(BM_ProxiedJson)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_ProxiedSse)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
