#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "tokengate/store/state_file.hpp"

namespace tokengate::store {
namespace {

using namespace std::chrono_literals;
using config::Level;
using config::LimitSpec;
using limiter::Charge;

LimitSpec spec(double capacity, double rate) {
    LimitSpec s;
    s.name = "requests";
    s.capacity = capacity;
    s.rate_per_s = rate;
    return s;
}

Charge charge(const LimitSpec& s, const std::string& key, double amount = 1) {
    return Charge{&s, Level::tenant, key, amount, {}};
}

StateSnapshot sample() {
    StateSnapshot s;
    s.written_at_unix_ns = 1'700'000'123'000'000'000;
    s.levels.buckets = {{"tenant:requests:acme", 5, 0.5, 1.25}, {"ip:per-ip:10.0.0.1", 100, 10, -40}, {"", 1, 1, 0}};
    s.levels.quotas = {{"tenant:daily:acme", 1234.5, 100, {1'700'000'000'000'000'000, 1'700'086'400'000'000'000}}};
    return s;
}

TEST(StateFile, EncodesAndDecodesEveryField) {
    auto decoded = decode_state(encode_state(sample()));
    EXPECT_EQ(decoded.written_at_unix_ns, 1'700'000'123'000'000'000);
    const auto& buckets = decoded.levels.buckets;
    ASSERT_EQ(buckets.size(), 3u);
    EXPECT_EQ(buckets[1].key, "ip:per-ip:10.0.0.1");
    EXPECT_EQ(buckets[1].capacity, 100);
    EXPECT_EQ(buckets[1].rate_per_s, 10);
    EXPECT_EQ(buckets[1].tokens, -40);
    EXPECT_EQ(buckets[0].tokens, 1.25);
    ASSERT_EQ(decoded.levels.quotas.size(), 1u);
    const auto& quota = decoded.levels.quotas[0];
    EXPECT_EQ(quota.key, "tenant:daily:acme");
    EXPECT_EQ(quota.used, 1234.5);
    EXPECT_EQ(quota.added, 100);
    EXPECT_EQ(quota.window, (core::CalendarWindow{1'700'000'000'000'000'000, 1'700'086'400'000'000'000}));
}

TEST(StateFile, AVersionOneFileIsStillRead) {
    // Version 1 had no quotas and no quota count: the same records behind a shorter header.
    auto only_buckets = sample();
    only_buckets.levels.quotas.clear();
    auto v2 = encode_state(only_buckets);
    auto v1 = v2.substr(0, 28) + v2.substr(36);
    v1[8] = 1;
    auto decoded = decode_state(v1);
    EXPECT_EQ(decoded.levels.buckets.size(), 3u);
    EXPECT_TRUE(decoded.levels.quotas.empty());
}

TEST(StateFile, RefusesEveryDamagedFileWithItsReason) {
    auto good = encode_state(sample());
    auto reason = [](const std::string& bytes) {
        try {
            decode_state(bytes);
            return std::string("accepted");
        } catch (const StateFileError& e) {
            return std::string(e.what());
        }
    };
    EXPECT_EQ(reason(""), "truncated (in the header)");
    EXPECT_EQ(reason("GIF89a..........................................................."),
              "not a tokengate state file");
    EXPECT_EQ(reason(good.substr(0, 61)), "truncated (in the header)");
    for (std::size_t cut : {good.size() - 1, good.size() - 20, std::size_t{69}})
        EXPECT_EQ(reason(good.substr(0, cut)), "checksum mismatch: the file is corrupt") << cut;
    for (std::size_t at = 36; at < good.size(); at += 7) {  // any flipped digest or record byte
        auto bad = good;
        bad[at] ^= 0x40;
        EXPECT_EQ(reason(bad), "checksum mismatch: the file is corrupt") << at;
    }
    auto other_version = good;
    other_version[8] = 3;
    EXPECT_EQ(reason(other_version), "format version 3; this gateway reads versions 1 and 2");
    // A valid checksum over values no config allows (a file written by hand, or by a bug).
    auto wild = sample();
    wild.levels.buckets[0].tokens = std::nan("");
    EXPECT_EQ(reason(encode_state(wild)), "record 0 (tenant:requests:acme) is out of range");
    wild = sample();
    wild.levels.buckets[2].capacity = 1e300;
    EXPECT_EQ(reason(encode_state(wild)), "record 2 () is out of range");
    wild = sample();
    wild.levels.quotas[0].used = -1;
    EXPECT_EQ(reason(encode_state(wild)), "quota 0 (tenant:daily:acme) is out of range");
    wild = sample();
    wild.levels.quotas[0].window.end = wild.levels.quotas[0].window.start;
    EXPECT_EQ(reason(encode_state(wild)), "quota 0 (tenant:daily:acme) is out of range");
    // A count larger than the bytes could hold is refused before anything is reserved.
    auto huge = good;
    for (int i = 20; i < 28; ++i) huge[i] = static_cast<char>(0xff);
    EXPECT_EQ(reason(huge), "record counts 18446744073709551615 and 1 are impossible");
}

TEST(StateFile, WritesAtomicallyAndLeavesTheOldSnapshotWhenAStepFails) {
    auto dir = std::filesystem::temp_directory_path() / ("tg-state-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    auto path = (dir / "state.bin").string();
    std::string error;
    EXPECT_FALSE(read_state_file(path).has_value());  // no file: a first start
    ASSERT_TRUE(write_state_file(path, "first", error)) << error;
    EXPECT_EQ(*read_state_file(path), "first");
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    // The temporary file cannot be made (here: a directory stands in its place, as a full disk
    // or a read-only mount would refuse it): false, a reason, and the old snapshot intact.
    std::filesystem::create_directory(path + ".tmp");
    EXPECT_FALSE(write_state_file(path, "second", error));
    EXPECT_NE(error.find("cannot create " + path + ".tmp"), std::string::npos) << error;
    EXPECT_EQ(*read_state_file(path), "first");
    std::filesystem::remove_all(dir);
}

TEST(StateFile, AMemoryStoreComesBackAtItsLevelRefilledByTheDowntime) {
    core::ManualClock clock;
    MemoryStore before(clock);
    auto requests = spec(5, 0.5);  // 5 at once, one every 2 s
    auto full = spec(100, 100);
    for (int i = 0; i < 5; ++i)
        ASSERT_TRUE(before.decide(std::vector{charge(requests, "tenant:requests:acme")}).allowed);
    ASSERT_TRUE(before.decide(std::vector{charge(full, "global:gpu:*")}).allowed);
    clock.advance(1s);  // "global:gpu:*" is full again: nothing to keep
    auto saved = before.save();
    ASSERT_EQ(saved.buckets.size(), 1u);
    EXPECT_EQ(saved.buckets[0].key, "tenant:requests:acme");
    EXPECT_NEAR(saved.buckets[0].tokens, 0.5, 1e-9);

    // 3 s down: 0.5 + 1.5 = 2 tokens, not a fresh 5.
    MemoryStore after(clock);
    EXPECT_EQ(after.restore(decode_state(encode_state({0, saved})).levels, 3'000'000'000), 1u);
    std::vector one{charge(requests, "tenant:requests:acme")};
    EXPECT_TRUE(after.decide(one).allowed);
    EXPECT_TRUE(after.decide(one).allowed);
    EXPECT_FALSE(after.decide(one).allowed);
    // Down long enough to be full: not restored at all (a new bucket starts as configured).
    MemoryStore later(clock);
    EXPECT_EQ(later.restore(saved, 60'000'000'000), 0u);
    EXPECT_EQ(later.size(), 0u);
}

TEST(StateFile, ADebtIsKeptAndTheCurrentConfigWinsOnFirstUse) {
    core::ManualClock clock;
    MemoryStore store(clock);
    // -40 of 100 at 10/s, down for 1 s: -30. The config now says capacity 50 at 10/s.
    ASSERT_EQ(store.restore({{{"tenant:tokens:acme", 100, 10, -40}}, {}}, 1'000'000'000), 1u);
    auto now_spec = spec(50, 10);
    auto peeked = store.peek(std::vector{charge(now_spec, "tenant:tokens:acme")});
    EXPECT_FALSE(peeked.allowed);
    EXPECT_NEAR(peeked.statuses[0].verdict.remaining, -30, 1e-6);
    clock.advance(31s);  // one token back
    EXPECT_TRUE(store.decide(std::vector{charge(now_spec, "tenant:tokens:acme")}).allowed);
}

// SPEC §17: whatever settlements and top-ups a client or an upstream causes, the file the
// store saves is one its loader accepts (a forged usage of 1.8e19, or 1,001 top-ups of 1e15,
// once made the next start fail for every tenant).
TEST(StateFile, RandomSettlementsAndTopUpsAlwaysSaveALoadableFile) {
    std::mt19937_64 rng(17);
    const double hostile[] = {1.8e19,
                              1e15,
                              3.7e17,
                              1e300,
                              -1e300,
                              std::numeric_limits<double>::infinity(),
                              std::numeric_limits<double>::quiet_NaN(),
                              -5,
                              0.5,
                              1e18};
    for (int trial = 0; trial < 50; ++trial) {
        core::ManualClock clock;
        MemoryStore store(clock);
        auto bucket = spec(static_cast<double>(1 + rng() % 1'000'000), 1e-9 + static_cast<double>(rng() % 1000));
        bucket.name = "tokens";
        bucket.unit = config::Unit::cost;
        LimitSpec quota;
        quota.name = "monthly";
        quota.algorithm = config::Algorithm::quota;
        quota.unit = config::Unit::cost;
        quota.capacity = 1e15;
        quota.zone = core::find_time_zone("UTC");
        std::vector<Charge> charges = {charge(bucket, "tenant:tokens:acme", 1),
                                       Charge{&quota, Level::tenant, "tenant:monthly:acme", 1, "acme", {}}};
        for (int step = 0; step < 200; ++step) {
            auto amount = hostile[rng() % std::size(hostile)];
            switch (rng() % 3) {
                case 0: {  // a request, settled at whatever the upstream claimed
                    auto decision = store.decide(charges);
                    if (decision.allowed) {
                        auto taken = limiter::charged(charges, decision);
                        store.settle(taken, {amount, amount, 0}, decision.lease);
                    }
                    break;
                }
                case 1:
                    store.quota_admin(charges[1], std::fabs(amount) <= 1e15 ? std::fabs(amount) : 1e15, false);
                    break;
                default: clock.advance(std::chrono::nanoseconds(rng() % 1'000'000'000'000)); break;
            }
            StateSnapshot snapshot{clock.unix_now(), store.save()};
            ASSERT_NO_THROW(decode_state(encode_state(snapshot))) << "trial " << trial << " step " << step;
        }
    }
}

}  // namespace
}  // namespace tokengate::store
