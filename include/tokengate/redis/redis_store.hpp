#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tokengate/config/config.hpp"
#include "tokengate/core/clock.hpp"
#include "tokengate/limiter/decision.hpp"
#include "tokengate/redis/breaker.hpp"
#include "tokengate/redis/cluster.hpp"
#include "tokengate/redis/connection.hpp"
#include "tokengate/redis/lease_book.hpp"
#include "tokengate/redis/script.hpp"
#include "tokengate/redis/sentinel.hpp"
#include "tokengate/store/local_store.hpp"

namespace tokengate::redis {

struct StoreOptions {
    config::RedisConfig config;
    std::string username;  // AUTH, from TOKENGATE_REDIS_USERNAME (optional)
    std::string password;  // AUTH, from TOKENGATE_REDIS_PASSWORD
    /// rediss://: the TLS context every connection uses (built from config.tls by the caller).
    std::shared_ptr<tls::ClientContext> tls;
    /// mode sentinel: where the master is (started by the caller, stopped with the store).
    /// Settlements then count as written once a replica has them too (WAIT).
    std::shared_ptr<Sentinels> sentinels;
    /// mode cluster: which master serves each slot (not yet started: the store starts it, and
    /// stops it with itself). A tenant's keys then carry its hash tag, and each master has its own
    /// connections, batches and breaker.
    std::shared_ptr<Cluster> cluster;
    /// store.leases: route, IP and global rate limits decided here against leases (SPEC §18).
    std::optional<config::LeaseConfig> leases;
    /// Tests only: send this clock's time to the script instead of using Redis TIME.
    const core::Clock* script_clock = nullptr;
    /// A concurrency slot whose holder vanished (a crashed replica) frees itself after this.
    core::Nanos lease = 600 * core::k_nanos_per_second;
    core::Nanos heartbeat_every = core::k_nanos_per_second;
    core::Nanos breaker_cooldown = core::k_nanos_per_second;
    unsigned failures_to_open = 3;
    std::size_t retry_capacity = 10000;  // settlements kept per worker while Redis is away
};

/// What the store reports as it works, for the server to count (SPEC §10's tokengate_redis_*
/// series). Any member may be empty.
struct StoreEvents {
    std::function<void(std::string_view result)> call;  // ok, noscript, skipped, timeout, ...
    std::function<void(bool open)> breaker;
    std::function<void(unsigned replicas)> replicas;
    std::function<void(std::string_view policy)> fallback;  // a decision taken without Redis
    std::function<void()> settlement_retried;
    std::function<void()> settlement_dropped;
};

/// Options from the config plus TOKENGATE_REDIS_USERNAME / TOKENGATE_REDIS_PASSWORD.
StoreOptions options_from_env(const config::RedisConfig& config);
/// What a connection sends first: AUTH with the options' credentials, SELECT the URL's db.
std::vector<std::vector<std::string>> login_commands(const StoreOptions& options, const Endpoint& endpoint);

/// SPEC §8: every limit of a request decided in one EVALSHA, atomically, on Redis time, so any
/// number of gateways share one quota. Each worker thread has its own pipelined connections on
/// its own event loop. When Redis fails, on_error decides: fail_open admits, fail_closed
/// refuses (503), local decides in-process at each limit ÷ the live replicas. A circuit
/// breaker keeps a failing Redis from costing every request its timeout; settlements that
/// cannot reach Redis wait in a bounded queue and are sent when it is back.
class RedisStore final : public store::Store {
public:
    RedisStore(StoreOptions options, const core::Clock& clock, StoreEvents events = {});
    ~RedisStore() override;
    RedisStore(const RedisStore&) = delete;
    RedisStore& operator=(const RedisStore&) = delete;

    /// Opens `connections` connections on `ex`'s event loop for calls made on the calling
    /// thread, which must be the one running that loop. Once per thread.
    void attach(boost::asio::any_io_executor ex, unsigned connections);
    /// Announces this replica every heartbeat period from `ex` (an attached loop).
    void start_heartbeat(boost::asio::any_io_executor ex);
    /// Closes every connection; call once the event loops have stopped, before they are destroyed.
    void stop() override;
    /// Settlements sent and not yet answered, or waiting to be retried, and lease renewals on
    /// their way (drain waits for 0).
    std::size_t settlements_outstanding() const override;
    /// Shutdown: every lease's unused part back to Redis (and any granted after this, too).
    void release_leases() override;
    /// What it was built with (the run-time book's keeper connects with the same: one TLS
    /// context, one set of sentinel connections).
    const StoreOptions& options() const { return options_; }
    /// Units this replica holds in leases.
    double leased_units() const { return leases_ ? leases_->held() : 0; }

