// store.state_file through the binary (SPEC §14): a restart, by SIGTERM or by SIGKILL up to one
// snapshot interval, changes nothing a tenant can see; a corrupt file stops the start unless
// --ignore-state; a snapshot that fails is counted and the previous one stays.

#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// Five requests at once, one more an hour: a restart that forgot would hand out five more.
std::string config(const std::string& store) {
    return "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
           "tenants:\n  - id: acme\n    keys: [\"k1\"]\n    limits:\n"
           "      - { name: requests, algorithm: token_bucket, capacity: 5, rate: 1/h }\n" +
           store;
}
const std::string k_kept = "store:\n  state_file: state.bin\n  snapshot_interval: 1s\n";

int chat(const GatewayUnderTest& gw) {
    return gw
        .request(
            Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 1, false)})
        .status;
}

double snapshots(const GatewayUnderTest& gw, const std::string& result) {
    auto m = gw.admin(Request{"GET", "/metrics", {}, ""}).body;
    auto series = "tokengate_state_snapshots_total{result=\"" + result + "\"} ";
    auto at = m.find(series);
    return at == std::string::npos ? -1 : std::stod(m.substr(at + series.size()));
}

bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds timeout = 15s) {
    for (auto deadline = steady::now() + timeout; steady::now() < deadline; std::this_thread::sleep_for(50ms))
        if (done()) return true;
    return done();
}

TEST(StateFile, WithoutItARestartHandsOutAFreshBurst) {  // the problem, shown
    GatewayUnderTest gw(config(""));
    for (int i = 0; i < 5; ++i) ASSERT_EQ(chat(gw), 200);
    ASSERT_EQ(chat(gw), 429);
    ASSERT_TRUE(gw.restart(SIGTERM));
    EXPECT_EQ(chat(gw), 200);
}

TEST(StateFile, ASigtermRestartKeepsTheBucketLevels) {
    GatewayUnderTest gw(config(k_kept));
    for (int i = 0; i < 5; ++i) ASSERT_EQ(chat(gw), 200);
    ASSERT_EQ(chat(gw), 429);
    ASSERT_TRUE(gw.wait_settled(5));
    int code = -1;
    ASSERT_TRUE(gw.restart(SIGTERM, {}, &code)) << gw.log();
    EXPECT_EQ(code, 0);
    EXPECT_NE(gw.log().find("1 of 1 buckets and quotas restored"), std::string::npos) << gw.log();
    EXPECT_EQ(chat(gw), 429);
    auto r = gw.request(
        Request{"POST", "/v1/chat/completions", {{"Authorization", "Bearer k1"}}, chat_body("m", "hi", 1, false)});
    EXPECT_EQ(r.header("x-ratelimit-remaining-requests"), "0") << r.body;
}

TEST(StateFile, ASigkillLosesAtMostOneSnapshotInterval) {
    GatewayUnderTest gw(config(k_kept));
    for (int i = 0; i < 3; ++i) ASSERT_EQ(chat(gw), 200);
    ASSERT_TRUE(gw.wait_settled(3));
    // Two snapshots after the last request: the second surely began after it.
    auto before = snapshots(gw, "ok");
    ASSERT_TRUE(wait_for([&] { return snapshots(gw, "ok") >= before + 2; }));
    ASSERT_TRUE(gw.restart(SIGKILL)) << gw.log();
    EXPECT_EQ(chat(gw), 200);
    EXPECT_EQ(chat(gw), 200);
    EXPECT_EQ(chat(gw), 429);  // five in all, across the crash
}

TEST(StateFile, ACorruptFileStopsTheStartUnlessTheOperatorSaysIgnoreIt) {
    GatewayUnderTest gw(config(k_kept));
    for (int i = 0; i < 5; ++i) ASSERT_EQ(chat(gw), 200);
    ASSERT_TRUE(gw.wait_settled(5));
    gw.gateway().stop(SIGTERM);
    auto path = gw.dir() + "/state.bin";
    {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(70);
        f.put('\x7f');
    }
    EXPECT_FALSE(gw.restart(SIGTERM));
    EXPECT_NE(gw.log().find("state file " + path +
                            ": checksum mismatch: the file is corrupt; start with --ignore-state to begin afresh"),
              std::string::npos)
        << gw.log();
    ASSERT_TRUE(gw.restart(SIGTERM, {"--ignore-state"})) << gw.log();
    EXPECT_NE(gw.log().find("ignored (--ignore-state)"), std::string::npos) << gw.log();
    EXPECT_EQ(chat(gw), 200);  // afresh, as asked
    // Truncated (a disk that filled up under another writer): refused the same way.
    gw.gateway().stop(SIGTERM);
    std::filesystem::resize_file(path, 40);
    EXPECT_FALSE(gw.restart(SIGTERM));
    EXPECT_NE(gw.log().find("truncated (in the header)"), std::string::npos) << gw.log();
}

TEST(StateFile, ASnapshotThatFailsIsCountedAndThePreviousOneStays) {
    GatewayUnderTest gw(config(k_kept));
    for (int i = 0; i < 5; ++i) ASSERT_EQ(chat(gw), 200);
    ASSERT_TRUE(gw.wait_settled(5));
    ASSERT_TRUE(wait_for([&] { return snapshots(gw, "ok") >= 1; }));
    auto path = gw.dir() + "/state.bin";
    auto kept = read_file(path);
    // The temporary file cannot be created (a directory in its place stands for a full or
    // read-only disk): the failure is counted and logged, the last good snapshot stays.
    std::filesystem::create_directory(path + ".tmp");
    ASSERT_TRUE(wait_for([&] { return snapshots(gw, "failed") >= 1; }));
    EXPECT_EQ(read_file(path), kept);
    EXPECT_TRUE(gw.log_contains("state snapshot failed, the previous one stays: cannot create " + path + ".tmp"));
    std::filesystem::remove(path + ".tmp");
    // And a crash now still finds the tenant where it was.
    ASSERT_TRUE(gw.restart(SIGKILL)) << gw.log();
    EXPECT_EQ(chat(gw), 429);
}

}  // namespace
}  // namespace tokengate::testing
