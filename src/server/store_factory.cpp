// The one place that knows which stores exist; everything else sees store::Store.

#include "services.hpp"
#include "tokengate/redis/redis_store.hpp"

namespace tokengate::server {

std::unique_ptr<store::Store> make_store(const config::GatewayConfig& config, const core::Clock& clock,
                                         metrics::Registry& registry, std::span<const std::unique_ptr<Worker>> workers) {
    if (config.store.backend == config::StoreBackend::memory) return std::make_unique<store::LocalStore>(clock);
    const auto& rc = config.store.redis;
    auto redis = std::make_unique<redis::RedisStore>(redis::options_from_env(rc), clock, registry);
    // store.redis.pool connections in all, split over the workers' event loops.
    auto count = static_cast<unsigned>(workers.size());
    unsigned per_worker = std::max(1u, (rc.pool + count - 1) / count);
    for (const auto& w : workers) redis->attach(w->ioc.get_executor(), per_worker);
    redis->start_heartbeat(workers.front()->ioc.get_executor());
    return redis;
}

bool store_changed(const config::StoreConfig& was, const config::StoreConfig& now) {
    return now.backend != was.backend || now.redis.url != was.redis.url || now.redis.pool != was.redis.pool;
}

}  // namespace tokengate::server
