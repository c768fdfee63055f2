// SPEC §12's learned output estimate: what a settlement and an admission cost, and the
// memory of the windows for 100,000 tenants × 3 models (window 200, one byte a sample).

#include <benchmark/benchmark.h>
#include <malloc.h>

#include <string>
#include <vector>

#include "tokengate/cost/output_history.hpp"

namespace {

using tokengate::cost::OutputHistory;

std::vector<std::string> tenant_names(std::size_t n) {
    std::vector<std::string> names;
    for (std::size_t i = 0; i < n; ++i) names.push_back("tenant-" + std::to_string(i));
    return names;
}

void BM_Record(benchmark::State& state) {
    OutputHistory history;
    OutputHistory::Settings settings;
    auto tenants = tenant_names(1000);
    std::size_t i = 0;
    for (auto _ : state) {
        history.record(tenants[i % tenants.size()], "llama-3-70b", 40 + i % 17, settings);
        ++i;
    }
}
BENCHMARK(BM_Record);

void BM_Estimate(benchmark::State& state) {
    OutputHistory history;
    OutputHistory::Settings settings;
    auto tenants = tenant_names(1000);
    for (int k = 0; k < 200; ++k)
        for (const auto& t : tenants) history.record(t, "llama-3-70b", 40, settings);
    std::size_t i = 0;
    for (auto _ : state)
        benchmark::DoNotOptimize(history.estimate(tenants[i++ % tenants.size()], "llama-3-70b", settings));
}
BENCHMARK(BM_Estimate);

/// Every series exists with its whole window allocated (a window's ring is allocated at its
/// first sample), so one sample each is enough to measure the steady state.
void BM_MemoryOf100kTenantsBy3Models(benchmark::State& state) {
    const std::vector<std::string> models = {"llama-3.1-8b-instruct", "qwen3-32b", "deepseek-v3"};
    auto tenants = tenant_names(100'000);
    for (auto _ : state) {
        auto before = mallinfo2().uordblks;
        OutputHistory history;
        OutputHistory::Settings settings;
        settings.max_series = static_cast<std::size_t>(state.range(0));
        for (const auto& t : tenants)
            for (const auto& m : models) history.record(t, m, 40, settings);
        auto used = static_cast<double>(mallinfo2().uordblks - before);
        state.counters["series"] = static_cast<double>(history.series());
        state.counters["MiB"] = used / (1 << 20);
        state.counters["bytes_per_series"] = used / static_cast<double>(history.series());
    }
}
BENCHMARK(BM_MemoryOf100kTenantsBy3Models)->Arg(300'000)->Arg(100'000)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
