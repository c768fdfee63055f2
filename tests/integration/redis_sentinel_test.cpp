// store.redis.mode: sentinel through the real binary (SPEC §18): a master, its replica and
// three sentinels of the test's own; the master is killed, or handed over, under load.

#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "harness.hpp"
#include "tokengate/core/clock.hpp"
#include "tokengate/redis/redis_store.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

constexpr const char* k_master_name = "tgmaster";

bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds timeout = 20s) {
    for (auto deadline = steady::now() + timeout; steady::now() < deadline; std::this_thread::sleep_for(20ms))
        if (done()) return true;
    return done();
}

/// A master, a replica of it, and three sentinels watching it, ready for a failover.
struct SentinelSet {
    RedisServer master;
    RedisServer replica{{"--replicaof", "127.0.0.1", std::to_string(master.port())}};
    std::vector<std::unique_ptr<RedisSentinel>> sentinels;

    SentinelSet() {
        for (int i = 0; i < 3; ++i) sentinels.push_back(std::make_unique<RedisSentinel>(k_master_name, master.port()));
    }
    /// The replica has the master's writes, and the sentinels know each other and the replica.
    bool ready() const {
        return wait_for([&] {
            return master.commands({{"SET", "tg-probe", "1"}, {"WAIT", "1", "1000"}}) == "+OK\r\n:1\r\n" &&
                   sentinels[0]->command({"SENTINEL", "ckquorum", k_master_name}).starts_with("+OK 3 usable") &&
                   sentinels[0]->command({"SENTINEL", "replicas", k_master_name}).starts_with("*1");
        });
    }
    std::string nodes() const {
        std::string list;
        for (const auto& s : sentinels)
            list += (list.empty() ? "\"127.0.0.1:" : ", \"127.0.0.1:") + std::to_string(s->port()) + "\"";
        return "[" + list + "]";
    }
    unsigned short named_master() const {
        for (const auto& s : sentinels)
            if (auto port = s->master_port(k_master_name)) return port;
        return 0;
    }
};

/// `acme` holds at most 4 requests at once (the slots a lost settlement would leak); `exact`
/// may make 5 requests an hour.
std::string sentinel_config(const SentinelSet& set) {
    return "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
           "tiers:\n"
           "  busy:\n    limits:\n      - { name: inflight, algorithm: concurrency, max: 4 }\n"
           "  hourly:\n    limits:\n      - { name: requests, algorithm: token_bucket, capacity: 5, rate: 5/h }\n"
           "tenants:\n  - { id: acme, tier: busy, keys: [\"k-acme\"] }\n"
           "  - { id: exact, tier: hourly, keys: [\"k-exact\"] }\n"
           "store:\n  backend: redis\n  redis:\n    mode: sentinel\n    master: " +
           std::string(k_master_name) + "\n    nodes: " + set.nodes() +
           "\n    prefix: \"tgs:\"\n    timeout: 100ms\n    on_error: fail_closed\n";
}

Response chat(const GatewayUnderTest& gw, const std::string& key, int max_tokens = 1) {
    return gw.request(Request{
        "POST", "/v1/chat/completions", {{"Authorization", "Bearer " + key}}, chat_body("m", "hi", max_tokens, false)});
}

struct Outcome {
    steady::time_point sent;
    int status;
};

