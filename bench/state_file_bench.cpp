// store.state_file with a million buckets and 100,000 tenants' daily quotas: the snapshot (save, encode, write with
// fsync and rename) and the restore at start (read, decode with its checksum, restore).
//   build/release/bench/state_file_bench
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <filesystem>

#include "tokengate/store/state_file.hpp"

namespace {

using namespace tokengate;

constexpr int k_buckets = 1'000'000;
constexpr int k_quotas = 100'000;

struct Fixture {
    core::ManualClock clock;
    store::MemoryStore memory{clock};
    config::LimitSpec spec, daily;
    std::string path;
    Fixture() {
        spec.name = "requests";
        spec.capacity = 100;
        spec.rate_per_s = 1;
        daily.name = "daily-tokens";
        daily.algorithm = config::Algorithm::quota;
        daily.unit = config::Unit::tokens;
        daily.capacity = 1e6;
        daily.zone = core::find_time_zone("UTC");
        for (int i = 0; i < k_quotas; ++i) {
            limiter::Charge c{&daily, config::Level::tenant, "tenant:daily-tokens:t" + std::to_string(i), 1200, {}};
            memory.decide(std::span(&c, 1));
        }
        // Keys shaped as the gateway's ("tenant:<limit>:<tenant>", "ip:<limit>:<address>").
        for (int i = 0; i < k_buckets; ++i) {
            limiter::Charge c{&spec,
                              config::Level::ip,
                              "ip:per-ip:10." + std::to_string(i >> 16) + "." + std::to_string((i >> 8) & 255) + "." +
                                  std::to_string(i & 255),
                              1,
                              {}};
            memory.decide(std::span(&c, 1));
        }
        path = (std::filesystem::temp_directory_path() / ("tg-state-bench-" + std::to_string(::getpid()))).string();
    }
    ~Fixture() { std::filesystem::remove(path); }
};

Fixture& fixture() {
    static Fixture f;
    return f;
}

void BM_Snapshot(benchmark::State& state) {
    auto& f = fixture();
    std::size_t bytes = 0;
    for (auto _ : state) {
        store::StateSnapshot s{f.clock.unix_now(), f.memory.save()};
        auto encoded = store::encode_state(s);
        bytes = encoded.size();
        std::string error;
        if (!store::write_state_file(f.path, encoded, error)) state.SkipWithError(error.c_str());
    }
    state.counters["buckets"] = k_buckets;
    state.counters["quotas"] = k_quotas;
    state.counters["file_MB"] = static_cast<double>(bytes) / 1e6;
}
BENCHMARK(BM_Snapshot)->Unit(benchmark::kMillisecond)->Iterations(5);

void BM_Restore(benchmark::State& state) {
    auto& f = fixture();
    std::string error;
    store::write_state_file(f.path, store::encode_state({f.clock.unix_now(), f.memory.save()}), error);
    std::size_t restored = 0;
    for (auto _ : state) {
        auto fresh = std::make_unique<store::MemoryStore>(f.clock);
        auto decoded = store::decode_state(*store::read_state_file(f.path));
        restored = fresh->restore(decoded.levels, 0);
        state.PauseTiming();  // freeing them is not part of a start
        fresh.reset();
        state.ResumeTiming();
    }
    state.counters["restored"] = static_cast<double>(restored);
}
BENCHMARK(BM_Restore)->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
