#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokengate/core/clock.hpp"
#include "tokengate/core/hash.hpp"
#include "tokengate/limiter/decision.hpp"
#include "tokengate/limiter/quota.hpp"
#include "tokengate/store/snapshot.hpp"

namespace tokengate::store {

/// In-process buckets, sharded so that requests for different keys rarely share a lock.
/// A decision locks the shards of its buckets in index order, so it is atomic and
/// deadlock-free across all of them.
class MemoryStore final {
public:
    /// At most `max_buckets` buckets are kept: keys an attacker can mint (client IPs) cannot
    /// grow memory without bound. A full table first drops buckets that are full again, then
    /// any bucket holding no concurrency slot or queue (its key starts afresh if seen again).
    explicit MemoryStore(const core::Clock& clock, std::size_t max_buckets = std::size_t{1} << 22);

    /// All-or-nothing: charges every bucket only if every enforced limit admits; a refused
    /// request charges nothing anywhere.
    limiter::Decision decide(std::span<const limiter::Charge> charges);
    /// What decide() would say, changing nothing and creating no bucket (admin, explain).
    limiter::Decision peek(std::span<const limiter::Charge> charges);
    /// Settles once: releases the concurrency slots and moves every charge counting cost,
    /// tokens or usd from what was reserved to what was `actual`ly used.
    void settle(std::span<const limiter::Charge> charged, const config::Amounts& actual, std::string_view lease);
    /// Requests waiting in each shaping queue, by bucket key (for the queue-depth gauge).
    std::vector<std::pair<std::string, std::size_t>> queue_depths() const;
    /// Settlement of a rate bucket or quota: charge `delta` more (negative refunds).
    void adjust(const limiter::Charge& charge, double delta);

    /// Admin (SPEC §14): a quota's state, after a top-up of `add` (0: none) or a `reset`.
    limiter::QuotaState quota_admin(const limiter::Charge& charge, double add, bool reset);
    /// A concurrency slot ends.
    void release(const limiter::Charge& charge);
    /// Shaping: a queued request asks to start (see ShapeQueue::try_start), gives its place
    /// back, or leaves a function (it must only schedule) to call when it should ask again.
    limiter::ShapeQueue::StartCheck queue_try_start(const limiter::Charge& charge, std::uint64_t ticket);
    void queue_cancel(const limiter::Charge& charge, std::uint64_t ticket);
    void queue_set_waker(const limiter::Charge& charge, std::uint64_t ticket, std::function<void()> wake);

    /// Every token bucket and leaky meter that is not full (a full one is as good as none:
    /// evict_idle drops it), and every quota with something used or granted in a window not
    /// yet over. Queues and concurrency slots belong to connections, which a restart ends,
    /// and are not kept.
    Snapshot save() const;
    /// Brings saved buckets back, each refilled by `downtime` at its rate; those full by now
    /// are left out. Their capacity and rate are the snapshot's until the first decision
    /// reconfigures them to the current config (absolute level kept, as on reload). Quotas
    /// come back in their window; one that has ended since is left out (it would start at 0).
    std::size_t restore(const Snapshot& saved, core::Nanos downtime);

    /// Drops buckets that are full again and hold no concurrency; returns how many.
    std::size_t evict_idle();
    /// Drops these buckets unless one holds a request (a concurrency slot, a queue's ticket).
    void forget(std::span<const std::string> keys);
    std::size_t size() const;

    /// Makes this the stand-in for a shared store that is down: every limit holds
    /// capacity ÷ `divisor` at rate ÷ `divisor`, and new buckets start full. 0 turns it off.
    void set_share_divisor(unsigned divisor) { divisor_.store(divisor, std::memory_order_relaxed); }
    /// Forgets every bucket (a fresh start for the next outage).
    void clear();

private:
    struct Bucket {
        limiter::RateBucket rate;
        limiter::ConcurrencyGauge gauge;
        std::unique_ptr<limiter::ShapeQueue> queue;  // leaky_bucket mode: shape only
        limiter::QuotaCounter quota;
        bool is_quota = false;
    };
    struct Shard {
        mutable std::mutex mutex;
        std::unordered_map<std::string, Bucket, core::StringViewHash, std::equal_to<>> buckets;
    };
    static constexpr std::size_t k_shards = 64;

    std::size_t shard_of(std::string_view key) const;
    /// The spec this store enforces for `spec`: itself, or its share while standing in.
    const config::LimitSpec& effective(const config::LimitSpec& spec, config::LimitSpec& share) const;
    Bucket& find_or_create(Shard& shard, const limiter::Charge& charge, core::Nanos now, core::Nanos unix_now);

    void quota_status(limiter::LimitStatus& status, const limiter::QuotaCounter& quota, const limiter::Charge& charge,
                      core::Nanos unix_now) const;
    static bool evictable(const Bucket& b, core::Nanos now, core::Nanos unix_now, bool only_idle);
    void make_room(Shard& shard, core::Nanos now, core::Nanos unix_now);

    const core::Clock& clock_;
    std::atomic<unsigned> divisor_{0};
    std::size_t max_per_shard_;
    std::array<Shard, k_shards> shards_;
};

}  // namespace tokengate::store