    /// Decides every limit at once; on a Redis failure, what on_error says. Never waits on
    /// Redis longer than store.redis.timeout.
    boost::asio::awaitable<limiter::Decision> decide(std::span<const limiter::Charge> charges) override;
    /// What decide() would say, changing nothing.
    boost::asio::awaitable<limiter::Decision> peek(std::span<const limiter::Charge> charges) override;
    /// In Redis (a shared decision) or in the stand-in (one taken while Redis was down).
    void settle(const limiter::Decision& decision, std::span<const limiter::Charge> charged,
                const config::Amounts& actual) override;
    boost::asio::awaitable<std::optional<limiter::QuotaState>> quota(const limiter::Charge& charge, double add,
                                                                     bool reset) override;
    /// Until some connection is ready, or `limit` has passed.
    boost::asio::awaitable<bool> wait_ready(std::chrono::nanoseconds limit) override;
    /// Down, and on_error says fail_closed.
    bool refusing() const override {
        return !connected() && options_.config.on_error == config::OnStoreError::fail_closed;
    }

    /// Shaping on a ranked queue (kept in Redis as places, SPEC §13): asks Redis, at most every
    /// k_turn_poll; the stand-in's queues at once; others hold nothing (start).
    boost::asio::awaitable<limiter::ShapeQueue::StartCheck> queue_turn(const limiter::Decision& decision,
                                                                       const limiter::Charge& charge,
                                                                       std::uint64_t ticket) override;
    boost::asio::awaitable<void> queue_leave(const limiter::Decision& decision, const limiter::Charge& charge,
                                             std::uint64_t ticket) override;
    void queue_set_waker(const limiter::Decision& decision, const limiter::Charge& charge, std::uint64_t ticket,
                         std::function<void()> wake) override {
        store::in_memory::queue_set_waker(local_, decision, charge, ticket, std::move(wake));
    }
    /// The stand-in's buckets and queues: the only ones this process keeps.
    std::vector<std::pair<std::string, std::size_t>> queue_depths() const override { return local_.queue_depths(); }
    std::size_t evict_idle() override { return local_.evict_idle(); }
    store::Snapshot save() const override { return local_.save(); }
    std::size_t restore(const store::Snapshot& saved, core::Nanos downtime) override {
        return local_.restore(saved, downtime);
    }
    /// A waiter in a ranked queue asks again at least this often: to hear that it moved up or
    /// was displaced, and to keep its place (Redis drops a place not asked about for 5 s).
    static constexpr core::Nanos k_turn_poll = 500'000'000;
    /// A batch of settlements goes at once when this many wait (SPEC §18).
    static constexpr std::size_t k_batch_max = 256;

