// store.redis.mode: cluster through the real binary (SPEC §18): a 3-master Redis Cluster of the
// test's own; a tenant's decision is one call on its slot's master; slots move under load.

#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "harness.hpp"
#include "tokengate/core/clock.hpp"
#include "tokengate/redis/cluster.hpp"
#include "tokengate/redis/redis_store.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds timeout = 20s) {
    for (auto deadline = steady::now() + timeout; steady::now() < deadline; std::this_thread::sleep_for(20ms))
        if (done()) return true;
    return done();
}

/// Where a tenant's keys live in mode cluster (the gateway's hash tag, SPEC §18).
std::string tenant_key(const std::string& tenant, const std::string& limit) {
    return "{tgc:t:" + tenant + "}tenant:" + limit + ":" + tenant;
}

/// A tenant name whose keys' slot is below `below` (the first of node 0's slots, which a
/// reshard from node 0 moves first), or at least `above`.
std::string tenant_in_slots(const std::string& stem, unsigned below, unsigned above = 16384) {
    for (int i = 0;; ++i) {
        auto name = stem + std::to_string(i);
        auto slot = redis::key_slot(tenant_key(name, "x"));
        if (slot < below || slot >= above) return name;
    }
}

/// `tier` for each tenant; with `global`, a global limit (leased) that every request meets.
std::string cluster_config(const RedisCluster& cluster, const std::vector<std::string>& tenants,
                           const std::string& tier, bool global = false) {
    std::string config = "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n";
    if (global)
        config += "global_limits:\n  - { name: all, algorithm: token_bucket, capacity: 100000, rate: 1000/s }\n";
    config += "tiers:\n  t:\n    limits:\n" + tier + "tenants:\n";
    for (const auto& t : tenants) config += "  - { id: " + t + ", tier: t, keys: [\"k-" + t + "\"] }\n";
    return config +
           "store:\n  backend: redis\n  leases: { fraction: 0.01, min_period: 200ms }\n  redis:\n    mode: cluster\n"
           "    nodes: " +
           cluster.seeds() + "\n    prefix: \"tgc:\"\n    timeout: 200ms\n    on_error: fail_closed\n";
}

Response chat(const GatewayUnderTest& gw, const std::string& tenant) {
    return gw.request(Request{
        "POST", "/v1/chat/completions", {{"Authorization", "Bearer k-" + tenant}}, chat_body("m", "hi", 1, false)});
}

double calls(const GatewayUnderTest& gw, const std::string& result) {
    auto m = gw.admin(Request{"GET", "/metrics", {}, ""}).body;
    auto line = "tokengate_redis_calls_total{result=\"" + result + "\"} ";
    auto at = m.find(line);
    return at == std::string::npos ? 0 : std::stod(m.substr(at + line.size()));
}