TEST(RedisSentinel, FollowsThePromotedReplicaWithinTwoSecondsAndLosesNoSettlement) {
    REQUIRE_REDIS();
    SentinelSet set;
    ASSERT_TRUE(set.ready());
    GatewayUnderTest gw(sentinel_config(set));
    ASSERT_TRUE(wait_for([&] { return chat(gw, "k-acme").status == 200; })) << gw.log();

    // Four clients keep acme's four slots busy: every answer takes ~30 ms upstream.
    std::atomic<bool> stop{false};
    std::mutex mutex;
    std::vector<Outcome> outcomes;
    std::vector<std::thread> clients;
    for (int i = 0; i < 4; ++i)
        clients.emplace_back([&] {
            while (!stop) {
                auto sent = steady::now();
                auto status = chat(gw, "k-acme", 30).status;
                std::lock_guard lock(mutex);
                outcomes.push_back({sent, status});
                if (status != 200) std::this_thread::sleep_for(5ms);
            }
        });
    std::this_thread::sleep_for(1s);
    auto killed = steady::now();
    set.master.kill();
    // The sentinels' own decision, as a client of theirs sees it.
    ASSERT_TRUE(wait_for([&] { return set.named_master() == set.replica.port(); }, 30s));
    auto switched = steady::now();
    std::this_thread::sleep_for(3s);
    stop = true;
    for (auto& c : clients) c.join();

    std::optional<steady::time_point> first_after;
    int before = 0, refused_between = 0, admitted_between = 0, after = 0;
    for (const auto& o : outcomes) {
        if (o.sent < killed) {
            before += o.status == 200;
        } else if (o.sent > killed + 200ms && o.sent < switched - 300ms) {
            // Sentinels take ~1 s to agree the master is down: on_error (fail_closed) meanwhile.
            refused_between += o.status == 503;
            admitted_between += o.status == 200;
        } else if (o.sent >= switched && o.status == 200) {
            ++after;
            if (!first_after || o.sent < *first_after) first_after = o.sent;
        }
    }
    EXPECT_GT(before, 20);
    EXPECT_GT(refused_between, 0);
    EXPECT_EQ(admitted_between, 0);
    ASSERT_TRUE(first_after) << gw.log();
    EXPECT_LE(*first_after - switched, 2s)
        << "admitted again only "
        << std::chrono::duration_cast<std::chrono::milliseconds>(*first_after - switched).count()
        << " ms after the sentinels switched";
    EXPECT_GT(after, 20);
    std::cout << "admitted again "
              << std::chrono::duration_cast<std::chrono::milliseconds>(*first_after - switched).count()
              << " ms after the sentinels named the new master (the master was killed "
              << std::chrono::duration_cast<std::chrono::milliseconds>(switched - killed).count()
              << " ms before that)\n";

    // Every slot taken is given back on the new master: no settlement was lost on the way
    // (one the old master answered but no replica had is sent again, and applied once).
    double admitted = 0;
    for (const auto& o : outcomes) admitted += o.status == 200;
    ASSERT_TRUE(gw.wait_settled(admitted));
    // Settled in the gateway, then written to Redis: wait for the writes, not for a guess.
    EXPECT_TRUE(wait_for(
        [&] {
            return set.replica.command({"ZCARD", "tgs:tenant:inflight:acme"}) == ":0\r\n";
        },
        5s))
        << set.replica.command({"ZCARD", "tgs:tenant:inflight:acme"});
    auto metrics = gw.admin(Request{"GET", "/metrics", {}, ""}).body;
    EXPECT_EQ(metric_total(metrics, "tokengate_redis_settlements_dropped_total"), 0);

    // And the new master enforces exactly: 5 of 8, counted in Redis.
    int passed = 0, limited = 0;
    for (int i = 0; i < 8; ++i) {
        auto status = chat(gw, "k-exact").status;
        passed += status == 200;
        limited += status == 429;
    }
    EXPECT_EQ(passed, 5);
    EXPECT_EQ(limited, 3);
    EXPECT_EQ(set.replica.command({"EXISTS", "tgs:tenant:requests:exact"}), ":1\r\n");
}

TEST(RedisSentinel, LeavesAMasterTheSentinelsDemotedWhileItStillAnswers) {
    REQUIRE_REDIS();
    SentinelSet set;
    ASSERT_TRUE(set.ready());
    GatewayUnderTest gw(sentinel_config(set));
    ASSERT_TRUE(wait_for([&] { return chat(gw, "k-exact").status == 200; })) << gw.log();
    EXPECT_EQ(set.master.command({"EXISTS", "tgs:tenant:requests:exact"}), ":1\r\n");

    // A manual failover: the old master lives on as a replica (it would answer READONLY).
    ASSERT_EQ(set.sentinels[0]->command({"SENTINEL", "failover", k_master_name}), "+OK\r\n");
    ASSERT_TRUE(wait_for([&] { return set.named_master() == set.replica.port(); }, 30s));
    // The next bucket is made on the new master, within the 2 s.
    set.replica.command({"DEL", "tgs:tenant:requests:exact"});
    auto switched = steady::now();
    ASSERT_TRUE(wait_for([&] { return chat(gw, "k-exact").status == 200; }, 5s)) << gw.log();
    EXPECT_LE(steady::now() - switched, 2s);
    EXPECT_EQ(set.replica.command({"EXISTS", "tgs:tenant:requests:exact"}), ":1\r\n");
    EXPECT_TRUE(gw.log_contains("the master of tgmaster is 127.0.0.1:" + std::to_string(set.replica.port())));
}

