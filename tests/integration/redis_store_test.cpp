// The Redis store in-process against a real redis-server: its Lua arithmetic against the
// memory store's on one fake clock, shaping slots, NOSCRIPT, and settlements that wait for
// Redis to come back.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <map>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdlib>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "harness.hpp"
#include "tokengate/core/saturate.hpp"
#include "tokengate/redis/redis_store.hpp"
#include "tokengate/redis/script.hpp"
#include "tokengate/store/memory_store.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using config::Algorithm;
using config::Level;
using config::LimitSpec;
using limiter::Charge;
using limiter::Decision;
namespace net = boost::asio;

LimitSpec spec(std::string name, Algorithm algo, double capacity, double rate,
               config::Unit unit = config::Unit::requests) {
    LimitSpec s;
    s.name = std::move(name);
    s.algorithm = algo;
    s.capacity = capacity;
    s.rate_per_s = rate;
    s.unit = unit;
    return s;
}

Charge charge(const LimitSpec& s, Level level, std::string subject, double amount) {
    return Charge{&s, level, std::string(config::to_string(level)) + ":" + s.name + ":" + subject, amount, {}};
}

/// A RedisStore on the test thread's own event loop.
struct Fixture {
    explicit Fixture(const RedisServer& redis, const core::Clock* script_clock = nullptr,
                     config::OnStoreError on_error = config::OnStoreError::fail_closed, core::Nanos flush_interval = 0)
        : store(make_options(redis, script_clock, on_error, flush_interval), clock, counting(calls)) {
        store.attach(ioc.get_executor(), 1);
        for (auto deadline = std::chrono::steady_clock::now() + 5s;
             !store.ready() && std::chrono::steady_clock::now() < deadline;)
            ioc.run_for(5ms);
    }
    static redis::StoreOptions make_options(const RedisServer& redis, const core::Clock* script_clock,
                                            config::OnStoreError on_error, core::Nanos flush_interval) {
        redis::StoreOptions o;
        o.config.url = redis.url();
        o.config.timeout = 200'000'000;
        o.config.on_error = on_error;
        // 0 unless a test says: each settlement at once, as the arithmetic is compared with the
        // memory store's step by step.
        o.config.flush_interval = flush_interval;
        o.script_clock = script_clock;
        return o;
    }
    Decision run(bool commit, const std::vector<Charge>& charges) {
        std::optional<Decision> out;
        net::co_spawn(ioc, commit ? store.decide(charges) : store.peek(charges),
                      [&](std::exception_ptr, Decision d) { out = std::move(d); });
        for (auto deadline = std::chrono::steady_clock::now() + 5s;
             !out && std::chrono::steady_clock::now() < deadline;)
            ioc.run_for(1ms);
        if (!out) throw std::runtime_error("no decision");
        return *out;
    }
    /// Decisions over each of `charges` that reach the store in one turn of its loop (so they
    /// go to Redis together), in that order.
    std::vector<std::optional<Decision>> decide_in_one_turn(const std::vector<std::vector<Charge>>& charges) {
        std::vector<std::optional<Decision>> out(charges.size());
        for (std::size_t i = 0; i < charges.size(); ++i)
            net::co_spawn(ioc, store.decide(charges[i]),
                          [&out, i](std::exception_ptr, Decision d) { out[i] = std::move(d); });
        run_until([&] { return std::all_of(out.begin(), out.end(), [](const auto& d) { return d.has_value(); }); });
        return out;
    }
    limiter::ShapeQueue::StartCheck turn(const Decision& decision, const Charge& c, std::uint64_t ticket) {
        std::optional<limiter::ShapeQueue::StartCheck> out;
        net::co_spawn(ioc, store.queue_turn(decision, c, ticket),
                      [&](std::exception_ptr, limiter::ShapeQueue::StartCheck check) { out = check; });
        run_until([&] { return out.has_value(); });
        if (!out) throw std::runtime_error("no turn");
        return *out;
    }
    void run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout = 5s) {
        for (auto deadline = std::chrono::steady_clock::now() + timeout;
             !done() && std::chrono::steady_clock::now() < deadline;)
            ioc.run_for(5ms);
    }

    static redis::StoreEvents counting(std::map<std::string, int>& calls) {
        redis::StoreEvents events;
        events.call = [&calls](std::string_view result) { ++calls[std::string(result)]; };
        return events;
    }

    core::SteadyClock clock;
    std::map<std::string, int> calls;  // the store's calls, by result
    net::io_context ioc{1};
    redis::RedisStore store;
};

