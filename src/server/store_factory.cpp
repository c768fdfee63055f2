// The one place that knows which stores exist; everything else sees store::Store.

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "book_redis.hpp"
#include "services.hpp"
#include "tokengate/redis/redis_store.hpp"
#include "tokengate/store/local_store.hpp"
#include "tokengate/tls/context.hpp"

namespace tokengate::server {

namespace {

/// The tokengate_redis_* series (SPEC §10), fed by the store's events.
redis::StoreEvents redis_metrics(metrics::Registry& registry) {
    auto& calls = registry.counter("tokengate_redis_calls_total", "Redis calls by the limiter, by result.", {"result"});
    auto& breaker = registry.gauge("tokengate_redis_breaker_open", "1 while the Redis circuit breaker is open.", {});
    auto& replicas =
        registry.gauge("tokengate_redis_live_replicas",
                       "Gateway replicas announcing themselves on Redis (the local fallback's divisor).", {});
    auto& fallbacks = registry.counter("tokengate_redis_fallback_decisions_total",
                                       "Decisions taken without Redis, by store.redis.on_error policy.", {"policy"});
    auto& retried = registry.counter("tokengate_redis_settlements_retried_total",
                                     "Settlements that could not reach Redis and were queued for retry.", {});
    auto& dropped = registry.counter("tokengate_redis_settlements_dropped_total",
                                     "Settlements dropped because the retry queue was full.", {});
    breaker.set({}, 0);
    replicas.set({}, 1);
    dropped.add({}, 0);
    redis::StoreEvents events;
    events.call = [&calls](std::string_view result) { calls.add({result}); };
    events.breaker = [&breaker](bool open) { breaker.set({}, open ? 1 : 0); };
    events.replicas = [&replicas](unsigned n) { replicas.set({}, n); };
    events.fallback = [&fallbacks](std::string_view policy) { fallbacks.add({policy}); };
    events.settlement_retried = [&retried] { retried.add({}); };
    events.settlement_dropped = [&dropped] { dropped.add({}); };
    return events;
}

/// The store's options; in mode sentinel with sentinels of their own, in mode cluster with the
/// slot map, each asked from `home`'s loop.
redis::StoreOptions redis_options(const config::GatewayConfig& config, Worker& home) {
    const auto& rc = config.store.redis;
    auto options = redis::options_from_env(rc);
    if (rc.tls_enabled) options.tls = std::make_shared<tls::ClientContext>(rc.tls, config.source_path);
    if (rc.mode == config::RedisMode::sentinel) {
        auto master = redis::Endpoint::parse(rc.url);
        std::vector<redis::Endpoint> sentinels;
        for (const auto& node : rc.nodes) sentinels.push_back(master.at(node));
        std::vector<std::vector<std::string>> login;
        if (const char* password = std::getenv("TOKENGATE_REDIS_SENTINEL_PASSWORD"))
            login.push_back({"AUTH", password});
        options.sentinels = std::make_shared<redis::Sentinels>(home.ioc.get_executor(), std::move(sentinels), rc.master,
                                                               master, std::move(login), options.tls);
        options.sentinels->start();
    } else if (rc.mode == config::RedisMode::cluster) {
        auto seed = redis::Endpoint::parse(rc.url);
        std::vector<redis::Endpoint> seeds;
        for (const auto& node : rc.nodes) seeds.push_back(seed.at(node));
        if (seeds.empty()) seeds.push_back(seed);
        // The store starts it, once it listens for the map's changes.
        options.cluster = std::make_shared<redis::Cluster>(home.ioc.get_executor(), std::move(seeds),
                                                           redis::login_commands(options, seed), options.tls);
    }
    options.leases = config.store.leases;
    return options;
}

}  // namespace

std::unique_ptr<store::Store> make_store(const config::GatewayConfig& config, const core::Clock& clock,
                                         metrics::Registry& registry,
                                         std::span<const std::unique_ptr<Worker>> workers) {
    if (config.store.backend == config::StoreBackend::memory) return std::make_unique<store::LocalStore>(clock);
    auto options = redis_options(config, *workers.front());
    auto redis = std::make_unique<redis::RedisStore>(std::move(options), clock, redis_metrics(registry));
    // store.redis.pool connections in all, split over the workers' event loops.
    auto count = static_cast<unsigned>(workers.size());
    unsigned per_worker = std::max(1u, (config.store.redis.pool + count - 1) / count);
    for (const auto& w : workers) redis->attach(w->ioc.get_executor(), per_worker);
    redis->start_heartbeat(workers.front()->ioc.get_executor());
    return redis;
}

std::shared_ptr<RunTimeBook> make_shared_book(const store::Store& store, Worker& first) {
    const auto* redis = dynamic_cast<const redis::RedisStore*>(&store);
    if (!redis) return nullptr;
    auto keeper = std::make_unique<RedisKeeper>(first.ioc.get_executor(), redis->options());
    auto& watcher = *keeper;
    auto book = std::make_shared<RunTimeBook>(std::move(keeper), "Redis");
    // Every replica sees another's change within a poll (SPEC §21: within 1 s).
    constexpr core::Nanos k_poll = 250'000'000, k_share_usage = 5 * core::k_nanos_per_second;
    net::co_spawn(first.ioc, watcher.watch(book, k_poll, k_share_usage), net::detached);
    return book;
}

bool store_changed(const config::StoreConfig& was, const config::StoreConfig& now) {
    return now.backend != was.backend || now.redis.url != was.redis.url || now.redis.pool != was.redis.pool ||
           now.redis.tls != was.redis.tls || now.redis.mode != was.redis.mode || now.redis.nodes != was.redis.nodes ||
           now.redis.master != was.redis.master || now.redis.flush_interval != was.redis.flush_interval ||
           now.leases != was.leases || now.state_file.path != was.state_file.path ||
           now.snapshot_interval != was.snapshot_interval;
}

}  // namespace tokengate::server
