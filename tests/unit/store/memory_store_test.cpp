#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tokengate/store/memory_store.hpp"

namespace tokengate::store {
namespace {

using namespace std::chrono_literals;
using config::Algorithm;
using config::Level;
using config::LimitSpec;
using limiter::Charge;

LimitSpec spec(std::string name, double capacity, double rate, Algorithm algo = Algorithm::token_bucket) {
    LimitSpec s;
    s.name = std::move(name);
    s.algorithm = algo;
    s.capacity = capacity;
    s.rate_per_s = rate;
    return s;
}

Charge charge(const LimitSpec& s, Level level, std::string subject, double amount = 1) {
    return Charge{&s, level, std::string(config::to_string(level)) + ":" + s.name + ":" + subject, amount, {}};
}

TEST(MemoryStore, AllOrNothing) {
    core::ManualClock clock;
    MemoryStore store(clock);
    auto tenant = spec("requests", 10, 1);
    auto global = spec("gpu", 1, 1);
    std::vector<Charge> charges = {charge(tenant, Level::tenant, "acme"), charge(global, Level::global, "*")};
    ASSERT_TRUE(store.decide(charges).allowed);
    // Tenant has room, global is empty: refused, names global, tenant untouched.
    auto refused = store.decide(charges);
    ASSERT_FALSE(refused.allowed);
    EXPECT_EQ(refused.rejected, 1);
    EXPECT_EQ(refused.statuses[1].spec->name, "gpu");
    EXPECT_FALSE(refused.statuses[0].charged);
    EXPECT_DOUBLE_EQ(refused.statuses[0].verdict.remaining, 8) << "what it would have left";
    std::vector<Charge> tenant_only = {charge(tenant, Level::tenant, "acme")};
    EXPECT_DOUBLE_EQ(store.decide(tenant_only).statuses[0].verdict.remaining, 8)
        << "one charge from the first decision, one from this: none from the refused one";
}

TEST(MemoryStore, RejectionNamesTheLongestWait) {
    core::ManualClock clock;
    MemoryStore store(clock);
    auto fast = spec("fast", 1, 10);
    auto slow = spec("slow", 1, 0.1);
    std::vector<Charge> charges = {charge(fast, Level::tenant, "t"), charge(slow, Level::global, "*")};
    store.decide(charges);
    auto d = store.decide(charges);
    ASSERT_FALSE(d.allowed);
    EXPECT_EQ(d.rejected, 1);
    EXPECT_EQ(d.retry_after, 10 * core::k_nanos_per_second);
}

TEST(MemoryStore, ShadowLimitsNeverReject) {
    core::ManualClock clock;
    MemoryStore store(clock);
    auto shadow = spec("shadow", 1, 1);
    shadow.enforce = false;
    std::vector<Charge> charges = {charge(shadow, Level::tenant, "t")};
    EXPECT_TRUE(store.decide(charges).allowed);
    auto d = store.decide(charges);
    EXPECT_TRUE(d.allowed);
    EXPECT_FALSE(d.statuses[0].verdict.admitted) << "the would-reject is visible";
    EXPECT_FALSE(d.statuses[0].charged);
}

TEST(MemoryStore, ConcurrencyReleasedBySettlement) {
    core::ManualClock clock;
    MemoryStore store(clock);
    auto inflight = spec("inflight", 2, 0, Algorithm::concurrency);
    std::vector<Charge> charges = {charge(inflight, Level::tenant, "t")};
    auto a = store.decide(charges);
    auto b = store.decide(charges);
    ASSERT_TRUE(a.allowed && b.allowed);
    EXPECT_FALSE(store.decide(charges).allowed);
    store.settle(limiter::charged(charges, a), config::Amounts{1}, "");
    EXPECT_TRUE(store.decide(charges).allowed);
}

TEST(MemoryStore, CostSettlementRefunds) {
    core::ManualClock clock;
    MemoryStore store(clock);
    auto tokens = spec("tokens", 100, 10);
    tokens.unit = config::Unit::cost;
    std::vector<Charge> charges = {charge(tokens, Level::tenant, "t", 60)};
    auto d = store.decide(charges);
    ASSERT_TRUE(d.allowed);
    EXPECT_DOUBLE_EQ(d.statuses[0].verdict.remaining, 40);
    store.settle(limiter::charged(charges, d), config::Amounts{20}, "");  // actual cost 20: refund 40
    std::vector<Charge> probe = {charge(tokens, Level::tenant, "t", 1)};
    EXPECT_DOUBLE_EQ(store.decide(probe).statuses[0].verdict.remaining, 79);
}

TEST(MemoryStore, EvictsIdleBuckets) {
    core::ManualClock clock;
    MemoryStore store(clock);
    auto s = spec("requests", 10, 1);
    for (int i = 0; i < 100; ++i) {
        std::vector<Charge> c = {charge(s, Level::ip, "10.0.0." + std::to_string(i))};
        store.decide(c);
    }
    EXPECT_EQ(store.size(), 100u);
    EXPECT_EQ(store.evict_idle(), 0u) << "not yet full again";
    clock.advance(1s);
    EXPECT_EQ(store.evict_idle(), 100u);
    EXPECT_EQ(store.size(), 0u);
}

TEST(MemoryStore, ConcurrentDecisionsNeverOverAdmit) {
    core::ManualClock clock;
    MemoryStore store(clock);
    auto s = spec("requests", 1000, 0.001);
    std::atomic<int> admitted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&] {
            std::vector<Charge> c = {charge(s, Level::tenant, "hot")};
            for (int i = 0; i < 1000; ++i)
                if (store.decide(c).allowed) admitted.fetch_add(1);
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(admitted.load(), 1000);
}

}  // namespace
}  // namespace tokengate::store

