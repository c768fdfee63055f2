#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <random>

#include "tokengate/redis/breaker.hpp"
#include "tokengate/redis/connection.hpp"
#include "tokengate/redis/script.hpp"
#include "tokengate/store/memory_store.hpp"

namespace tokengate::redis {
namespace {

using namespace std::chrono_literals;

TEST(CircuitBreaker, OpensAfterConsecutiveFailuresAndProbesOncePerCooldown) {
    core::ManualClock clock;
    std::vector<bool> changes;
    CircuitBreaker b(clock, 3, core::k_nanos_per_second, [&](bool open) { changes.push_back(open); });
    b.record(false);
    b.record(false);
    b.record(true);  // a success resets the run
    b.record(false);
    b.record(false);
    EXPECT_FALSE(b.open());
    b.record(false);
    EXPECT_TRUE(b.open());
    EXPECT_FALSE(b.allow());
    clock.advance(999ms);
    EXPECT_FALSE(b.allow());
    clock.advance(1ms);
    EXPECT_TRUE(b.allow());   // the probe
    EXPECT_FALSE(b.allow());  // only one
    b.record(false);          // the probe failed: another cool-down
    EXPECT_TRUE(b.open());
    EXPECT_FALSE(b.allow());
    clock.advance(1s);
    EXPECT_TRUE(b.allow());
    b.record(true);
    EXPECT_FALSE(b.open());
    EXPECT_TRUE(b.allow());
    EXPECT_EQ(changes, (std::vector<bool>{true, false}));
}

TEST(Endpoint, ParsesRedisUrls) {
    auto e = Endpoint::parse("redis://10.1.2.3:6380/2");
    EXPECT_EQ(e.host, "10.1.2.3");
    EXPECT_EQ(e.port, 6380);
    EXPECT_EQ(e.db, 2);
    auto d = Endpoint::parse("redis://cache");
    EXPECT_EQ(d.host, "cache");
    EXPECT_EQ(d.port, 6379);
    EXPECT_EQ(d.db, 0);
    EXPECT_FALSE(d.tls);
    auto t = Endpoint::parse("rediss://cache.example:6380/1");  // TLS (managed Redis)
    EXPECT_TRUE(t.tls);
    EXPECT_EQ(t.host, "cache.example");
    EXPECT_EQ(t.port, 6380);
    EXPECT_EQ(t.db, 1);
    EXPECT_THROW(Endpoint::parse("http://x"), std::invalid_argument);
    EXPECT_THROW(Endpoint::parse("redisss://x"), std::invalid_argument);
    EXPECT_THROW(Endpoint::parse("redis://:secret@host:6379"), std::invalid_argument);
    EXPECT_THROW(Endpoint::parse("redis://host:99999"), std::invalid_argument);
    EXPECT_THROW(Endpoint::parse("redis://host:6379/x"), std::invalid_argument);
}

TEST(Resp, EncodesCommandsAndReadsRepliesInPieces) {
    std::string out;
    std::vector<std::string> args = {"SET", "k", std::string("a\r\nb", 4)};
    encode_command(out, args);
    EXPECT_EQ(out, std::string("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n"));

    ReplyReader reader;
    std::string wire = "*3\r\n:7\r\n$5\r\nhello\r\n$-1\r\n-NOSCRIPT No matching script\r\n";
    Reply r;
    for (char c : wire.substr(0, 10)) reader.feed(&c, 1);
    EXPECT_EQ(reader.next(r), ReplyReader::Next::incomplete);
    reader.feed(wire.data() + 10, wire.size() - 10);
    ASSERT_EQ(reader.next(r), ReplyReader::Next::reply);
    ASSERT_EQ(r.type, Reply::Type::array);
    ASSERT_EQ(r.elements.size(), 3u);
    EXPECT_EQ(r.elements[0].integer, 7);
    EXPECT_EQ(r.elements[1].str, "hello");
    EXPECT_EQ(r.elements[2].type, Reply::Type::nil);
    ASSERT_EQ(reader.next(r), ReplyReader::Next::reply);
    EXPECT_TRUE(r.is_error());
    EXPECT_EQ(r.str, "NOSCRIPT No matching script");
    EXPECT_EQ(reader.next(r), ReplyReader::Next::incomplete);
    reader.feed("?bad\r\n", 6);
    EXPECT_EQ(reader.next(r), ReplyReader::Next::protocol_error);
    EXPECT_FALSE(reader.error().empty());
}

// The reader builds replies straight into Reply (hiredis's object functions): nested arrays
// (CLUSTER SLOTS, ROLE) each in their parent's place, a reply left half-read by a reset gone.
TEST(Resp, ReadsNestedRepliesIntoTheirPlaces) {
    ReplyReader reader;
    std::string wire = "*3\r\n*2\r\n:1\r\n*1\r\n+OK\r\n*0\r\n*-1\r\n";
    reader.feed(wire.data(), wire.size());
    Reply r;
    ASSERT_EQ(reader.next(r), ReplyReader::Next::reply);
    ASSERT_EQ(r.elements.size(), 3u);
    ASSERT_EQ(r.elements[0].elements.size(), 2u);
    EXPECT_EQ(r.elements[0].elements[0].integer, 1);
    ASSERT_EQ(r.elements[0].elements[1].elements.size(), 1u);
    EXPECT_EQ(r.elements[0].elements[1].elements[0].type, Reply::Type::status);
    EXPECT_EQ(r.elements[0].elements[1].elements[0].str, "OK");
    EXPECT_EQ(r.elements[1].type, Reply::Type::array);
    EXPECT_TRUE(r.elements[1].elements.empty());
    EXPECT_EQ(r.elements[2].type, Reply::Type::nil);

    reader.feed("*2\r\n:5\r\n", 8);
    EXPECT_EQ(reader.next(r), ReplyReader::Next::incomplete);
    reader.reset();  // a reconnect: the half-read reply is dropped
    reader.feed(":9\r\n", 4);
    ASSERT_EQ(reader.next(r), ReplyReader::Next::reply);
    EXPECT_EQ(r.type, Reply::Type::integer);
    EXPECT_EQ(r.integer, 9);
    EXPECT_TRUE(r.elements.empty());
}

long resident_kib() {
    std::ifstream statm("/proc/self/statm");
    long pages = 0, resident = 0;
    statm >> pages >> resident;
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// A Redis (or whatever answers on its port) that announces a billion elements and sends two
// gets two elements' worth of memory, not gigabytes at the announcement.
TEST(Resp, AnAnnouncedSizeIsNotAllocatedAhead) {
    ReplyReader reader;
    auto before = resident_kib();
    std::string wire = "*1000000000\r\n:1\r\n*300000000\r\n:2\r\n";
    reader.feed(wire.data(), wire.size());
    Reply r;
    EXPECT_EQ(reader.next(r), ReplyReader::Next::incomplete);
    EXPECT_LT(resident_kib() - before, 64 * 1024) << "KiB resident after the announcement";
    reader.reset();
    std::string small = "*2\r\n:1\r\n:2\r\n";
    reader.feed(small.data(), small.size());
    ASSERT_EQ(reader.next(r), ReplyReader::Next::reply);
    ASSERT_EQ(r.elements.size(), 2u);
    EXPECT_EQ(r.elements[1].integer, 2);
}

TEST(ScriptCalls, SettleOnlyWhatSettlementChanges) {
    config::LimitSpec requests, tokens, slots;
    requests.name = "requests";
    requests.capacity = 10;
    requests.rate_per_s = 1;
    tokens = requests;
    tokens.name = "tokens";
    tokens.unit = config::Unit::cost;
    slots.name = "slots";
    slots.algorithm = config::Algorithm::concurrency;
    slots.capacity = 2;
    std::vector<limiter::Charge> charged = {{&requests, config::Level::tenant, "tenant:requests:a", 1, {}},
                                            {&tokens, config::Level::tenant, "tenant:tokens:a", 40, {}},
                                            {&slots, config::Level::global, "global:slots:*", 1, {}}};
    auto call = settle_call("sha", KeySpace{"tg:"}, charged, config::Amounts{25}, "lease1", -1);
    // EVALSHA sha 2 keys... settle now lease marker, then 4 per key.
    ASSERT_EQ(call.args.size(), 3u + 2 + 4 + 8);
    EXPECT_EQ(call.args[2], "2");
    EXPECT_EQ(call.args[3], "tg:tenant:tokens:a");
    EXPECT_EQ(call.args[4], "tg:global:slots:*");
    EXPECT_EQ(call.args[8], "tg:settled:");  // sealed by the batch that first carries it
    EXPECT_EQ(call.args[12], "-15");         // 25 actual - 40 reserved
    EXPECT_EQ(call.args[16], "1");           // the lease's amount, as decide wrote it
    // Nothing to settle: no call at all.
    EXPECT_TRUE(
        settle_call("sha", KeySpace{"tg:"}, std::span(charged).first(1), config::Amounts{25}, "l", -1).args.empty());
}

TEST(MemoryStoreShare, StandsInWithEachLimitDividedAndFull) {
    core::ManualClock clock;
    store::MemoryStore local(clock);
    config::LimitSpec s;
    s.name = "requests";
    s.capacity = 6;
    s.rate_per_s = 1;
    s.initial = 0;  // a normal bucket would start empty; the stand-in starts full
    local.set_share_divisor(3);
    std::vector<limiter::Charge> c = {{&s, config::Level::tenant, "tenant:requests:a", 1, {}}};
    EXPECT_TRUE(local.decide(c).allowed);
    EXPECT_TRUE(local.decide(c).allowed);
    auto third = local.decide(c);
    EXPECT_FALSE(third.allowed);                                                     // 6 ÷ 3 = 2
    EXPECT_EQ(third.statuses[0].verdict.retry_after, core::k_nanos_per_second * 3);  // rate 1/s ÷ 3
}

TEST(RedisScript, DecisionsTakenTogetherKeepEachOnesArguments) {
    std::vector<std::vector<std::string>> decisions{
        {"EVALSHA", "s", "2", "k1", "k2", "decide", "",  "",  "",  "r", "10", "1", "1",
         "1",       "1", "0", "0",  "r",  "20",     "2", "1", "1", "1", "0",  "0"},
        {"EVALSHA", "s", "1", "k3", "decide", "", "L2", "600000", "c", "4", "0", "1", "1", "0", "0", "0"}};
    // Copied first: a call takes its decisions' keys and items (their key counts stay).
    std::vector<std::vector<std::string>> same_tenant{decisions[0], decisions[0], decisions[0], decisions[1]};
    auto different_amount = decisions[0];
    different_amount[9 + 3] = "7";  // the first limit's amount
    auto different_capacity = decisions[0];
    different_capacity[17 + 1] = "21";  // the second limit's capacity
    std::vector<std::vector<std::string>> mixed{decisions[0], different_amount, different_capacity};
    auto call = decide_many_call("sha", decisions).args;
    // A limit's items but its amount once (the amount left empty); each shape once (its
    // limits' count, and their places among them); then each decision's shape and each
    // limit's amount, the shape negated when a lease and its length follow it (the
    // concurrency limit's decision holds a slot).
    // clang-format off
    std::vector<std::string> expected{
        "EVALSHA", "sha", "3", "k1", "k2", "k3", "decide_many", "", "0",
        "3", "r", "10", "1", "", "1", "1", "0", "0",
             "r", "20", "2", "", "1", "1", "0", "0",
             "c", "4", "0", "", "1", "0", "0", "0",
        "2", "2", "1", "2",
             "1", "3",
        "1", "1", "1",
        "-2", "L2", "600000", "1"};
    // clang-format on
    EXPECT_EQ(call, expected);
    EXPECT_EQ(decisions[0][2], "2");
    EXPECT_EQ(decisions[1][2], "1");
    // Keys that more than one decision touches are named once, after the time and their count.
    auto shared = decide_many_call("sha", same_tenant).args;
    ASSERT_GE(shared.size(), 41u);
    EXPECT_EQ(shared[2], "7");
    EXPECT_EQ(std::vector<std::string>(shared.begin() + 11, shared.begin() + 15),
              (std::vector<std::string>{"", "2", "k1", "k2"}));
    EXPECT_EQ(shared[15], "3");  // three limits' items for the four decisions
    EXPECT_EQ(shared[40], "2");  // and two shapes
    std::vector<std::string> each_ones(shared.begin() + 46, shared.end());
    EXPECT_EQ(each_ones, (std::vector<std::string>{"1", "1", "1", "1", "1", "1", "1", "1", "1",  //
                                                   "-2", "L2", "600000", "1"}));
    // Another amount is the same limit and shape; another capacity is neither.
    auto mixed_call = decide_many_call("sha", mixed).args;
    ASSERT_GE(mixed_call.size(), 16u);
    EXPECT_EQ(mixed_call[14], "3");
    std::vector<std::string> shapes_and_amounts(mixed_call.end() - 16, mixed_call.end());
    EXPECT_EQ(shapes_and_amounts, (std::vector<std::string>{"2", "2", "1", "2", "2", "1", "3",  //
                                                            "1", "1", "1", "1", "7", "1", "2", "1", "1"}));

    // The reply is their limits' verdicts one after another (no time, no "all admit": the
    // gateway reads neither): 3 elements a limit (admitted 0 or 1) or 6 (admitted 2 or 3:
    // retry, wait and extra follow).
    auto integers = [](std::initializer_list<long long> values) {
        Reply r;
        r.type = Reply::Type::array;
        for (auto v : values) r.elements.push_back(Reply{Reply::Type::integer, v, {}, {}});
        return r;
    };
    auto flat = integers({1, 5, 6, 3, 7, 8, 0, 0, 0, 0, 9, 10});
    auto each = split_decisions(flat, decisions);
    ASSERT_TRUE(each);
    ASSERT_EQ(each->size(), 2u);
    ASSERT_EQ((*each)[0].size(), 9u);
    ASSERT_EQ((*each)[1].size(), 3u);
    EXPECT_EQ((*each)[0][8].integer, 0);
    EXPECT_EQ((*each)[1][0].integer, 0);
    EXPECT_EQ((*each)[1][2].integer, 10);
    // One element short or over, a limit's first not 0-3, or no array: not taken apart at a guess.
    auto short_flat = flat;
    short_flat.elements.pop_back();
    EXPECT_FALSE(split_decisions(short_flat, decisions));
    auto long_flat = flat;
    long_flat.elements.push_back(Reply{Reply::Type::integer, 0, {}, {}});
    EXPECT_FALSE(split_decisions(long_flat, decisions));
    auto odd_first = flat;
    odd_first.elements[3].integer = 4;
    EXPECT_FALSE(split_decisions(odd_first, decisions));
    auto text_first = flat;
    text_first.elements[0] = Reply{Reply::Type::string, 0, "1", {}};
    EXPECT_FALSE(split_decisions(text_first, decisions));
    EXPECT_FALSE(split_decisions(Reply{Reply::Type::integer, 22, {}, {}}, decisions));
}

// Read back as the script reads it, a call gives each decision its own eight items a limit:
// whatever repeats and whatever does not (more distinct limits and shapes than are looked
// through).
TEST(RedisScript, ACallOfManyDecisionsReadsBackAsEachOnesItems) {
    std::mt19937 random(11);
    for (int round = 0; round < 40; ++round) {
        std::vector<std::vector<std::string>> decisions;
        int count = 1 + static_cast<int>(random() % 64);
        int capacities = round % 2 ? 3 : 200;  // few distinct limits, or more than 32
        for (int d = 0; d < count; ++d) {
            std::size_t n = 1 + random() % 3;
            std::vector<std::string> args{"EVALSHA", "s", std::to_string(n)};
            for (std::size_t i = 0; i < n; ++i) args.push_back("k" + std::to_string(random() % 10));
            // Every third holds nothing under a lease: no lease, no length.
            bool leased = d % 3 != 0;
            args.insert(args.end(), {"decide", "", leased ? "L" + std::to_string(d) : "", leased ? "600000" : ""});
            for (std::size_t i = 0; i < n; ++i)
                args.insert(args.end(), {i == 2 ? "c" : "r", std::to_string(10 + random() % capacities), "1",
                                         std::to_string(random() % 5), "1", "1", "0", "0"});
            decisions.push_back(std::move(args));
        }
        auto originals = decisions;
        auto a = decide_many_call("sha", decisions).args;
        std::size_t keys = std::stoul(a[2]);
        std::size_t repeated = std::stoul(a[3 + keys + 2]);
        std::size_t tuples = 3 + keys + 3 + repeated + 1;  // the first limit's first item
        std::size_t at = tuples + 8 * std::stoul(a[tuples - 1]);
        // The shapes: each its limits' count, then their places.
        std::vector<std::vector<std::size_t>> shapes(std::stoul(a[at++]));
        for (auto& shape : shapes) {
            shape.resize(std::stoul(a[at++]));
            for (auto& place : shape) place = std::stoul(a[at++]);
        }
        for (const auto& original : originals) {
            std::size_t n = std::stoul(original[2]);
            const auto& lease = original[3 + n + 2];
            // The shape, negated when the lease and its length follow.
            bool leased = a[at].front() == '-';
            ASSERT_EQ(leased, !lease.empty()) << round;
            const auto& shape = shapes.at(std::stoul(a[at].substr(leased ? 1 : 0)) - 1);
            ASSERT_EQ(shape.size(), n) << round;
            if (leased) {
                ASSERT_EQ(a[at + 1], lease);
                ASSERT_EQ(a[at + 2], original[3 + n + 3]);
                at += 2;
            }
            at += 1;
            for (std::size_t i = 0; i < n; ++i) {
                std::size_t base = tuples + (shape[i] - 1) * 8;
                for (std::size_t j = 0; j < 8; ++j) {
                    const auto& item = j == 3 ? a[at + i] : a[base + j];
                    ASSERT_EQ(item, original[3 + n + 4 + i * 8 + j]) << round << " " << i << " " << j;
                }
            }
            at += n;
        }
        EXPECT_EQ(at, a.size());
    }
}

TEST(RedisScript, MalformedDecisionRepliesAreValuesNotExceptions) {
    config::LimitSpec spec;
    spec.name = "tokens";
    std::vector<limiter::Charge> charges = {limiter::Charge{&spec, config::Level::tenant, "tenant:tokens:a", 1, "a"}};
    auto integer = [](long long v) {
        Reply r;
        r.type = Reply::Type::integer;
        r.integer = v;
        return r;
    };
    auto text = [](std::string v) {
        Reply r;
        r.type = Reply::Type::string;
        r.str = std::move(v);
        return r;
    };
    Reply good;
    good.type = Reply::Type::array;
    good.elements = {integer(1), integer(1), integer(3), text("41.5"), integer(100), integer(0), integer(0), text("0")};
    std::string error;
    auto d = parse_decision(good, charges, error);
    ASSERT_TRUE(d) << error;
    EXPECT_TRUE(d->allowed);
    EXPECT_DOUBLE_EQ(d->statuses[0].verdict.remaining, 41.5);
    // Without retry, wait and extra: three elements, admitted as 1.
    Reply three;
    three.type = Reply::Type::array;
    three.elements = {integer(1), integer(1), integer(1), text("41.5"), integer(100)};
    d = parse_decision(three, charges, error);
    ASSERT_TRUE(d) << error;
    EXPECT_TRUE(d->allowed);
    EXPECT_EQ(d->statuses[0].verdict.until_full, 100);
    EXPECT_EQ(d->statuses[0].verdict.retry_after, 0);
    EXPECT_EQ(d->statuses[0].wait, 0);
    // Refused, six elements: admitted as 2, its retry read.
    auto refused = good;
    refused.elements[1] = integer(0);
    refused.elements[2] = integer(2);
    refused.elements[5] = integer(-1);
    d = parse_decision(refused, charges, error);
    ASSERT_TRUE(d) << error;
    EXPECT_FALSE(d->allowed);
    EXPECT_TRUE(d->statuses[0].verdict.never);

    auto short_reply = good;
    short_reply.elements.pop_back();
    auto bad_number = good;
    bad_number.elements[3] = text("4x");
    auto disagreeing = good;
    disagreeing.elements[1] = integer(0);
    // A whole number may come as an integer (the script skips formatting it).
    auto whole = good;
    whole.elements[3] = integer(41);
    whole.elements[7] = integer(5);
    d = parse_decision(whole, charges, error);
    ASSERT_TRUE(d) << error;
    EXPECT_EQ(d->statuses[0].verdict.remaining, 41);
    EXPECT_EQ(d->statuses[0].quota_added, 5);

    auto bad_top_up = good;
    bad_top_up.elements[7] = Reply{};  // nil
    auto odd_first = good;
    odd_first.elements[2] = integer(5);
    auto three_and_more = three;
    three_and_more.elements.push_back(integer(0));
    for (const auto& bad : {short_reply, bad_number, disagreeing, bad_top_up, odd_first, three_and_more, text("OK")}) {
        error.clear();
        EXPECT_FALSE(parse_decision(bad, charges, error));
        EXPECT_FALSE(error.empty());
    }
}

}  // namespace
}  // namespace tokengate::redis
