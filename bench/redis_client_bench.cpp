// The gateway's own side of a Redis decision (SPEC §18), without a Redis: for a turn of the
// loop's decisions taken together, each request's arguments, the one call's RESP, the reply
// read back, taken apart and turned into each request's Decision. Time and heap allocations
// per decision, on the bench's realistic tier (a tenant's requests and tokens; the route, IP
// and global limits leased).

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "alloc/heap_counter.hpp"
#include "tokengate/redis/script.hpp"

namespace {

using namespace tokengate;

config::LimitSpec spec(std::string name, double capacity, double rate, config::Unit unit) {
    config::LimitSpec s;
    s.name = std::move(name);
    s.capacity = capacity;
    s.rate_per_s = rate;
    s.unit = unit;
    return s;
}

const auto k_requests = spec("requests", 1e6, 1e6, config::Unit::requests);
const auto k_tokens = spec("tokens", 1e7, 1e7, config::Unit::cost);

/// What Redis answers for `decisions` decisions of two limits: admitted, the time, and per
/// limit admitted, remaining (the tokens' as text: not a whole number), until full, and zeros.
std::string reply_bytes(int decisions) {
    std::string r = "*" + std::to_string(decisions * 14) + "\r\n";
    for (int i = 0; i < decisions; ++i) {
        r += ":1796572696192515\r\n:1\r\n";
        r += ":1\r\n:999999\r\n:1\r\n:0\r\n:0\r\n:0\r\n";
        r += ":1\r\n$17\r\n9999536.499999999\r\n:46\r\n:0\r\n:0\r\n:0\r\n";
    }
    return r;
}

void BM_DecisionsTakenTogether(benchmark::State& state) {
    const auto per_call = static_cast<int>(state.range(0));
    std::vector<config::Charges> requests;
    for (int i = 0; i < per_call; ++i) {
        auto tenant = "t" + std::to_string(i * 7 % 100);
        requests.push_back({{&k_requests, config::Level::tenant, "tenant:requests:" + tenant, 1, {}},
                            {&k_tokens, config::Level::tenant, "tenant:tokens:" + tenant, 463.5, {}}});
    }
    const redis::KeySpace keys{"tg:"};
    const auto reply = reply_bytes(per_call);
    testing::count_this_thread();
    std::uint64_t allocations = 0, decided = 0, lease = 0;
    for (auto _ : state) {
        auto before = testing::heap_allocations.load();
        std::vector<std::vector<std::string>> args;
        for (const auto& charges : requests) {
            auto windows = redis::quota_windows(charges, 0);
            args.push_back(
                redis::decide_call("", keys, charges, windows, 0, true, "r1-" + std::to_string(++lease), 600000, -1)
                    .args);
        }
        auto call = redis::decide_many_call("sha", args).args;
        std::string wire;
        redis::encode_command(wire, call);
        benchmark::DoNotOptimize(wire.data());
        redis::ReplyReader reader;
        reader.feed(reply.data(), reply.size());
        redis::Reply flat;
        if (reader.next(flat) != redis::ReplyReader::Next::reply) state.SkipWithError("reply not read");
        auto each = redis::split_decisions(flat, args);
        if (!each) state.SkipWithError("reply not split");
        std::string error;
        for (int i = 0; i < per_call; ++i) {
            auto d = redis::parse_decision((*each)[static_cast<std::size_t>(i)], requests[static_cast<std::size_t>(i)],
                                           error);
            if (!d || !d->allowed) state.SkipWithError("decision not parsed");
            benchmark::DoNotOptimize(d);
        }
        allocations += testing::heap_allocations.load() - before;
        decided += static_cast<std::uint64_t>(per_call);
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(decided));
    state.counters["ns_per_decision"] =
        benchmark::Counter(static_cast<double>(decided), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    state.counters["allocs_per_decision"] = static_cast<double>(allocations) / static_cast<double>(decided);
}

BENCHMARK(BM_DecisionsTakenTogether)->Arg(20)->Arg(64)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