TEST(RedisSentinel, ASettlementCountsAsWrittenOnlyOnceAReplicaHasIt) {
    REQUIRE_REDIS();
    SentinelSet set;
    ASSERT_TRUE(set.ready());
    namespace net = boost::asio;
    net::io_context ioc{1};
    core::SteadyClock clock;
    std::map<std::string, int> calls;
    redis::StoreOptions options;
    options.config.mode = config::RedisMode::sentinel;
    options.config.url = "redis:///0";
    options.config.timeout = 100'000'000;
    options.config.on_error = config::OnStoreError::fail_closed;
    std::vector<redis::Endpoint> sentinels;
    for (const auto& s : set.sentinels)
        sentinels.push_back(redis::Endpoint::parse("redis://127.0.0.1:" + std::to_string(s->port())));
    options.sentinels = std::make_shared<redis::Sentinels>(ioc.get_executor(), sentinels, k_master_name,
                                                           redis::Endpoint::parse(options.config.url),
                                                           std::vector<std::vector<std::string>>{}, nullptr);
    options.sentinels->start();
    redis::StoreEvents events;
    events.call = [&calls](std::string_view result) { ++calls[std::string(result)]; };
    redis::RedisStore store(options, clock, events);
    store.attach(ioc.get_executor(), 1);
    store.start_heartbeat(ioc.get_executor());
    auto run_until = [&](const std::function<bool()>& done, std::chrono::milliseconds timeout = 5s) {
        for (auto deadline = steady::now() + timeout; !done() && steady::now() < deadline;) ioc.run_for(5ms);
        return done();
    };
    ASSERT_TRUE(run_until([&] { return store.ready(); }));

    // 1000 cost an hour; a request reserves 300 and uses 100: its settlement gives back 200.
    config::LimitSpec tokens;
    tokens.name = "tokens";
    tokens.algorithm = config::Algorithm::token_bucket;
    tokens.capacity = 1000;
    tokens.rate_per_s = 1000.0 / 3600;
    tokens.unit = config::Unit::cost;
    std::vector<limiter::Charge> charges = {{&tokens, config::Level::tenant, "tenant:tokens:acme", 300, {}}};
    auto decide = [&](bool commit) {
        std::optional<limiter::Decision> out;
        net::co_spawn(ioc, commit ? store.decide(charges) : store.peek(charges),
                      [&](std::exception_ptr, limiter::Decision d) { out = std::move(d); });
        run_until([&] { return out.has_value(); });
        return out.value();
    };
    auto held = decide(true);
    ASSERT_TRUE(held.allowed);
    ASSERT_EQ(held.keeper, limiter::Keeper::shared);
    // The heartbeat's ROLE has told the store its master has a replica by now.
    ioc.run_for(1500ms);

    // The replica stops reading: the master applies the settlement at once, but no replica
    // confirms it, so it is not counted as written and is sent again until one does.
    set.replica.pause();
    config::Amounts used;
    used.cost = 100;
    store.settle(held, limiter::charged(charges, held), used);
    ioc.run_for(600ms);
    EXPECT_GE(store.settlements_outstanding(), 1u);
    EXPECT_GE(calls["unreplicated"], 1);
    set.replica.resume();
    EXPECT_TRUE(run_until([&] { return store.settlements_outstanding() == 0; }));
    // Sent more than once, applied once: 1000 - 300 + 200 = 900 (twice would be 1000), less
    // the 300 this peek would take, plus a few seconds' refill.
    auto after = decide(false);
    EXPECT_GE(after.statuses[0].verdict.remaining, 599.5);
    EXPECT_LE(after.statuses[0].verdict.remaining, 605);
    store.stop();
}

}  // namespace
}  // namespace tokengate::testing