namespace tokengate::store {
namespace {

TEST(MemoryStore, MintedKeysCannotGrowTheTableWithoutBound) {
    core::ManualClock clock;
    MemoryStore store(clock, /*max_buckets=*/640);
    auto per_ip = spec("per-ip", 10, 0.001);
    for (int i = 0; i < 10000; ++i) {
        std::vector<Charge> c = {
            charge(per_ip, Level::ip, "10.0." + std::to_string(i / 256) + "." + std::to_string(i % 256))};
        ASSERT_TRUE(store.decide(c).allowed);
    }
    EXPECT_LE(store.size(), 640u);
    // A bucket holding a concurrency slot is never dropped to make room.
    auto inflight = spec("inflight", 1, 0, Algorithm::concurrency);
    std::vector<Charge> held = {charge(inflight, Level::tenant, "acme")};
    ASSERT_TRUE(store.decide(held).allowed);
    for (int i = 0; i < 10000; ++i) {
        std::vector<Charge> c = {charge(per_ip, Level::ip, "192.168.0." + std::to_string(i))};
        store.decide(c);
    }
    EXPECT_FALSE(store.decide(held).allowed) << "the slot is still taken";
}

}  // namespace
}  // namespace tokengate::store

namespace tokengate::store {
namespace {

TEST(MemoryStore, PeekChangesNothing) {
    core::ManualClock clock;
    MemoryStore store(clock);
    auto s = spec("requests", 2, 1);
    std::vector<Charge> c = {charge(s, Level::tenant, "t")};
    for (int i = 0; i < 5; ++i) EXPECT_TRUE(store.peek(c).allowed);
    EXPECT_EQ(store.size(), 0u) << "no bucket is created";
    store.decide(c);
    auto p = store.peek(c);
    EXPECT_TRUE(p.allowed);
    EXPECT_DOUBLE_EQ(p.statuses[0].verdict.remaining, 0);
    EXPECT_FALSE(p.statuses[0].charged);
    EXPECT_TRUE(store.decide(c).allowed) << "the peek did not spend the last token";
    EXPECT_FALSE(store.decide(c).allowed);
}

}  // namespace
}  // namespace tokengate::store