    /// Whether the calling thread has a connection ready.
    bool ready();
    /// Whether any connection of any thread is ready.
    bool connected() const { return ready_connections_.load() > 0; }
    unsigned live_replicas() const { return live_replicas_.load(std::memory_order_relaxed); }
    /// Whether any master's breaker is open.
    bool breaker_open() const { return open_breakers_.load() > 0; }
    /// A redirection a cluster node answered and the store followed (tests count them).
    std::size_t redirects_followed() const { return redirects_.load(); }

private:
    struct Node;
    struct Shard;
    struct Client;
    Client* client_here();
    Client* any_client();
    /// The master with that lasting index (0 unless in mode cluster), made when first named.
    Node& node(std::size_t index);
    /// This worker's connections to a master, opened when first needed.
    Shard& shard_of(Client& client, std::size_t index);
    /// mode cluster: the masters `map` names that `client` has no connections to yet.
    void open_shards(Client& client, const Cluster::Map& map);
    /// Where a call goes: the master of its first key's slot (mode cluster), else the one.
    std::optional<std::size_t> route(std::span<const std::string> args) const;
    static Connection* pick(Shard& shard);
    /// Wall-clock time for quota windows: the fake clock in tests, else the gateway's.
    core::Nanos quota_now() const;
    double script_now_us() const;
    std::string next_lease();
    /// One call, answered within `within` (default store.redis.timeout).
    boost::asio::awaitable<Result> call(Client& client, std::vector<std::string> args,
                                        std::optional<std::chrono::nanoseconds> within = std::nullopt);
    boost::asio::awaitable<limiter::Decision> run_decision(std::span<const limiter::Charge> charges, bool commit);
    /// A committing decision's call, made together with the others this worker has in the same
    /// turn of its loop (or while its last such call is out): one decide_many call for them all
    /// (one plain call when alone).
    struct Answer;
    struct Together;
    static constexpr std::size_t k_together_max = 64;
    boost::asio::awaitable<Answer> decide_together(Client& client, std::vector<std::string> args);
    void send_together(Client& client);
    boost::asio::awaitable<void> decide_as_one(Client& client, std::vector<std::shared_ptr<Together>> part);
    /// The decision of `charges` in Redis; nothing if Redis did not answer (failure noted).
    boost::asio::awaitable<std::optional<limiter::Decision>> ask_redis(Client& client,
                                                                       std::span<const limiter::Charge> charges,
                                                                       bool commit);
    struct LeasedSplit {
        boost::container::small_vector<const limiter::Charge*, 6> leased;
        boost::container::small_vector<std::size_t, 6> leased_at;
        config::Charges shared;
        boost::container::small_vector<std::size_t, 6> shared_at;
    };
    /// Takes each leased charge from its lease, renewing a short one first: -1 taken, else the
    /// index of the one Redis could not cover; nothing if Redis did not answer.
    boost::asio::awaitable<std::optional<std::ptrdiff_t>> take_leases(Client& client,
                                                                      std::span<const limiter::Charge* const> leased);
    boost::asio::awaitable<void> renew(Client& client, limiter::Charge want);
    /// Up to want.amount from the shared bucket into the lease, none unless `least` is there:
    /// what was granted, or -1 if Redis did not answer.
    boost::asio::awaitable<double> lease_from_redis(Client& client, const limiter::Charge& want, double least);
    /// Idle leases' unused parts (all of them: `everything`) back to Redis, as settlements.
    void return_leases(bool everything);
    /// A settlement (or a lease's return) into the calling thread's batch, or another's.
    void submit(std::vector<std::string> args);
    limiter::Decision fallback(std::span<const limiter::Charge> charges, bool commit);
    /// Into this thread's next batch: sent every store.redis.flush_interval, or at once when
    /// k_batch_max wait. In mode sentinel the batch goes on the client's own connection, then
    /// WAIT 1, so a failover does not lose a settlement Redis acknowledged.
    void send_settlement(Client& client, std::vector<std::string> args);
    void flush_settlements(Client& client, Shard& shard);
    struct SettleBatch;
    void send_batch(Client& client, Shard& shard, Connection& connection, std::shared_ptr<SettleBatch> batch);
    void batch_answered(Client& client, Shard& shard, const std::shared_ptr<SettleBatch>& batch,
                        std::optional<Result> confirmation);
    /// mode sentinel: what a master's ROLE said of its replicas.
    void note_replicas(const Reply& role);
    std::shared_ptr<Connection> open_connection(Client& client, Shard& shard, bool counts_as_ready);
    void keep_for_retry(Client& client, std::vector<std::string> args);
    void flush_retries(Client& client);
    void note_failure(Node& node, CallError error);
    void note_success(Node& node);
    void count_call(std::string_view result) {
        if (events_.call) events_.call(result);
    }
    boost::asio::awaitable<void> heartbeat_loop(Client& client);
    boost::asio::awaitable<void> retry_loop(Client& client);

    StoreOptions options_;
    const core::Clock& clock_;
    Endpoint endpoint_;
    KeySpace keys_;
    std::vector<std::vector<std::string>> handshake_;  // every data connection's
    std::string replica_id_;
    std::atomic<std::uint64_t> lease_counter_{0};
    store::MemoryStore local_;
    mutable std::mutex nodes_mutex_;
    std::vector<std::unique_ptr<Node>> nodes_;
    std::atomic<unsigned> open_breakers_{0};
    std::atomic<unsigned> unhealthy_nodes_{0};
    std::atomic<std::size_t> redirects_{0};
    std::atomic<unsigned> live_replicas_{1};
    std::atomic<bool> stopping_{false};
    std::uint64_t id_;  // tells this store's per-thread clients from another's
    std::optional<LeaseBook> leases_;
    std::atomic<std::size_t> renewals_in_flight_{0};
    std::atomic<bool> draining_{false};
    std::atomic<std::size_t> settlements_in_flight_{0};
    std::atomic<unsigned> ready_connections_{0};
    std::atomic<std::size_t> settlements_waiting_{0};
    /// mode sentinel: the replicas the master last said it has (ROLE); -1 not known yet. With
    /// none there is nobody to WAIT for.
    std::atomic<int> master_replicas_{-1};

    StoreEvents events_;

    mutable std::mutex clients_mutex_;
    std::vector<std::unique_ptr<Client>> clients_;
};

}  // namespace tokengate::redis