TEST(RedisStore, LuaArithmeticMatchesTheMemoryStore) {
    REQUIRE_REDIS();
    RedisServer redis;
    // Both stores read this one clock; its wall clock passes midnight (2023-11-15, UTC) a
    // minute in, so the quota below is used up, refuses, and starts its next day in both.
    core::ManualClock fake(core::k_nanos_per_second, (1'700'006'400 - 60) * core::k_nanos_per_second);
    Fixture f(redis, &fake);
    ASSERT_TRUE(f.store.ready());
    store::MemoryStore memory(fake);

    auto tokens = spec("tokens", Algorithm::token_bucket, 1000, 100, config::Unit::cost);
    auto daily = spec("daily", Algorithm::quota, 500, 0, config::Unit::cost);
    daily.zone = core::find_time_zone("UTC");
    auto police = spec("per-ip", Algorithm::leaky_bucket, 5, 2);
    auto slots = spec("slots", Algorithm::concurrency, 3, 0);
    auto shadow = spec("shadow", Algorithm::token_bucket, 2, 1);
    shadow.enforce = false;
    auto partial = spec("partial", Algorithm::token_bucket, 300, 7, config::Unit::cost);
    partial.initial = 0.5;

    struct Held {
        std::vector<Charge> charged;
        double cost;
        limiter::Decision on_redis;
    };
    std::vector<Held> held;
    std::mt19937 rng(42);
    int admitted = 0, refused = 0, quota_refusals = 0, after_midnight = 0;
    for (int step = 0; step < 500; ++step) {
        if (step == 400) {
            // A reload: the same limits with new sizes keep their level in absolute units.
            tokens.capacity = 600;
            tokens.rate_per_s = 40;
            partial.capacity = 900;
        }
        double cost = std::uniform_int_distribution<int>(1, 350)(rng);
        std::vector<Charge> charges = {
            charge(tokens, Level::tenant, "acme", cost), charge(police, Level::ip, "10.0.0.1", 1),
            charge(slots, Level::global, "*", 1),        charge(shadow, Level::tenant, "acme", 1),
            charge(partial, Level::route, "/v1", cost),  charge(daily, Level::tenant, "acme", cost)};
        auto m = memory.decide(charges);
        auto r = f.run(true, charges);
        ASSERT_EQ(m.allowed, r.allowed) << "step " << step;
        ASSERT_EQ(m.rejected, r.rejected) << "step " << step;
        EXPECT_NEAR(static_cast<double>(m.retry_after), static_cast<double>(r.retry_after), 2000) << "step " << step;
        for (std::size_t i = 0; i < charges.size(); ++i) {
            const auto& mv = m.statuses[i].verdict;
            const auto& rv = r.statuses[i].verdict;
            ASSERT_EQ(mv.admitted, rv.admitted) << "step " << step << " limit " << i;
            EXPECT_NEAR(mv.remaining, rv.remaining, 1e-6 * charges[i].spec->capacity)
                << "step " << step << " limit " << i;
            EXPECT_NEAR(static_cast<double>(mv.until_full), static_cast<double>(rv.until_full), 2000)
                << "step " << step << " limit " << i;
            EXPECT_EQ(m.statuses[i].charged, r.statuses[i].charged);
        }
        quota_refusals += !r.allowed && r.rejected == 5;
        after_midnight += r.allowed && fake.unix_now() >= 1'700'006'400 * core::k_nanos_per_second;
        if (r.allowed) {
            ++admitted;
            held.push_back({limiter::charged(charges, r), cost, r});
        } else {
            ++refused;
        }
        // Settle some of those in flight at a random actual cost (refunds and extra charges).
        while (!held.empty() && std::uniform_int_distribution<int>(0, 2)(rng) == 0) {
            auto h = held.front();
            held.erase(held.begin());
            double actual = std::uniform_int_distribution<int>(0, static_cast<int>(h.cost * 1.5))(rng);
            memory.settle(h.charged, config::Amounts{actual}, "");
            f.store.settle(h.on_redis, h.charged, config::Amounts{actual});
        }
        fake.advance(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 400'000)(rng)));
    }
    EXPECT_GT(admitted, 25);
    EXPECT_GT(refused, 50);  // the sequence exercised both sides of every bucket
    EXPECT_GT(quota_refusals, 5) << admitted << " admitted, " << after_midnight << " after midnight";
    EXPECT_GT(after_midnight, 5) << "admitted in the quota's next window";
}

TEST(RedisStore, ExtremeValuesAgreeWithTheMemoryStore) {
    // Costs up to 2^64, rates from 0.001/s to 1e9/s, capacities up to 1e15: the two stores
    // take the same decisions. (Rates and costs are chosen so both sides' arithmetic is exact:
    // whole units, rates that are powers of ten, whole microseconds.)
    REQUIRE_REDIS();
    RedisServer redis;
    core::ManualClock fake;
    Fixture f(redis, &fake);
    ASSERT_TRUE(f.store.ready());
    store::MemoryStore memory(fake);
    std::vector<LimitSpec> specs = {spec("wide-slow", Algorithm::token_bucket, 1e15, 1e-3, config::Unit::cost),
                                    spec("wide-fast", Algorithm::token_bucket, 1e15, 1e9, config::Unit::cost),
                                    spec("issue-14", Algorithm::token_bucket, 50, 0.5, config::Unit::cost),
                                    spec("ten-billion", Algorithm::leaky_bucket, 1e10, 1, config::Unit::cost),
                                    spec("tera", Algorithm::token_bucket, 1e12, 1e3, config::Unit::cost)};
    auto gpu = spec("gpu", Algorithm::leaky_bucket, 10, 0.5, config::Unit::cost);
    gpu.mode = config::LeakyMode::shape;
    gpu.max_wait = 5'000'000'000;
    std::mt19937_64 rng(2026);
    auto draw = [&](double capacity) -> double {
        switch (rng() % 6) {
            case 0: return 18446744073709551616.0;
            case 1: return 3.7e17;
            case 2: return capacity;
            case 3: return capacity + 1;
            default: return std::round(std::exp(std::uniform_real_distribution<double>(0, std::log(capacity))(rng)));
        }
    };
    int admitted = 0, never = 0, refused = 0, boundary = 0;
    std::vector<int> generation(specs.size());
    for (int step = 0; step < 400; ++step) {
        auto which = rng() % specs.size();
        const auto& s = specs[which];
        double cost = draw(s.capacity);
        auto subject = "acme-" + std::to_string(generation[which]);
        std::vector<Charge> charges = {charge(s, Level::tenant, subject, cost)};
        if (step % 4 == 0) charges.push_back(charge(gpu, Level::global, "*", std::min(cost, 2.0)));
        auto before = memory.peek(charges).statuses[0].verdict;  // a copy: the Decision is a temporary
        double level = before.admitted ? before.remaining + cost : before.remaining;  // before this request
        auto m = memory.decide(charges);
        auto r = f.run(true, charges);
        if (m.allowed != r.allowed && std::fabs(level - cost) <= 1e-12 * s.capacity + 1e-3) {
            // Redis keeps microseconds in doubles: at C/R = 1e18 s their step is ~1e-16 of C.
            // A cost on that boundary may fall either way; go on with a fresh bucket.
            ++boundary;
            ++generation[which];
            continue;
        }
        ASSERT_EQ(m.allowed, r.allowed) << "step " << step << " " << s.name << " cost " << cost << " level " << level;
        ASSERT_EQ(m.never(), r.never()) << "step " << step << " " << s.name << " cost " << cost;
        for (std::size_t i = 0; i < charges.size(); ++i) {
            const auto& mv = m.statuses[i].verdict;
            const auto& rv = r.statuses[i].verdict;
            ASSERT_EQ(mv.admitted, rv.admitted) << "step " << step << " limit " << i;
            // Relative to the level too: a debt may now run to -1e18 (SPEC §17).
            EXPECT_NEAR(mv.remaining, rv.remaining,
                        1e-9 * std::max(charges[i].spec->capacity, std::fabs(mv.remaining)) + 1e-3)
                << "step " << step;
            EXPECT_GE(rv.until_full, 0) << "step " << step;
            EXPECT_LE(rv.until_full, core::k_forever) << "step " << step;
        }
        admitted += m.allowed;
        never += m.never();
        refused += !m.allowed && !m.never();
        if (m.allowed && rng() % 2) {  // settle at a hostile actual cost: 2^64 or a full refund
            double actual = rng() % 4 == 0 ? 18446744073709551616.0 : 0;
            memory.settle(limiter::charged(charges, m), config::Amounts{actual}, "");
            f.store.settle(r, limiter::charged(charges, r), config::Amounts{actual});
        }
        fake.advance(std::chrono::microseconds(std::uniform_int_distribution<long>(0, 4'000'000)(rng)));
    }
    EXPECT_GT(admitted, 25);  // this seed admits 40
    EXPECT_GT(never, 40);
    EXPECT_GT(refused, 20);
    EXPECT_LT(boundary, 10) << "disagreements only at the doubles' rounding edge, and rarely";
}

TEST(RedisStore, ShapingHandsOutStartSlotsAtTheRate) {
    REQUIRE_REDIS();
    RedisServer redis;
    core::ManualClock fake;
    Fixture f(redis, &fake);
    auto gpu = spec("gpu", Algorithm::leaky_bucket, 3, 5);
    gpu.mode = config::LeakyMode::shape;
    gpu.max_wait = 5 * core::k_nanos_per_second;
    std::vector<Charge> charges = {charge(gpu, Level::global, "*", 1)};
    std::vector<core::Nanos> waits;
    for (int i = 0; i < 4; ++i) {
        auto d = f.run(true, charges);
        ASSERT_TRUE(d.allowed) << i;
        waits.push_back(d.statuses[0].wait);
    }
    EXPECT_EQ(waits, (std::vector<core::Nanos>{0, 200'000'000, 400'000'000, 600'000'000}));
    // Three wait: the queue (capacity 3) is full.
    auto full = f.run(true, charges);
    EXPECT_FALSE(full.allowed);
    EXPECT_EQ(full.statuses[0].verdict.remaining, 0);
    // 250 ms on, the first waiter has started: one place is free, at the next slot (800 ms).
    fake.advance(250ms);
    auto next = f.run(true, charges);
    ASSERT_TRUE(next.allowed);
    EXPECT_EQ(next.statuses[0].wait, 550'000'000);
}

TEST(RedisStore, ARankedQueueServesClassesInTheMemoryQueuesOrder) {
    REQUIRE_REDIS();
    RedisServer redis;
    core::ManualClock fake;
    Fixture f(redis, &fake);
    store::MemoryStore memory(fake);
    auto gpu = spec("gpu", Algorithm::leaky_bucket, 3, 10);
    gpu.mode = config::LeakyMode::shape;
    gpu.max_wait = 10 * core::k_nanos_per_second;
    gpu.ranked = true;  // tenants of several classes share it
    using config::Priority;
    // One starts at once; a sheddable, a standard and a critical one fill the queue (3); a
    // second critical one takes the sheddable one's place.
    std::vector<Priority> arrivals = {Priority::standard, Priority::sheddable, Priority::standard, Priority::critical,
                                      Priority::critical};
    struct Waiter {
        std::vector<Charge> charges;
        Decision in_memory, in_redis;
        core::Nanos memory_start = -1, redis_start = -1;
        bool memory_displaced = false, redis_displaced = false;
    };
    std::vector<Waiter> waiters;
    for (std::size_t i = 0; i < arrivals.size(); ++i) {
        auto c = charge(gpu, Level::global, "*", 1);
        c.priority = arrivals[i];
        Waiter w{{c}, memory.decide(std::vector<Charge>{c}), f.run(true, {c})};
        ASSERT_TRUE(w.in_memory.allowed) << i;
        ASSERT_TRUE(w.in_redis.allowed) << i;
        EXPECT_EQ(w.in_memory.statuses[0].ticket != 0, w.in_redis.statuses[0].ticket != 0) << i;
        waiters.push_back(std::move(w));
    }
    EXPECT_EQ(waiters[4].in_redis.statuses[0].wait, 200'000'000) << "second in line, behind the first critical one";
    EXPECT_FALSE(f.run(true, {waiters[2].charges}).allowed) << "a standard one: the queue holds none it outranks";
    auto origin = fake.now();
    for (int step = 0; step < 100; ++step) {
        for (auto& w : waiters) {
            auto ticket = w.in_memory.statuses[0].ticket;
            if (!ticket) continue;
            if (w.memory_start < 0 && !w.memory_displaced) {
                auto m = memory.queue_try_start(w.charges[0], ticket);
                if (m.started) w.memory_start = fake.now() - origin;
                w.memory_displaced = m.displaced;
            }
            if (w.redis_start < 0 && !w.redis_displaced) {
                auto r = f.turn(w.in_redis, w.charges[0], w.in_redis.statuses[0].ticket);
                if (r.started) w.redis_start = fake.now() - origin;
                w.redis_displaced = r.displaced;
            }
        }
        fake.advance(10ms);
    }
    for (std::size_t i = 1; i < waiters.size(); ++i) {
        EXPECT_EQ(waiters[i].memory_start, waiters[i].redis_start) << i;
        EXPECT_EQ(waiters[i].memory_displaced, waiters[i].redis_displaced) << i;
    }
    EXPECT_TRUE(waiters[1].redis_displaced) << "the sheddable one";
    EXPECT_EQ(waiters[3].redis_start, 100'000'000) << "the first critical one";
    EXPECT_EQ(waiters[4].redis_start, 200'000'000);
    EXPECT_EQ(waiters[2].redis_start, 300'000'000) << "then the standard one";
}

TEST(RedisStore, NoscriptAfterScriptFlushIsRecovered) {
    REQUIRE_REDIS();
    RedisServer redis;
    Fixture f(redis);
    auto requests = spec("requests", Algorithm::token_bucket, 5, 1);
    std::vector<Charge> charges = {charge(requests, Level::tenant, "acme", 1)};
    ASSERT_TRUE(f.run(true, charges).allowed);
    ASSERT_EQ(redis.command({"SCRIPT", "FLUSH"}), "+OK\r\n");
    auto d = f.run(true, charges);
    EXPECT_TRUE(d.allowed);
    EXPECT_FALSE(d.unavailable);
    EXPECT_NEAR(d.statuses[0].verdict.remaining, 3, 0.5);  // the same bucket: two taken (plus a refill of ms)
    EXPECT_EQ(f.calls["noscript"], 1);
}

TEST(RedisStore, ASettlementThatCannotReachRedisIsRetriedWhenItIsBack) {
    REQUIRE_REDIS();
    RedisServer redis;
    Fixture f(redis);
    auto slots = spec("slots", Algorithm::concurrency, 1, 0);
    std::vector<Charge> charges = {charge(slots, Level::global, "*", 1)};
    auto held = f.run(true, charges);
    ASSERT_TRUE(held.allowed);
    ASSERT_FALSE(f.run(true, charges).allowed);  // the one slot is taken, on Redis

    // Redis stops answering: decisions time out and open the breaker (fail_closed: 503s).
    redis.pause();
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(f.run(true, charges).unavailable);
    EXPECT_TRUE(f.store.breaker_open());
    f.store.settle(held, limiter::charged(charges, held), {});
    // Kept, not lost: the release, and one per timed-out decision (it may have taken a slot
    // after all; releasing a lease that was never taken changes nothing).
    EXPECT_EQ(f.store.settlements_outstanding(), 4u);

    redis.resume();
    // After its cool-down the breaker lets one call through as a probe; its success closes it
    // and the kept release goes out.
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         f.store.breaker_open() && std::chrono::steady_clock::now() < deadline;) {
        f.run(true, {});
        f.ioc.run_for(20ms);
    }
    ASSERT_FALSE(f.store.breaker_open());
    f.run_until([&] { return f.store.settlements_outstanding() == 0; });
    EXPECT_EQ(f.store.settlements_outstanding(), 0u);
    EXPECT_TRUE(f.run(true, charges).allowed) << "the slot was released on Redis";
}

/// Waits until Redis's clock is more than `margin` before a bucket expiry step's end (its 10 s,
/// 1 s on), so that the writes a test makes next, and the tats they set, fall in one step.
void away_from_a_steps_end(RedisServer& redis, std::chrono::milliseconds margin) {
    auto redis_ms = [&] {
        auto t = redis.command({"TIME"});  // *2 $10 <seconds> $n <microseconds>
        auto at = t.find("\r\n", t.find('$')) + 2;
        auto us_at = t.find("\r\n", t.find('$', at)) + 2;
        return std::stoll(t.substr(at, 10)) * 1000 + std::stoll(t.substr(us_at)) / 1000;
    };
    for (int i = 0; i < 100 && (redis_ms() + 1'000) % 10'000 > 10'000 - margin.count(); ++i)
        std::this_thread::sleep_for(50ms);
}

long long key_expiry(RedisServer& redis, const std::string& key) {
    return std::stoll(redis.command({"PEXPIRETIME", key}).substr(1));  // :<ms>
}

TEST(RedisStore, ABucketsExpiryIsSetOncePerStepAndKeptBetween) {
    REQUIRE_REDIS();
    RedisServer redis;
    Fixture f(redis);
    // 1 ms of the bucket's time a unit: the few decisions below stay within one step.
    auto tokens = spec("tokens", Algorithm::token_bucket, 1000, 1000, config::Unit::cost);
    std::vector<Charge> acme = {charge(tokens, Level::tenant, "acme", 1)};
    auto expiry = [&] { return key_expiry(redis, "tg:tenant:tokens:acme"); };
    // Every write below but the last must fall in one step: ~2.3 s under a sanitizer.
    away_from_a_steps_end(redis, 4'000ms);
    ASSERT_TRUE(f.run(true, acme).allowed);
    // The end of the 10 s step in which the bucket is full again plus 1 s (Redis's clock: a
    // millisecond or two of rounding either way).
    auto first = expiry();
    auto step_offset = first % 10'000;
    EXPECT_TRUE(step_offset <= 2 || step_offset >= 9'998) << first;
    auto value = redis.command({"GET", "tg:tenant:tokens:acme"});
    EXPECT_NE(value.find("\r\n+"), std::string::npos) << value;  // written with its expiry aligned
    // Kept, not set again: an expiry no write would set stays (PX would move it back).
    auto odd = std::to_string(first + 1'234);
    ASSERT_EQ(redis.command({"PEXPIREAT", "tg:tenant:tokens:acme", odd}), ":1\r\n");
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(f.run(true, acme).allowed);
    EXPECT_EQ(expiry(), first + 1'234);

    // A state an older gateway wrote (no '+', its own TTL): the next write aligns it again.
    ASSERT_EQ(redis.command({"SET", "tg:tenant:tokens:acme", "1 1000 1", "PX", "3000"}), "+OK\r\n");
    auto old = expiry();
    ASSERT_TRUE(f.run(true, acme).allowed);
    EXPECT_NE(expiry(), old);
    step_offset = expiry() % 10'000;
    EXPECT_TRUE(step_offset <= 2 || step_offset >= 9'998) << expiry();
    // A bucket 20 s in debt ends in a later step: its expiry moves on with it.
    auto before = expiry();
    auto d = f.run(true, acme);
    ASSERT_TRUE(d.allowed);
    f.store.settle(d, limiter::charged(acme, d), config::Amounts{20'001});  // 20,000 more used
    f.run_until([&] { return f.store.settlements_outstanding() == 0; });
    EXPECT_GE(expiry(), before + 10'000);
}

TEST(RedisStore, AFractionalTimeInAStateReadsBackAsTheSameNumber) {
    REQUIRE_REDIS();
    RedisServer redis;
    // Past 2^50 us a time's double steps by 0.25: the script writes its fraction as a quarter's
    // digits, not through %.17g. Costs of 1 to 8 charged at 7/s leave every fraction there is.
    const double now_us = 1'700'000'000'000'000.0;
    core::ManualClock fake(static_cast<core::Nanos>(now_us) * 1000);
    Fixture f(redis, &fake);
    auto tokens = spec("tokens", Algorithm::token_bucket, 1000, 7, config::Unit::cost);
    std::set<double> fractions;
    for (int amount = 1; amount <= 8; ++amount) {
        auto tenant = "t" + std::to_string(amount);
        ASSERT_TRUE(f.run(true, {charge(tokens, Level::tenant, tenant, amount)}).allowed);
        const double tat = now_us + amount * 1e6 / 7;  // the script's own arithmetic
        auto reply = redis.command({"GET", "tg:tenant:tokens:" + tenant});
        auto plus = reply.find("\r\n+");
        ASSERT_NE(plus, std::string::npos) << reply;
        auto text = reply.substr(plus + 3, reply.find(' ', plus) - plus - 3);
        EXPECT_EQ(std::strtod(text.c_str(), nullptr), tat) << text;
        EXPECT_EQ(text.find_first_of("eE"), std::string::npos) << text;
        fractions.insert(tat - std::floor(tat));
    }
    EXPECT_EQ(fractions, (std::set<double>{0, 0.25, 0.5, 0.75})) << "every quarter was written";
}

TEST(RedisStore, ABucketARefundFillsStaysFullUntilItsExpiry) {
    REQUIRE_REDIS();
    RedisServer redis;
    Fixture f(redis);
    auto tokens = spec("tokens", Algorithm::token_bucket, 1000, 1000, config::Unit::cost);
    std::vector<Charge> acme = {charge(tokens, Level::tenant, "acme", 500)};
    const std::string key = "tg:tenant:tokens:acme";
    auto refund_all = [&](const Decision& d) {
        f.store.settle(d, limiter::charged(acme, d), config::Amounts{0});  // none of the 500 used
        f.run_until([&] { return f.store.settlements_outstanding() == 0; });
    };
    // The 500 taken put the tat half a second on: it and the refund after it (the test takes
    // ~1.9 s under a sanitizer) must fall in the step the decision did.
    away_from_a_steps_end(redis, 4'000ms);
    auto d = f.run(true, acme);
    ASSERT_TRUE(d.allowed);
    auto first = key_expiry(redis, key);
    refund_all(d);
    // Full again, and kept with the expiry it had: it would go at this step's end anyway.
    ASSERT_EQ(redis.command({"EXISTS", key}), ":1\r\n");
    EXPECT_EQ(key_expiry(redis, key), first);
    // Read as full, and its expiry kept again.
    auto next = f.run(true, acme);
    ASSERT_TRUE(next.allowed);
    EXPECT_NEAR(next.statuses[0].verdict.remaining, 500, 1);
    EXPECT_EQ(key_expiry(redis, key), first);
    // A state whose expiry is not known to be aligned (an older gateway's) goes once full.
    ASSERT_EQ(redis.command({"SET", key, "1 1000 1000", "PX", "30000"}), "+OK\r\n");
    d = f.run(true, acme);
    ASSERT_TRUE(d.allowed);
    ASSERT_EQ(redis.command({"SET", key, "1 1000 1000", "PX", "30000"}), "+OK\r\n");
    refund_all(d);
    EXPECT_EQ(redis.command({"EXISTS", key}), ":0\r\n");
}

TEST(RedisStore, ADecisionsKeysAreReadInOneMgetUpToAThousand) {
    REQUIRE_REDIS();
    RedisServer redis;
    Fixture f(redis);
    auto requests = spec("requests", Algorithm::token_bucket, 1, 0.001);
    // Past 1000 keys a decision's keys do not fit Lua's stack at once: each is read alone.
    for (int n : {1000, 1001}) {
        std::vector<Charge> charges;
        for (int i = 0; i < n; ++i)
            charges.push_back(charge(requests, Level::tenant, std::to_string(n) + "-" + std::to_string(i), 1));
        ASSERT_EQ(redis.command({"CONFIG", "RESETSTAT"}), "+OK\r\n");
        ASSERT_TRUE(f.run(true, charges).allowed) << n;
        auto refused = f.run(true, charges);
        EXPECT_FALSE(refused.allowed) << n;
        ASSERT_EQ(refused.statuses.size(), static_cast<std::size_t>(n));
        EXPECT_FALSE(refused.statuses.back().verdict.admitted) << n;
        auto stats = redis.command({"INFO", "commandstats"});
        if (n == 1000) {
            EXPECT_NE(stats.find("cmdstat_mget:calls=2,"), std::string::npos) << stats;
            EXPECT_EQ(stats.find("cmdstat_get:"), std::string::npos) << stats;
        } else {
            EXPECT_NE(stats.find("cmdstat_get:calls=2002,"), std::string::npos) << stats;
            EXPECT_EQ(stats.find("cmdstat_mget:"), std::string::npos) << stats;
        }
    }
}

TEST(RedisStore, DecisionsOfOneTurnOfTheLoopGoInOneCallEachOnItsOwn) {
    REQUIRE_REDIS();
    RedisServer redis;
    Fixture f(redis);
    auto requests = spec("requests", Algorithm::token_bucket, 30, 0.001);
    std::vector<Charge> acme = {charge(requests, Level::tenant, "acme", 1)};
    std::vector<Charge> bravo = {charge(requests, Level::tenant, "bravo", 1)};
    ASSERT_EQ(redis.command({"CONFIG", "RESETSTAT"}), "+OK\r\n");
    // 100 requests reach their decision in one turn: 64 go in one call, 36 in the next (at most
    // 64 a call); each tenant's 30 are admitted in the order they came, as one call each would.
    constexpr int n = 100;
    std::vector<std::vector<Charge>> charges;
    for (int i = 0; i < n; ++i) charges.push_back(i % 2 ? bravo : acme);
    auto out = f.decide_in_one_turn(charges);
    int admitted[2] = {0, 0};
    for (int i = 0; i < n; ++i) {
        ASSERT_TRUE(out[i]) << i;
        EXPECT_FALSE(out[i]->unavailable) << i;
        bool expected = i / 2 < 30;  // the i / 2-th of its tenant
        EXPECT_EQ(out[i]->allowed, expected) << i;
        if (out[i]->allowed) {
            ++admitted[i % 2];
            EXPECT_NEAR(out[i]->statuses[0].verdict.remaining, 30 - 1 - i / 2, 0.01) << i;
        }
    }
    EXPECT_EQ(admitted[0], 30);
    EXPECT_EQ(admitted[1], 30);
    auto stats = redis.command({"INFO", "commandstats"});
    EXPECT_NE(stats.find("cmdstat_evalsha:calls=2,"), std::string::npos) << stats;
    // A bucket that many decisions of one call touch is read once and written once a call: a
    // call's keys read in one MGET; written by the first only (the second's are all refused).
    EXPECT_NE(stats.find("cmdstat_mget:calls=2,"), std::string::npos) << stats;
    EXPECT_EQ(stats.find("cmdstat_get:"), std::string::npos) << stats;
    EXPECT_NE(stats.find("cmdstat_set:calls=2,"), std::string::npos) << stats;
    // Alone in its turn, a decision is its own call, as before.
    EXPECT_FALSE(f.run(true, acme).allowed);
    stats = redis.command({"INFO", "commandstats"});
    EXPECT_NE(stats.find("cmdstat_evalsha:calls=3,"), std::string::npos) << stats;
}

// While a worker's call is out, the decisions it reaches wait for that call's answer and then
// go together (fewer, larger calls: SPEC §18), each in the order it came.
TEST(RedisStore, DecisionsReachedWhileACallIsOutGoTogetherWhenItIsAnswered) {
    REQUIRE_REDIS();
    RedisServer redis;
    Fixture f(redis);
    auto requests = spec("requests", Algorithm::token_bucket, 30, 0.001);
    std::vector<Charge> acme = {charge(requests, Level::tenant, "acme", 1)};
    ASSERT_TRUE(f.run(true, acme).allowed);  // connected, the script loaded
    ASSERT_EQ(redis.command({"CONFIG", "RESETSTAT"}), "+OK\r\n");
    std::vector<std::optional<Decision>> out(3);
    auto reach = [&](std::size_t i) {
        net::co_spawn(f.ioc, f.store.decide(acme),
                      [&out, i](std::exception_ptr, Decision d) { out[i] = std::move(d); });
        f.ioc.run_for(20ms);  // its own turns of the loop; the store's timeout is 200 ms
    };
    redis.pause();  // the first call is written and not answered while the others come
    for (std::size_t i = 0; i < out.size(); ++i) reach(i);
    redis.resume();
    f.run_until([&] { return std::all_of(out.begin(), out.end(), [](const auto& d) { return d.has_value(); }); });
    for (std::size_t i = 0; i < out.size(); ++i) {
        ASSERT_TRUE(out[i]) << i;
        EXPECT_FALSE(out[i]->unavailable) << i;
        EXPECT_TRUE(out[i]->allowed) << i;
        EXPECT_NEAR(out[i]->statuses[0].verdict.remaining, 30 - 2 - static_cast<double>(i), 0.01) << i;
    }
    auto stats = redis.command({"INFO", "commandstats"});
    EXPECT_NE(stats.find("cmdstat_evalsha:calls=2,"), std::string::npos) << stats;  // 3 without the wait
}

// A call names a limit's items once and each decision's amount on its own: decisions of one
// call that share a limit but not an amount are each charged their own.
TEST(RedisStore, DecisionsInOneCallEachChargeTheirOwnAmount) {
    REQUIRE_REDIS();
    RedisServer redis;
    Fixture f(redis);
    auto tokens = spec("tokens", Algorithm::token_bucket, 30, 0.001, config::Unit::cost);
    auto slots = spec("slots", Algorithm::concurrency, 100, 0);
    ASSERT_EQ(redis.command({"CONFIG", "RESETSTAT"}), "+OK\r\n");
    // Amounts 1..10 in one turn: 1 + 2 + ... + 7 = 28 fit in 30; 8, 9 and 10 do not.
    constexpr int n = 10;
    std::vector<std::vector<Charge>> charges;
    for (int i = 0; i < n; ++i)
        charges.push_back({charge(tokens, Level::tenant, "acme", i + 1), charge(slots, Level::tenant, "acme", 1)});
    auto out = f.decide_in_one_turn(charges);
    double used = 0;
    for (int i = 0; i < n; ++i) {
        ASSERT_TRUE(out[i]) << i;
        EXPECT_EQ(out[i]->allowed, i < 7) << i;
        if (out[i]->allowed) used += i + 1;
        EXPECT_NEAR(out[i]->statuses[0].verdict.remaining, 30 - used, 0.01) << i;
        // Each limit's own verdict: the slots would admit even a request the tokens refuse.
        EXPECT_EQ(out[i]->statuses[1].verdict.remaining, 100 - std::min(i, 7) - 1) << i;
    }
    auto stats = redis.command({"INFO", "commandstats"});
    EXPECT_NE(stats.find("cmdstat_evalsha:calls=1,"), std::string::npos) << stats;
}

// In one call, a decision that holds a slot under its lease sends the lease; one that holds
// nothing sends none (its shape and amounts alone): each is read back with its own.
TEST(RedisStore, DecisionsWithAndWithoutALeaseShareACall) {
    REQUIRE_REDIS();
    RedisServer redis;
    Fixture f(redis);
    auto tokens = spec("tokens", Algorithm::token_bucket, 30, 0.001, config::Unit::cost);
    auto slots = spec("slots", Algorithm::concurrency, 100, 0);
    ASSERT_EQ(redis.command({"CONFIG", "RESETSTAT"}), "+OK\r\n");
    constexpr int n = 10;
    std::vector<std::vector<Charge>> charges;
    for (int i = 0; i < n; ++i)
        charges.push_back(i % 2 ? std::vector<Charge>{charge(tokens, Level::tenant, "bravo", 2)}
                                : std::vector<Charge>{charge(slots, Level::tenant, "acme", 1),
                                                      charge(tokens, Level::tenant, "acme", 1)});
    auto out = f.decide_in_one_turn(charges);
    for (int i = 0; i < n; ++i) {
        ASSERT_TRUE(out[i]) << i;
        ASSERT_TRUE(out[i]->allowed) << i;
        if (i % 2) {
            EXPECT_NEAR(out[i]->statuses[0].verdict.remaining, 30 - 2 * (i / 2 + 1), 0.01) << i;
        } else {
            EXPECT_EQ(out[i]->statuses[0].verdict.remaining, 100 - i / 2 - 1) << i;
            EXPECT_NEAR(out[i]->statuses[1].verdict.remaining, 30 - (i / 2 + 1), 0.01) << i;
        }
    }
    // Five slots, each under its own decision's lease.
    EXPECT_EQ(redis.command({"ZCARD", "tg:tenant:slots:acme"}), ":5\r\n");
    auto stats = redis.command({"INFO", "commandstats"});
    EXPECT_NE(stats.find("cmdstat_evalsha:calls=1,"), std::string::npos) << stats;
}

TEST(RedisStore, ABatchAppliesEachMarkersSettlementsOnceAllOrNone) {
    REQUIRE_REDIS();
    RedisServer redis;
    auto tokens = spec("tokens", Algorithm::token_bucket, 1000, 0.001, config::Unit::cost);
    auto acme = charge(tokens, Level::tenant, "acme", 0);
    // A settlement of `used` more than reserved: lease_return_call gives back -used.
    auto settlement = [&](double used) {
        acme.amount = -used;
        return redis::lease_return_call("", redis::KeySpace{"tg:"}, acme, redis::KeySpace{"tg:"}.marker(acme), -1).args;
    };
    auto level = [&] {
        auto v = redis.command({"GET", "tg:tenant:tokens:acme"});
        return v.substr(v.find("\r\n") + 2, v.find(' ') - v.find("\r\n") - 2);
    };
    auto send = [&](std::vector<std::vector<std::string>> batch, std::string_view id) {
        redis::seal_markers(batch, id, false);
        auto args = redis::settle_batch_call("", batch).args;
        redis::as_eval(args);
        return redis.command(args);
    };
    // A batch not sealed is refused whole, before it writes anything.
    std::vector<std::vector<std::string>> not_sealed{settlement(100)};
    auto unsealed = redis::settle_batch_call("", not_sealed).args;
    redis::as_eval(unsealed);
    EXPECT_NE(redis.command(unsealed).find("unsealed settlement marker"), std::string::npos);
    EXPECT_EQ(redis.command({"EXISTS", "tg:tenant:tokens:acme"}), ":0\r\n");
    // 300 more used, in two settlements under B1's one marker.
    ASSERT_EQ(send({settlement(100), settlement(200)}, "B1"), ":1\r\n");
    auto after_b1 = level();
    auto debt = [&](const std::string& tat) { return std::stod(tat); };
    // Both applied: 300 units at 0.001/s put the bucket 3e11 us past Redis's now.
    auto time = redis.command({"TIME"});  // *2 $10 <seconds> ...
    auto seconds = std::stod(time.substr(time.find("\r\n", time.find('$')) + 2, 10));
    EXPECT_NEAR(debt(after_b1) - seconds * 1e6, 3e11, 5e6);
    // B1 sent again (its reply lost): nothing more. With a new one beside it in B2, only that.
    auto b1 = std::vector{settlement(100), settlement(200)};
    redis::seal_markers(b1, "B1", false);
    auto b2 = b1;
    b2.push_back(settlement(50));
    ASSERT_EQ(send(b1, "B9"), ":1\r\n");
    EXPECT_EQ(level(), after_b1);
    ASSERT_EQ(send(b2, "B2"), ":1\r\n");
    // 50 units at 0.001/s is 50,000 s of time at the bucket: 5e10 us more, once.
    EXPECT_NEAR(debt(level()) - debt(after_b1), 5e10, 1e7);
}

TEST(RedisStore, SettlementsGoInOneCallPerFlushInterval) {
    REQUIRE_REDIS();
    RedisServer redis;
    Fixture f(redis, nullptr, config::OnStoreError::fail_closed, 5'000'000);
    auto slots = spec("slots", Algorithm::concurrency, 300, 0);
    auto tokens = spec("tokens", Algorithm::token_bucket, 100000, 0.001, config::Unit::cost);
    std::vector<Charge> charges = {charge(slots, Level::global, "*", 1), charge(tokens, Level::tenant, "acme", 100)};
    std::vector<Decision> held;
    for (int i = 0; i < 300; ++i) {
        held.push_back(f.run(true, charges));
        ASSERT_TRUE(held.back().allowed);
    }
    ASSERT_FALSE(f.run(true, charges).allowed);  // every slot taken
    auto calls_before = f.calls["ok"];
    ASSERT_EQ(redis.command({"CONFIG", "RESETSTAT"}), "+OK\r\n");
    config::Amounts used;
    used.cost = 40;  // each gives 60 back
    for (const auto& d : held) f.store.settle(d, limiter::charged(charges, d), used);
    // 256 wait: they go at once; the other 44 when the interval is up.
    EXPECT_EQ(f.store.settlements_outstanding(), 300u);
    f.run_until([&] { return f.store.settlements_outstanding() == 0; });
    EXPECT_EQ(f.calls["ok"] - calls_before, 2);
    auto stats = redis.command({"INFO", "commandstats"});
    EXPECT_NE(stats.find("cmdstat_evalsha:calls=2,"), std::string::npos) << stats;
    // One marker per batch, not one per settlement: the keys Redis keeps for two minutes.
    EXPECT_EQ(redis.command({"EVAL", "return #redis.call('KEYS', ARGV[1])", "0", "tg:settled:*"}), ":2\r\n");
    // Every slot back, every refund made: 100000 - 300 * 40 = 88000 left.
    auto d = f.run(false, charges);
    EXPECT_TRUE(d.allowed);
    EXPECT_NEAR(d.statuses[0].verdict.remaining, 299, 0.5);
    EXPECT_NEAR(d.statuses[1].verdict.remaining, 88000 - 100, 1);
}

}  // namespace
}  // namespace tokengate::testing