/// A slot's migration up to its keys moved, as redis-cli does it: importing on `to`, migrating
/// on `from`, every key of the slot moved. What went wrong, or "".
std::string start_migration(const RedisCluster& cluster, const std::string& slot, std::size_t from, std::size_t to) {
    auto& source = const_cast<RedisCluster&>(cluster).node(from);
    auto& target = const_cast<RedisCluster&>(cluster).node(to);
    if (auto r = target.command({"CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.id(from)}); r != "+OK\r\n") return r;
    if (auto r = source.command({"CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.id(to)}); r != "+OK\r\n") return r;
    std::vector<std::string> migrate{"MIGRATE", "127.0.0.1", std::to_string(target.port()), "", "0", "5000", "KEYS"};
    auto keys = source.command({"CLUSTER", "GETKEYSINSLOT", slot, "100"});
    for (std::size_t at = keys.find("\r\n$"); at != std::string::npos; at = keys.find("\r\n$", at + 1)) {
        auto start = keys.find("\r\n", at + 2) + 2;
        migrate.push_back(keys.substr(start, keys.find("\r\n", start) - start));
    }
    if (migrate.size() == 7) return "no keys in slot " + slot + ": " + keys;
    if (auto r = source.command(migrate); r != "+OK\r\n") return r;
    return "";
}

/// Ends it: every node told the slot is `to`'s.
std::string end_migration(const RedisCluster& cluster, const std::string& slot, std::size_t to) {
    auto id = cluster.id(to);
    for (std::size_t i = 0; i < cluster.size(); ++i)
        if (auto r = const_cast<RedisCluster&>(cluster).node(i).command({"CLUSTER", "SETSLOT", slot, "NODE", id});
            r != "+OK\r\n")
            return r;
    return "";
}

double admitted_by(const GatewayUnderTest& gw) {
    return metric_total(gw.admin(Request{"GET", "/metrics", {}, ""}).body, "tokengate_admitted_total");
}

long remaining(const Response& r) { return std::stol(r.header("x-ratelimit-remaining-requests")); }

TEST(RedisCluster, TwoGatewaysShareATenantLimitExactlyOnItsShard) {
    REQUIRE_REDIS();
    RedisCluster cluster;
    // Three tenants on three different masters.
    std::vector<std::string> tenants;
    for (int i = 0; tenants.size() < 3; ++i) {
        auto name = "c" + std::to_string(i);
        if (cluster.owner_of(tenant_key(name, "hourly")) == tenants.size()) tenants.push_back(name);
    }
    // The slots' settlements go in batches of many slots, one per master (keys not declared).
    auto config = cluster_config(cluster, tenants,
                                 "      - { name: hourly, algorithm: token_bucket, capacity: 7, rate: 7/h }\n"
                                 "      - { name: inflight, algorithm: concurrency, max: 50 }\n",
                                 true);
    GatewayUnderTest a(config), b(config);
    for (const auto& t : tenants) {
        int admitted = 0, limited = 0;
        for (int i = 0; i < 12; ++i) {
            auto status = chat(i % 2 ? b : a, t).status;
            admitted += status == 200;
            limited += status == 429;
        }
        EXPECT_EQ(admitted, 7) << t << "\n" << a.log();
        EXPECT_EQ(limited, 5) << t;
        // Its bucket is on the master that serves its slot, and on no other.
        auto key = tenant_key(t, "hourly");
        auto owner = cluster.owner_of(key);
        ASSERT_LT(owner, cluster.size());
        EXPECT_EQ(cluster.node(owner).command({"EXISTS", key}), ":1\r\n") << t;
    }
    // Every slot taken was given back, on the tenant's own master.
    ASSERT_TRUE(a.wait_settled(admitted_by(a), 10s));
    ASSERT_TRUE(b.wait_settled(admitted_by(b), 10s));
    for (const auto& t : tenants) {
        auto key = tenant_key(t, "inflight");
        auto& owner = cluster.node(cluster.owner_of(key));
        EXPECT_TRUE(wait_for(
            [&] {
                return owner.command({"ZCARD", key}) == ":0\r\n";
            },
            5s))
            << t << ": " << owner.command({"ZCARD", key});
    }
    // Each tenant's keys were on a different master: all three served.
    std::set<std::size_t> owners;
    for (const auto& t : tenants) owners.insert(cluster.owner_of(tenant_key(t, "hourly")));
    EXPECT_EQ(owners.size(), 3u);
    // The leased global limit lives under its own tag, on its own slot's master.
    EXPECT_LT(cluster.owner_of("{tgc:global:all:}"), cluster.size());
    EXPECT_EQ(calls(a, "moved") + calls(b, "moved"), 0);
}

TEST(RedisCluster, FollowsAskWhileATenantsSlotMigratesAndStaysExact) {
    REQUIRE_REDIS();
    RedisCluster cluster;
    auto tenant = tenant_in_slots("m", 5000);  // node 0's
    auto key = tenant_key(tenant, "hourly");
    auto slot = std::to_string(redis::key_slot(key));
    GatewayUnderTest gw(cluster_config(
        cluster, {tenant}, "      - { name: hourly, algorithm: token_bucket, capacity: 100, rate: 1/h }\n"));
    ASSERT_EQ(chat(gw, tenant).status, 200) << gw.log();
    ASSERT_EQ(cluster.owner_of(key), 0u);

    // The slot migrates by hand, step by step, as redis-cli does. Node 0 now answers ASK for it.
    ASSERT_TRUE(gw.wait_settled(1, 5s));
    ASSERT_EQ(start_migration(cluster, slot, 0, 1), "");
    auto& to = cluster.node(1);

    auto during = chat(gw, tenant);
    EXPECT_EQ(during.status, 200) << gw.log();
    EXPECT_GE(calls(gw, "ask"), 1);

    // The migration ends: the slot is node 1's, and node 0 answers MOVED.
    ASSERT_EQ(end_migration(cluster, slot, 1), "");
    Response last;
    for (int i = 0; i < 5; ++i) {
        last = chat(gw, tenant);
        EXPECT_EQ(last.status, 200) << gw.log();
    }
    // Followed at once (the MOVED reply), or learnt from the next CLUSTER SLOTS if that came
    // first: TheStoreFollowsAskOnceAndMovedAtOnce shows the former without that race.
    // Exact across the move: 7 taken of 100, none twice, none lost.
    EXPECT_EQ(remaining(last), 100 - 7);
    EXPECT_EQ(cluster.owner_of(key), 1u);
    EXPECT_TRUE(gw.wait_settled(7, 10s));
    EXPECT_EQ(to.command({"EXISTS", key}), ":1\r\n");
}

TEST(RedisCluster, TheStoreFollowsAskOnceAndMovedAtOnce) {
    REQUIRE_REDIS();
    RedisCluster cluster;
    namespace net = boost::asio;
    // The test runs the store's one event loop itself: no CLUSTER SLOTS poll can come between
    // a slot's move and the next call, so the call meets the MOVED.
    net::io_context ioc{1};
    core::SteadyClock clock;
    std::map<std::string, int> results;
    redis::StoreOptions options;
    options.config.mode = config::RedisMode::cluster;
    options.config.prefix = "tgc:";
    options.config.timeout = 500'000'000;
    options.config.on_error = config::OnStoreError::fail_closed;
    std::vector<redis::Endpoint> seeds;
    for (std::size_t i = 0; i < cluster.size(); ++i)
        seeds.push_back(redis::Endpoint::parse("redis://127.0.0.1:" + std::to_string(cluster.node(i).port())));
    options.cluster =
        std::make_shared<redis::Cluster>(ioc.get_executor(), seeds, std::vector<std::vector<std::string>>{}, nullptr);
    redis::StoreEvents events;
    events.call = [&results](std::string_view result) { ++results[std::string(result)]; };
    redis::RedisStore store(options, clock, events);
    store.attach(ioc.get_executor(), 1);
    auto run_until = [&](const std::function<bool()>& done, std::chrono::milliseconds timeout = 5s) {
        for (auto deadline = steady::now() + timeout; !done() && steady::now() < deadline;) ioc.run_for(5ms);
        return done();
    };
    auto tenant = tenant_in_slots("s", 5000);
    config::LimitSpec spec;
    spec.name = "hourly";
    spec.algorithm = config::Algorithm::token_bucket;
    spec.capacity = 10;
    spec.rate_per_s = 10.0 / 3600;
    std::vector<limiter::Charge> charges = {
        {&spec, config::Level::tenant, ("tenant:hourly:" + tenant).c_str(), 1, tenant, {}, {}}};
    auto key = tenant_key(tenant, "hourly");
    auto slot = std::to_string(redis::key_slot(key));
    ASSERT_TRUE(run_until([&] { return store.ready() && options.cluster->map()->node_of(0) >= 0; }));
    auto decide = [&] {
        std::optional<limiter::Decision> out;
        net::co_spawn(ioc, store.decide(charges), [&](std::exception_ptr, limiter::Decision d) { out = std::move(d); });
        run_until([&] { return out.has_value(); });
        return out.value();
    };
    ASSERT_TRUE(decide().allowed);
    EXPECT_EQ(cluster.node(0).command({"EXISTS", key}), ":1\r\n");

    ASSERT_EQ(start_migration(cluster, slot, 0, 1), "");
    auto during = decide();
    EXPECT_TRUE(during.allowed);
    EXPECT_EQ(during.keeper, limiter::Keeper::shared);
    EXPECT_EQ(results["ask"], 1);
    EXPECT_EQ(store.redirects_followed(), 1u);

    ASSERT_EQ(end_migration(cluster, slot, 1), "");
    auto after = decide();
    EXPECT_TRUE(after.allowed);
    EXPECT_EQ(results["moved"], 1);
    // The map says so now: the next call goes to node 1 straight away.
    EXPECT_TRUE(decide().allowed);
    EXPECT_EQ(results["moved"], 1);
    EXPECT_EQ(store.redirects_followed(), 2u);
    // 4 taken, in the one bucket, wherever it was: 6 left.
    EXPECT_EQ(static_cast<int>(decide().statuses[0].verdict.remaining), 5);
    EXPECT_EQ(results["error"] + results["timeout"] + results["unavailable"], 0);
    store.stop();
}

TEST(RedisCluster, AReshardUnderLoadCostsNoClientAnError) {
    REQUIRE_REDIS();
    RedisCluster cluster;
    auto tenant = tenant_in_slots("r", 300);  // among the first slots a reshard of node 0 moves
    auto key = tenant_key(tenant, "hourly");
    GatewayUnderTest gw(cluster_config(
        cluster, {tenant}, "      - { name: hourly, algorithm: token_bucket, capacity: 100000, rate: 1/h }\n"));
    ASSERT_EQ(chat(gw, tenant).status, 200) << gw.log();
    ASSERT_EQ(cluster.owner_of(key), 0u);

    std::atomic<bool> stop{false};
    std::atomic<int> admitted{1}, failed{0};
    std::mutex mutex;
    std::map<int, int> statuses;
    std::vector<std::thread> clients;
    for (int i = 0; i < 4; ++i)
        clients.emplace_back([&] {
            while (!stop) {
                auto status = chat(gw, tenant).status;
                admitted += status == 200;
                failed += status != 200;
                std::lock_guard lock(mutex);
                ++statuses[status];
            }
        });
    // A master joins, empty, and takes 400 slots of node 0's, the tenant's among them: the
    // gateway meets it first in a redirection.
    std::this_thread::sleep_for(500ms);
    auto added = cluster.add_master();
    auto output = cluster.reshard(0, added, 400);
    std::this_thread::sleep_for(1s);
    stop = true;
    for (auto& c : clients) c.join();

    EXPECT_EQ(cluster.owner_of(key), added) << output;
    EXPECT_EQ(failed, 0) << "statuses: " << [&] {
        std::string s;
        for (auto [status, n] : statuses) s += std::to_string(status) + "×" + std::to_string(n) + " ";
        return s;
    }() << "\n" << gw.log();
    EXPECT_GT(admitted, 100);
    EXPECT_GE(calls(gw, "moved"), 1);
    // Exact across the reshard: every admission taken once, in whichever master had the slot.
    auto last = chat(gw, tenant);
    ASSERT_EQ(last.status, 200);
    EXPECT_EQ(remaining(last), 100000 - admitted - 1);
    std::cout << admitted
              << " admitted while a new master joined and took 400 slots; redirections: " << calls(gw, "moved")
              << " MOVED, " << calls(gw, "ask") << " ASK, " << calls(gw, "tryagain") << " TRYAGAIN\n";
}

TEST(RedisCluster, KeysMadeAtRunTimeAreKeptOnTheBooksMasterForEveryReplica) {
    REQUIRE_REDIS();
    RedisCluster cluster;
    auto config = cluster_config(cluster, {"acme"},
                                 "      - { name: hourly, algorithm: token_bucket, capacity: 100, rate: 100/h }\n");
    GatewayUnderTest a(config), b(config);
    ASSERT_EQ(a.admin(Request{"POST", "/admin/tenants", {}, R"({"id": "initech", "tier": "t"})"}).status, 201)
        << a.log();
    auto made = a.admin(Request{"POST", "/admin/tenants/initech/keys", {}, R"({"name": "shared"})"});
    ASSERT_EQ(made.status, 201) << made.body;
    auto at = made.body.find("\"key\":\"");
    ASSERT_NE(at, std::string::npos) << made.body;
    auto secret = made.body.substr(at + 7, made.body.find('"', at + 7) - at - 7);
    auto with = [&](const GatewayUnderTest& gw) {
        return gw
            .request(Request{"POST",
                             "/v1/chat/completions",
                             {{"Authorization", "Bearer " + secret}},
                             chat_body("m", "hi", 1, false)})
            .status;
    };
    EXPECT_EQ(with(a), 200);
    EXPECT_TRUE(wait_for([&] { return with(b) == 200; }, 5s)) << b.log();
    // One slot for the whole book, on the master that serves it.
    auto owner = cluster.owner_of("tgc:{auth}:keys");
    ASSERT_LT(owner, cluster.size());
    EXPECT_EQ(cluster.node(owner).command({"HLEN", "tgc:{auth}:keys"}), ":1\r\n");
}

TEST(RedisCluster, AMasterDownRefusesOnlyTheTenantsItServes) {
    REQUIRE_REDIS();
    RedisCluster cluster;
    auto down = tenant_in_slots("d", 5461);       // node 0's
    auto up = tenant_in_slots("u", 0, 5462 * 2);  // node 2's
    GatewayUnderTest gw(cluster_config(
        cluster, {down, up}, "      - { name: hourly, algorithm: token_bucket, capacity: 100000, rate: 1/h }\n"));
    ASSERT_EQ(chat(gw, down).status, 200) << gw.log();
    ASSERT_EQ(chat(gw, up).status, 200);
    ASSERT_EQ(cluster.owner_of(tenant_key(up, "hourly")), 2u);

    cluster.node(0).pause();  // answers nothing: each call to it times out, then its breaker opens
    int down_refused = 0, up_admitted = 0;
    for (int i = 0; i < 10; ++i) {
        down_refused += chat(gw, down).status == 503;
        up_admitted += chat(gw, up).status == 200;
    }
    EXPECT_EQ(down_refused, 10);
    EXPECT_EQ(up_admitted, 10) << gw.log();
    auto m = gw.admin(Request{"GET", "/metrics", {}, ""}).body;
    EXPECT_EQ(metric_total(m, "tokengate_redis_breaker_open"), 1);
    EXPECT_TRUE(gw.log_contains("unavailable (timeout): on_error fail_closed applies to the tenants it serves"));

    cluster.node(0).resume();
    EXPECT_TRUE(wait_for([&] { return chat(gw, down).status == 200; }, 10s)) << gw.log();
}

}  // namespace
}  // namespace tokengate::testing
