// Redis Cluster's arithmetic and replies, as the store reads them (SPEC §18).

#include <gtest/gtest.h>

#include "tokengate/redis/cluster.hpp"
#include "tokengate/redis/script.hpp"

namespace tokengate::redis {
namespace {

TEST(KeySlot, MatchesRedisClusterKeyslot) {
    // As `CLUSTER KEYSLOT` answers on a real server.
    EXPECT_EQ(key_slot("foo"), 12182);
    EXPECT_EQ(key_slot("a"), 15495);
    EXPECT_EQ(key_slot("b"), 3300);
    EXPECT_EQ(key_slot("c"), 7365);
    // The hash tag: the text between the first '{' and the next '}', unless empty.
    EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
    EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
    EXPECT_EQ(key_slot("foo{}{bar}"), key_slot(std::string("foo{}{bar}")));
    EXPECT_NE(key_slot("foo{}{bar}"), key_slot("bar"));
    EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));
    EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
    EXPECT_EQ(key_slot("{unclosed"), key_slot(std::string("{unclosed")));
    EXPECT_LT(key_slot(std::string(1 << 20, '\xff')), k_cluster_slots);
}

TEST(KeySlot, CallsAreRoutedByTheirFirstKey) {
    std::vector<std::string> call{"EVALSHA", "sha", "2", "{t}a", "{t}b", "decide"};
    EXPECT_EQ(call_slot(call), key_slot("t"));
    std::vector<std::string> batch{"EVALSHA", "sha", "0", "settle_batch"};
    EXPECT_FALSE(call_slot(batch));
    std::vector<std::string> short_call{"PING"};
    EXPECT_FALSE(call_slot(short_call));
}

Reply integer(long long v) {
    Reply r;
    r.type = Reply::Type::integer;
    r.integer = v;
    return r;
}
Reply text(std::string s, Reply::Type type = Reply::Type::string) {
    Reply r;
    r.type = type;
    r.str = std::move(s);
    return r;
}
Reply array(std::vector<Reply> elements) {
    Reply r;
    r.type = Reply::Type::array;
    r.elements = std::move(elements);
    return r;
}

TEST(ClusterSlots, ReadsRangesAndTheirMasters) {
    auto asked = Endpoint::parse("rediss://10.0.0.9:7000");
    auto reply = array({array({integer(0), integer(5460), array({text("10.0.0.1"), integer(7001), text("id1")}),
                               array({text("10.0.0.4"), integer(7004), text("id4")})}),
                        array({integer(5461), integer(16383), array({text(""), integer(7002), text("id2")})})});
    auto ranges = parse_cluster_slots(reply, asked);
    ASSERT_TRUE(ranges);
    ASSERT_EQ(ranges->size(), 2u);
    EXPECT_EQ((*ranges)[0].first, 0u);
    EXPECT_EQ((*ranges)[0].last, 5460u);
    EXPECT_EQ((*ranges)[0].host, "10.0.0.1");
    EXPECT_EQ((*ranges)[0].port, 7001);
    // An empty host is the one that was asked.
    EXPECT_EQ((*ranges)[1].host, "10.0.0.9");
    EXPECT_EQ((*ranges)[1].last, 16383u);
}

TEST(ClusterSlots, RefusesWhatNoClusterWouldSay) {
    auto asked = Endpoint::parse("redis://127.0.0.1:7000");
    auto range = [](long long first, long long last, long long port) {
        return array({array({integer(first), integer(last), array({text("h"), integer(port)})})});
    };
    EXPECT_FALSE(parse_cluster_slots(range(0, 16384, 7000), asked));
    EXPECT_FALSE(parse_cluster_slots(range(10, 5, 7000), asked));
    EXPECT_FALSE(parse_cluster_slots(range(-1, 5, 7000), asked));
    EXPECT_FALSE(parse_cluster_slots(range(0, 5, 0), asked));
    EXPECT_FALSE(parse_cluster_slots(range(0, 5, 70000), asked));
    EXPECT_FALSE(parse_cluster_slots(text("nope"), asked));
    EXPECT_FALSE(parse_cluster_slots(array({array({integer(0)})}), asked));
    EXPECT_TRUE(parse_cluster_slots(array({}), asked));
}

TEST(ClusterRedirect, ReadsMovedAndAsk) {
    auto like = Endpoint::parse("rediss://127.0.0.1:7000");
    auto moved = parse_redirect(text("MOVED 3999 10.0.0.2:7002", Reply::Type::error), like);
    ASSERT_TRUE(moved);
    EXPECT_FALSE(moved->ask);
    EXPECT_EQ(moved->slot, 3999);
    EXPECT_EQ(moved->to.host, "10.0.0.2");
    EXPECT_EQ(moved->to.port, 7002);
    EXPECT_TRUE(moved->to.tls);  // the scheme is the cluster's
    auto ask = parse_redirect(text("ASK 16383 ::1:7003", Reply::Type::error), like);
    ASSERT_TRUE(ask);
    EXPECT_TRUE(ask->ask);
    EXPECT_EQ(ask->slot, 16383);
    EXPECT_EQ(ask->to.port, 7003);
    for (const char* bad : {"MOVED 16384 h:1", "MOVED x h:1", "MOVED 1", "MOVED 1 h", "MOVED 1 h:0", "ASK 1 h:99999",
                            "TRYAGAIN Multiple keys", "ERR nope"})
        EXPECT_FALSE(parse_redirect(text(bad, Reply::Type::error), like)) << bad;
    // A value that reads like one is not a redirection: only an error reply is.
    EXPECT_FALSE(parse_redirect(text("MOVED 1 h:1"), like));
}

