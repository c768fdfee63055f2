// A request's metric updates (SPEC §19): the dozen adds, sets and observations a proxied request
// makes, on the series of one of 100 tenants, as the request path makes them.

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "tokengate/metrics/registry.hpp"

namespace {

using tokengate::metrics::Registry;

void BM_RequestUpdates(benchmark::State& state) {
    Registry registry;
    auto& admitted = registry.counter("tokengate_admitted_total", "", {"tenant"});
    auto& settled = registry.counter("tokengate_settled_total", "", {"tenant"});
    auto& cost_reserved = registry.counter("tokengate_cost_reserved_total", "", {"tenant"});
    auto& cost_settled = registry.counter("tokengate_cost_settled_total", "", {"tenant"});
    auto& tokens = registry.counter("tokengate_tokens_total", "", {"tenant", "model", "kind"});
    auto& requests = registry.counter("tokengate_requests_total", "", {"tenant", "route", "status"});
    auto& remaining = registry.gauge("tokengate_remaining_ratio", "", {"tenant", "limit"});
    auto& inflight = registry.gauge("tokengate_upstream_inflight", "", {"upstream"});
    auto& duration = registry.histogram("tokengate_upstream_duration_seconds", "", {"upstream"},
                                        {0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30});
    std::vector<std::string> tenants;
    for (int i = 1; i <= 100; ++i) tenants.push_back("t" + std::to_string(i));
    std::size_t n = 0;
    for (auto _ : state) {
        const std::string& tenant = tenants[n++ % tenants.size()];
        remaining.set({tenant, "requests"}, 0.5);
        remaining.set({tenant, "tokens"}, 0.5);
        admitted.add({tenant});
        inflight.add({"backend"}, 1);
        inflight.add({"backend"}, -1);
        duration.observe({"backend"}, 0.002);
        settled.add({tenant});
        cost_reserved.add({tenant}, 300);
        cost_settled.add({tenant}, 200);
        tokens.add({tenant, "llama3-8b", "prompt"}, 180);
        tokens.add({tenant, "llama3-8b", "completion"}, 12);
        requests.add({tenant, "/v1/chat/completions", "200"});
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_RequestUpdates);

}  // namespace

BENCHMARK_MAIN();
