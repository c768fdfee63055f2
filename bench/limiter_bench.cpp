// Limiter micro-benchmarks: one decision, a four-level decision, two threads on one hot key,
// and the memory of one million distinct tenant buckets.

#include <benchmark/benchmark.h>

#include <fstream>
#include <string>

#include "tokengate/limiter/decision.hpp"
#include "tokengate/store/memory_store.hpp"

namespace {

using namespace tokengate;
using config::Level;

config::LimitSpec spec(std::string name, double capacity, double rate, config::Unit unit = config::Unit::requests) {
    config::LimitSpec s;
    s.name = std::move(name);
    s.capacity = capacity;
    s.rate_per_s = rate;
    s.unit = unit;
    return s;
}

long rss_kib() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return 0;
}

// Capacities and rates high enough that nothing is refused: the cost of admitting is measured.
const auto k_tenant = spec("tokens", 1e12, 1e12, config::Unit::cost);
const auto k_ip = spec("per-ip", 1e12, 1e12);
const auto k_route = spec("route-rps", 1e12, 1e12);
const auto k_global = spec("gpu", 1e12, 1e12, config::Unit::cost);

void BM_OneDecision(benchmark::State& state) {
    core::SteadyClock clock;
    store::MemoryStore store(clock);
    std::vector<limiter::Charge> charges = {{&k_tenant, Level::tenant, "tenant:tokens:acme", 21, {}}};
    for (auto _ : state) benchmark::DoNotOptimize(store.decide(charges));
}
BENCHMARK(BM_OneDecision);

void BM_FourLevelDecision(benchmark::State& state) {
    core::SteadyClock clock;
    store::MemoryStore store(clock);
    std::vector<limiter::Charge> charges = {{&k_tenant, Level::tenant, "tenant:tokens:acme", 21, {}},
                                            {&k_ip, Level::ip, "ip:per-ip:10.1.2.3", 1, {}},
                                            {&k_route, Level::route, "route:route-rps:/v1/chat/completions", 1, {}},
                                            {&k_global, Level::global, "global:gpu:*", 21, {}}};
    for (auto _ : state) benchmark::DoNotOptimize(store.decide(charges));
}
BENCHMARK(BM_FourLevelDecision);

store::MemoryStore* g_shared_store = nullptr;
core::SteadyClock g_clock;

void BM_HotKeyTwoThreads(benchmark::State& state) {
    if (state.thread_index() == 0) g_shared_store = new store::MemoryStore(g_clock);
    std::vector<limiter::Charge> charges = {{&k_tenant, Level::tenant, "tenant:tokens:hot", 1, {}}};
    for (auto _ : state) benchmark::DoNotOptimize(g_shared_store->decide(charges));
    if (state.thread_index() == 0) {
        delete g_shared_store;
        g_shared_store = nullptr;
    }
}
BENCHMARK(BM_HotKeyTwoThreads)->Threads(2)->UseRealTime();

void BM_MillionTenantKeys(benchmark::State& state) {
    for (auto _ : state) {
        core::SteadyClock clock;
        auto before = rss_kib();
        auto store = std::make_unique<store::MemoryStore>(clock);
        std::vector<limiter::Charge> charge = {{&k_tenant, Level::tenant, "", 21, {}}};
        for (int i = 0; i < 1'000'000; ++i) {
            charge[0].key = "tenant:tokens:tenant-" + std::to_string(i);
            store->decide(charge);
        }
        state.counters["buckets"] = static_cast<double>(store->size());
        state.counters["rss_MiB"] = static_cast<double>(rss_kib() - before) / 1024.0;
        state.counters["bytes_per_bucket"] = static_cast<double>(rss_kib() - before) * 1024.0 / 1e6;
    }
}
BENCHMARK(BM_MillionTenantKeys)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