TEST(KeySpace, ATenantsKeysShareItsSlotAndSharedLimitsHaveTheirOwn) {
    config::LimitSpec rate, quota;
    rate.name = "rpm";
    quota.name = "monthly";
    quota.algorithm = config::Algorithm::quota;
    limiter::Charge tenant{&rate, config::Level::tenant, "tenant:rpm:acme", 1, "acme", {}, {}};
    limiter::Charge monthly{&quota, config::Level::tenant, "tenant:monthly:acme", 1, "acme", {}, {}};
    limiter::Charge global{&rate, config::Level::global, "global:rpm:", 1, "acme", {}, {}};
    core::CalendarWindow window;
    window.start = 1'700'000'000LL * core::k_nanos_per_second;

    KeySpace standalone{"tg:"};
    EXPECT_EQ(standalone.key(tenant), "tg:tenant:rpm:acme");
    EXPECT_EQ(standalone.key(monthly, window), "tg:tenant:monthly:acme:1700000000");
    EXPECT_EQ(standalone.marker(tenant), "tg:settled:");
    EXPECT_EQ(standalone.key(global), "tg:global:rpm:");

    KeySpace cluster{"tg:", true};
    EXPECT_EQ(cluster.key(tenant), "{tg:t:acme}tenant:rpm:acme");
    EXPECT_EQ(cluster.key(monthly, window), "{tg:t:acme}tenant:monthly:acme:1700000000");
    EXPECT_EQ(cluster.marker(tenant), "{tg:t:acme}settled:");
    EXPECT_EQ(cluster.key(global), "{tg:global:rpm:}");
    EXPECT_EQ(cluster.marker(global), "{tg:global:rpm:}settled:");
    auto slot = key_slot(cluster.key(tenant));
    EXPECT_EQ(key_slot(cluster.key(monthly, window)), slot);
    EXPECT_EQ(key_slot(cluster.marker(tenant) + "B1"), slot);
    EXPECT_EQ(key_slot(cluster.key(global)), key_slot(cluster.marker(global) + "B1"));
}

TEST(KeySpace, AClusterBatchNamesItsKeysAsArguments) {
    std::vector<std::vector<std::string>> settlements{
        {"EVALSHA", "s", "1", "{tg:t:a}k1", "settle", "", "L1", "{tg:t:a}settled:L1", "r", "10", "1", "-2"},
        {"EVALSHA", "s", "1", "{tg:t:b}k2", "settle", "", "L2", "", "c", "4", "0", "1"}};
    auto declared = settle_batch_call("sha", settlements, true).args;
    EXPECT_EQ(declared[2], "2");
    EXPECT_EQ(declared[3], "{tg:t:a}k1");
    EXPECT_EQ(declared[5], "settle_batch");
    auto cluster = settle_batch_call("sha", settlements, false).args;
    std::vector<std::string> expected{
        "EVALSHA", "sha", "0", "settle_batch", "",  "2",  "{tg:t:a}k1", "{tg:t:b}k2", "1", "L1", "{tg:t:a}settled:L1",
        "r",       "10",  "1", "-2",           "1", "L2", "",           "c",          "4", "0",  "1"};
    EXPECT_EQ(cluster, expected);
}

TEST(KeySpace, ABatchSealsItsNewSettlementsWithOneMarkerPerTag) {
    auto settlement = [](std::string key, std::string marker, std::string now) {
        return std::vector<std::string>{"EVALSHA", "s", "1", key, "settle", now, "L", marker, "r", "10", "1", "-2"};
    };
    std::vector<std::vector<std::string>> batch{
        settlement("{tg:t:b}k", "{tg:t:b}settled:", "5"),
        settlement("{tg:t:a}k", "{tg:t:a}settled:B0", "7"),  // sent before, in batch B0: keeps it
        settlement("{tg:t:c}k", "", "6"),                    // a release only: no marker
        settlement("{tg:t:a}k", "{tg:t:a}settled:", "2"), settlement("{tg:t:b}k", "{tg:t:b}settled:", "3")};
    auto flat = batch;
    seal_markers(flat, "B1", false);
    std::vector<std::string> markers;
    for (const auto& s : flat) markers.push_back(s[7]);
    EXPECT_EQ(markers, (std::vector<std::string>{"{tg:t:b}settled:B1", "{tg:t:a}settled:B0", "", "{tg:t:a}settled:B1",
                                                 "{tg:t:b}settled:B1"}));
    // Sealing again changes nothing: a retried batch keeps its markers.
    auto again = flat;
    seal_markers(again, "B2", false);
    EXPECT_EQ(again, flat);

    // In a cluster, each marker's settlements side by side, in the order they came.
    seal_markers(batch, "B1", true);
    markers.clear();
    std::vector<std::string> times;
    for (const auto& s : batch) markers.push_back(s[7]), times.push_back(s[5]);
    EXPECT_EQ(markers, (std::vector<std::string>{"", "{tg:t:a}settled:B0", "{tg:t:a}settled:B1", "{tg:t:b}settled:B1",
                                                 "{tg:t:b}settled:B1"}));
    EXPECT_EQ(times, (std::vector<std::string>{"6", "7", "2", "5", "3"}));
    // One time for the batch: the latest of them, wherever it is.
    EXPECT_EQ(settle_batch_call("sha", batch, false).args[4], "7");
}

}  // namespace
}  // namespace tokengate::redis
