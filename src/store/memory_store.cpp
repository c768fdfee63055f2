#include "tokengate/store/memory_store.hpp"

#include <algorithm>
#include <cmath>

#include <boost/container/small_vector.hpp>

namespace tokengate::store {

using config::Algorithm;
using limiter::Charge;
using limiter::Decision;

MemoryStore::MemoryStore(const core::Clock& clock, std::size_t max_buckets)
    : clock_(clock), max_per_shard_(std::max<std::size_t>(1, max_buckets / k_shards)) {}

bool MemoryStore::evictable(const Bucket& b, core::Nanos now, core::Nanos unix_now, bool only_idle) {
    bool holds_something = b.gauge.in_flight() > 0 || (b.queue && b.queue->holds_tickets());
    if (holds_something) return false;
    if (!only_idle) return true;
    if (b.is_quota) return b.quota.idle(unix_now);
    return b.rate.is_full(now) && (!b.queue || b.queue->idle(now));
}

void MemoryStore::make_room(Shard& shard, core::Nanos now, core::Nanos unix_now) {
    std::erase_if(shard.buckets, [&](const auto& kv) { return evictable(kv.second, now, unix_now, true); });
    for (auto it = shard.buckets.begin(); shard.buckets.size() >= max_per_shard_ && it != shard.buckets.end();)
        it = evictable(it->second, now, unix_now, false) ? shard.buckets.erase(it) : std::next(it);
}

std::size_t MemoryStore::shard_of(std::string_view key) const { return core::StringViewHash{}(key) % k_shards; }

const config::LimitSpec& MemoryStore::effective(const config::LimitSpec& spec, config::LimitSpec& share) const {
    auto divisor = divisor_.load(std::memory_order_relaxed);
    // An adaptive limit's rate is wherever the controller has moved it (its level is kept).
    double rate = spec.current_rate();
    if (divisor == 0 && rate == spec.rate_per_s) return spec;
    share = spec;
    share.rate_per_s = rate;
    if (divisor == 0) return share;
    share.capacity = spec.capacity / divisor;
    share.rate_per_s = rate / divisor;
    share.initial = 1.0;
    return share;
}

MemoryStore::Bucket& MemoryStore::find_or_create(Shard& shard, const Charge& charge, core::Nanos now,
                                                 core::Nanos unix_now) {
    config::LimitSpec share;
    const auto& spec = effective(*charge.spec, share);
    auto it = shard.buckets.find(charge.key);
    if (spec.algorithm == Algorithm::quota) {
        if (it == shard.buckets.end()) {
            if (shard.buckets.size() >= max_per_shard_) make_room(shard, now, unix_now);
            Bucket b;
            b.is_quota = true;
            it = shard.buckets.emplace(charge.key, std::move(b)).first;
        }
        it->second.quota.place(*charge.spec, unix_now);
        return it->second;
    }
    if (it == shard.buckets.end()) {
        if (shard.buckets.size() >= max_per_shard_) make_room(shard, now, unix_now);
        Bucket b;
        if (spec.algorithm == Algorithm::concurrency) b.gauge = limiter::ConcurrencyGauge(spec.capacity);
        else if (limiter::is_shaping(spec)) b.queue = std::make_unique<limiter::ShapeQueue>(spec);
        else b.rate = limiter::RateBucket(spec, now);
        it = shard.buckets.emplace(charge.key, std::move(b)).first;
    } else if (spec.algorithm == Algorithm::concurrency) {
        it->second.gauge.set_max(spec.capacity);
    } else if (it->second.queue) {
        it->second.queue->reconfigure(spec);
    } else {
        it->second.rate.reconfigure(spec, now);
    }
    return it->second;
}

void MemoryStore::clear() {
    for (auto& shard : shards_) {
        std::lock_guard lock(shard.mutex);
        shard.buckets.clear();
    }
}

void MemoryStore::settle(std::span<const Charge> charged, const config::Amounts& actual, std::string_view) {
    for (const auto& c : charged) {
        if (!limiter::settles(c, actual)) continue;
        if (c.spec->algorithm == Algorithm::concurrency) release(c);
        else adjust(c, actual.in(c.spec->unit) - c.amount);
    }
}

void MemoryStore::quota_status(limiter::LimitStatus& status, const limiter::QuotaCounter& quota, const Charge& charge,
                               core::Nanos unix_now) const {
    // Standing in for a shared store, each replica holds its share of the quota too.
    config::LimitSpec share;
    status.verdict = quota.check(charge.amount, effective(*charge.spec, share).capacity, unix_now);
    status.window = quota.window();
    status.quota_added = quota.added();
}

Decision MemoryStore::decide(std::span<const Charge> charges) {
    // Lock every shard involved, in index order, for the whole check-then-charge. (A request
    // has a handful of charges: these stay on the stack.)
    boost::container::small_vector<std::size_t, 8> ids(charges.size());
    for (std::size_t i = 0; i < charges.size(); ++i) ids[i] = shard_of(charges[i].key);
    boost::container::small_vector<std::size_t, 8> order = ids;
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    for (auto id : order) shards_[id].mutex.lock();

    auto now = clock_.now();
    auto unix_now = clock_.unix_now();
    Decision decision;
    decision.statuses.resize(charges.size());
    boost::container::small_vector<Bucket*, 8> buckets(charges.size());
    for (std::size_t i = 0; i < charges.size(); ++i) {
        const auto& c = charges[i];
        buckets[i] = &find_or_create(shards_[ids[i]], c, now, unix_now);
        auto& status = decision.statuses[i];
        status.spec = c.spec;
        status.level = c.level;
        if (buckets[i]->is_quota) quota_status(status, buckets[i]->quota, c, unix_now);
        else if (c.spec->algorithm == Algorithm::concurrency) status.verdict = buckets[i]->gauge.check(c.amount);
        else if (buckets[i]->queue)
            status.verdict = buckets[i]->queue->check(c.tenant, c.amount, now, c.priority).verdict;
        else status.verdict = buckets[i]->rate.check(c.amount, now);
    }
    limiter::resolve(decision);
    for (std::size_t i = 0; i < charges.size(); ++i) {
        if (!decision.statuses[i].charged) continue;
        if (buckets[i]->is_quota) buckets[i]->quota.consume(charges[i].amount);
        else if (charges[i].spec->algorithm == Algorithm::concurrency) buckets[i]->gauge.acquire(charges[i].amount);
        else if (buckets[i]->queue)
            decision.statuses[i].ticket =
                buckets[i]->queue->admit(charges[i].tenant, charges[i].amount, now, charges[i].priority).ticket;
        else buckets[i]->rate.consume(charges[i].amount, now);
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) shards_[*it].mutex.unlock();
    if (decision.allowed) decision.keeper = limiter::Keeper::memory;
    return decision;
}

Decision MemoryStore::peek(std::span<const Charge> charges) {
    auto now = clock_.now();
    auto unix_now = clock_.unix_now();
    Decision decision;
    decision.statuses.resize(charges.size());
    for (std::size_t i = 0; i < charges.size(); ++i) {
        const auto& c = charges[i];
        auto& status = decision.statuses[i];
        status.spec = c.spec;
        status.level = c.level;
        config::LimitSpec share;
        const auto& spec = effective(*c.spec, share);
        auto& shard = shards_[shard_of(c.key)];
        std::lock_guard lock(shard.mutex);
        auto it = shard.buckets.find(c.key);
        const Bucket* existing = it == shard.buckets.end() ? nullptr : &it->second;
        if (spec.algorithm == Algorithm::quota) {
            limiter::QuotaCounter quota = existing ? existing->quota : limiter::QuotaCounter();
            quota.place(*c.spec, unix_now);
            quota_status(status, quota, c, unix_now);
        } else if (spec.algorithm == Algorithm::concurrency) {
            limiter::ConcurrencyGauge fresh(spec.capacity);
            status.verdict = (existing ? existing->gauge : fresh).check(c.amount);
        } else if (limiter::is_shaping(spec)) {
            limiter::ShapeQueue fresh(spec);
            status.verdict = (existing && existing->queue ? *existing->queue : fresh)
                                 .check(c.tenant, c.amount, now, c.priority)
                                 .verdict;
        } else {
            limiter::RateBucket bucket = existing ? existing->rate : limiter::RateBucket(spec, now);
            bucket.reconfigure(spec, now);
            status.verdict = bucket.check(c.amount, now);
        }
    }
    limiter::resolve(decision);
    for (auto& s : decision.statuses) s.charged = false;
    return decision;
}

std::vector<std::pair<std::string, std::size_t>> MemoryStore::queue_depths() const {
    std::vector<std::pair<std::string, std::size_t>> out;
    for (const auto& shard : shards_) {
        std::lock_guard lock(shard.mutex);
        for (const auto& [key, bucket] : shard.buckets)
            if (bucket.queue) out.emplace_back(key, bucket.queue->waiting());
    }
    return out;
}

void MemoryStore::adjust(const Charge& charge, double delta) {
    auto& shard = shards_[shard_of(charge.key)];
    std::lock_guard lock(shard.mutex);
    auto now = clock_.now();
    auto& bucket = find_or_create(shard, charge, now, clock_.unix_now());
    if (bucket.is_quota) bucket.quota.adjust(delta, charge.window);
    else if (!bucket.queue) bucket.rate.adjust(delta, now);  // a started request's queue slot is spent
}

limiter::QuotaState MemoryStore::quota_admin(const Charge& charge, double add, bool reset) {
    auto& shard = shards_[shard_of(charge.key)];
    std::lock_guard lock(shard.mutex);
    auto& bucket = find_or_create(shard, charge, clock_.now(), clock_.unix_now());
    if (reset) bucket.quota.reset();
    if (std::isfinite(add)) bucket.quota.top_up(add);
    return {bucket.quota.used(), bucket.quota.added(), bucket.quota.window()};
}

limiter::ShapeQueue::StartCheck MemoryStore::queue_try_start(const Charge& charge, std::uint64_t ticket) {
    auto& shard = shards_[shard_of(charge.key)];
    std::lock_guard lock(shard.mutex);
    auto it = shard.buckets.find(charge.key);
    if (it == shard.buckets.end() || !it->second.queue) return {false, true, 0};
    return it->second.queue->try_start(ticket, clock_.now());
}

void MemoryStore::queue_cancel(const Charge& charge, std::uint64_t ticket) {
    auto& shard = shards_[shard_of(charge.key)];
    std::lock_guard lock(shard.mutex);
    auto it = shard.buckets.find(charge.key);
    if (it != shard.buckets.end() && it->second.queue) it->second.queue->cancel(ticket);
}

void MemoryStore::queue_set_waker(const Charge& charge, std::uint64_t ticket, std::function<void()> wake) {
    auto& shard = shards_[shard_of(charge.key)];
    std::lock_guard lock(shard.mutex);
    auto it = shard.buckets.find(charge.key);
    if (it != shard.buckets.end() && it->second.queue) it->second.queue->set_waker(ticket, std::move(wake));
}

void MemoryStore::release(const Charge& charge) {
    auto& shard = shards_[shard_of(charge.key)];
    std::lock_guard lock(shard.mutex);
    auto it = shard.buckets.find(charge.key);
    if (it != shard.buckets.end()) it->second.gauge.release(charge.amount);
}

std::size_t MemoryStore::evict_idle() {
    std::size_t evicted = 0;
    auto now = clock_.now();
    auto unix_now = clock_.unix_now();
    for (auto& shard : shards_) {
        std::lock_guard lock(shard.mutex);
        evicted +=
            std::erase_if(shard.buckets, [&](const auto& kv) { return evictable(kv.second, now, unix_now, true); });
    }
    return evicted;
}

void MemoryStore::forget(std::span<const std::string> keys) {
    auto now = clock_.now();
    auto unix_now = clock_.unix_now();
    for (const auto& key : keys) {
        auto& shard = shards_[shard_of(key)];
        std::lock_guard lock(shard.mutex);
        if (auto it = shard.buckets.find(key); it != shard.buckets.end() && evictable(it->second, now, unix_now, false))
            shard.buckets.erase(it);
    }
}

Snapshot MemoryStore::save() const {
    Snapshot out;
    auto now = clock_.now();
    auto unix_now = clock_.unix_now();
    for (const auto& shard : shards_) {
        std::lock_guard lock(shard.mutex);
        for (const auto& [key, b] : shard.buckets) {
            if (b.is_quota) {
                if (!b.quota.idle(unix_now))
                    out.quotas.push_back({key, b.quota.used(), b.quota.added(), b.quota.window()});
                continue;
            }
            if (b.queue || b.rate.capacity() <= 0 || b.rate.is_full(now)) continue;  // concurrency: capacity 0
            // Clamped as the loader reads it: a debt at the floor may round a hair past it.
            out.buckets.push_back({key, b.rate.capacity(), b.rate.rate_per_s(),
                                   std::clamp(b.rate.tokens(now), -core::k_max_counter, b.rate.capacity())});
        }
    }
    return out;
}

std::size_t MemoryStore::restore(const Snapshot& saved, core::Nanos downtime) {
    auto now = clock_.now();
    auto unix_now = clock_.unix_now();
    double down_s = static_cast<double>(std::max<core::Nanos>(0, downtime)) / core::k_nanos_per_second;
    std::size_t restored = 0;
    auto put = [&](const std::string& key, Bucket b) {
        auto& shard = shards_[shard_of(key)];
        std::lock_guard lock(shard.mutex);
        if (shard.buckets.size() >= max_per_shard_) return;
        shard.buckets.insert_or_assign(key, std::move(b));
        ++restored;
    };
    for (const auto& s : saved.buckets) {
        double tokens = std::min(s.capacity, s.tokens + s.rate_per_s * down_s);
        if (tokens >= s.capacity) continue;
        Bucket b;
        b.rate = limiter::RateBucket::restored(s.capacity, s.rate_per_s, tokens, now);
        put(s.key, std::move(b));
    }
    for (const auto& q : saved.quotas) {
        if (!q.window.contains(unix_now)) continue;
        Bucket b;
        b.is_quota = true;
        b.quota = limiter::QuotaCounter::restored(q.used, q.added, q.window);
        put(q.key, std::move(b));
    }
    return restored;
}

std::size_t MemoryStore::size() const {
    std::size_t n = 0;
    for (const auto& shard : shards_) {
        std::lock_guard lock(shard.mutex);
        n += shard.buckets.size();
    }
    return n;
}

}  // namespace tokengate::store
