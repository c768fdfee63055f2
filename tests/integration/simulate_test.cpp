// `tokengate simulate` through the binary: seed 000's trace gives the seed's answer in the
// files it writes; a bad line is exit 1 naming it; a trace out of order is replayed sorted.

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

struct Run {
    int code = -1;
    std::string output;
};

Run simulate(const TempDir& dir, const std::string& trace) {
    std::ofstream(dir.path() + "/gateway.yaml")
        << "upstreams: [ { name: up, url: \"http://127.0.0.1:8000\" } ]\n"
           "routes: [ { path: /v1/chat/completions, upstreams: [up] } ]\n"
           "tenants:\n  - id: seed\n    keys: "
           "[\"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"]\n"
           "    limits: [ { name: bucket, algorithm: leaky_bucket, mode: police, capacity: 5, rate: 2/s } ]\n";
    std::ofstream(dir.path() + "/trace.jsonl") << trace;
    auto command = std::string(gateway_binary()) + " simulate -c " + dir.path() + "/gateway.yaml --trace " +
                   dir.path() + "/trace.jsonl --out " + dir.path() + "/out > " + dir.path() + "/run.log 2>&1";
    int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(dir.path() + "/run.log")};
}

TEST(Simulate, SeedZeroThroughTheBinaryWritesItsSummaryAndDecisions) {
    TempDir dir;
    std::string trace;
    for (int i = 0; i < 20; ++i) trace += "{\"t\": " + std::to_string(i / 10.0) + ", \"key\": \"test\", \"cost\": 1}\n";
    trace += R"({"t": 2.5, "key": "stolen", "cost": 1})"
             "\n";
    auto run = simulate(dir, trace);
    ASSERT_EQ(run.code, 0) << run.output;
    EXPECT_NE(run.output.find("21 requests: 8 admitted"), std::string::npos) << run.output;
    auto summary = nlohmann::json::parse(read_file(dir.path() + "/out/summary.json"));
    EXPECT_EQ(summary["admitted"], 8);
    EXPECT_EQ(summary["unauthorized"], 1) << "an unknown key is counted as a 401";
    EXPECT_EQ(summary["limits"][0]["limit"], "tenant:bucket");
    EXPECT_EQ(summary["limits"][0]["rejected"], 12);
    auto csv = read_file(dir.path() + "/out/decisions.csv");
    EXPECT_EQ(csv.rfind("t,tenant,verdict,limit,wait_s\n0.000000,seed,200,,0.000000\n", 0), 0u) << csv;
    EXPECT_NE(csv.find("0.600000,seed,429,tenant:bucket,"), std::string::npos) << csv;
    EXPECT_NE(csv.find("1.000000,seed,200,"), std::string::npos) << csv;
    EXPECT_NE(csv.find("2.500000,,401,"), std::string::npos) << csv;
    // The report: both of seed 000's pictures for the limit, its refusals marked.
    auto html = read_file(dir.path() + "/out/report.html");
    std::size_t svgs = 0, marks = 0;
    for (auto at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++svgs;
    for (auto at = html.find("class=\"refused\""); at != std::string::npos; at = html.find("class=\"refused\"", at + 1))
        ++marks;
    EXPECT_EQ(svgs, 2u);
    EXPECT_GE(marks, 10u) << "12 refusals, a few sharing a time bin";
    EXPECT_LE(marks, 12u);
    EXPECT_NE(html.find("tenant:bucket: water in the bucket against its capacity 5"), std::string::npos);
}

TEST(Simulate, ABadLineIsExitOneNamingItAndDisorderIsSorted) {
    TempDir dir;
    auto bad = simulate(
        dir, "{\"t\": 0, \"key\": \"test\", \"cost\": 1}\n{\"t\": \"soon\", \"key\": \"test\", \"cost\": 1}\n");
    EXPECT_EQ(bad.code, 1);
    EXPECT_NE(bad.output.find("trace.jsonl:line 2: 't' must be a number from 0 to"), std::string::npos) << bad.output;
    TempDir other;
    auto sorted =
        simulate(other, "{\"t\": 1, \"key\": \"test\", \"cost\": 1}\n{\"t\": 0, \"key\": \"test\", \"cost\": 1}\n");
    EXPECT_EQ(sorted.code, 0) << sorted.output;
    EXPECT_NE(sorted.output.find("1 lines were out of time order; replayed sorted by t"), std::string::npos)
        << sorted.output;
    EXPECT_EQ(read_file(other.path() + "/out/decisions.csv").substr(30, 9), "0.000000,") << "sorted by t";
}

TEST(Simulate, TheChartsInDocsAreWhatSeedZeroGivesToday) {
    // docs/simulate holds seed 000's configs, trace and charts (shown in docs/simulate.md): a change
    // to the decisions or the charts shows here until the committed SVGs are regenerated.
    const std::string docs = std::string(TOKENGATE_SOURCE_DIR) + "/docs/simulate/";
    for (std::string mode : {"police", "shape"}) {
        TempDir dir;
        auto command = std::string(gateway_binary()) + " simulate -c " + docs + "seed000-" + mode + ".yaml --trace " +
                       docs + "seed000.jsonl --out " + dir.path() + " > /dev/null 2>&1";
        ASSERT_EQ(std::system(command.c_str()), 0) << mode;
        auto html = read_file(dir.path() + "/report.html");
        std::vector<std::string> svgs;
        for (auto at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1))
            svgs.push_back(html.substr(at, html.find("</svg>", at) + 6 - at));
        ASSERT_EQ(svgs.size(), 2u) << mode;
        EXPECT_EQ(svgs[0] + "\n", read_file(docs + "seed000-" + mode + "-level.svg")) << mode;
        EXPECT_EQ(svgs[1] + "\n", read_file(docs + "seed000-" + mode + "-rate.svg")) << mode;
    }
}

std::string limited_config(int capacity, const std::string& key) {
    return "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
           "tenants:\n  - id: acme\n    keys: [\"" +
           key + "\"]\n    limits: [ { name: requests, algorithm: token_bucket, capacity: " + std::to_string(capacity) +
           ", rate: 0.001/s } ]\n";
}

TEST(Simulate, LastHoursAccessLogReplaysAgainstAProposedConfig) {
    // A live gateway writes its access log to stdout (the default), among its own messages.
    GatewayUnderTest gw(limited_config(4, "k1"));
    auto chat = [&](const std::string& key, const std::string& path = "/v1/chat/completions") {
        return gw.request({"POST", path, {{"Authorization", "Bearer " + key}}, chat_body("llama3-8b", "hi", 20, false)})
            .status;
    };
    std::vector<int> live;
    for (int i = 0; i < 6; ++i) live.push_back(chat("k1"));
    EXPECT_EQ(live, (std::vector<int>{200, 200, 200, 200, 429, 429}));
    EXPECT_EQ(chat("stolen"), 401);
    EXPECT_EQ(chat("k1", "/v1/nope"), 404);
    gw.metrics_after(8);
    ASSERT_TRUE(gw.log_contains("\"status\":404"));

    auto replay = [&](const std::string& config, const std::string& out) {
        std::ofstream(gw.dir() + "/proposed.yaml")
            << "upstreams: [ { name: mock, url: \"http://127.0.0.1:8000\" } ]\n" + config;
        auto command = std::string(gateway_binary()) + " simulate -c " + gw.dir() + "/proposed.yaml --trace " +
                       gw.dir() + "/gateway.log --out " + gw.dir() + "/" + out + " 2>&1";
        auto said = capture(command);
        EXPECT_NE(said.find("tokengate's access log, 8 requests"), std::string::npos) << said;
        return nlohmann::json::parse(read_file(gw.dir() + "/" + out + "/summary.json"));
    };
    // The same config gives the live verdicts back; the 401 and the 404 are kept as they were.
    auto same = replay(limited_config(4, "k1"), "same");
    EXPECT_EQ(same["admitted"], 4);
    EXPECT_EQ(same["rejected"], 2);
    EXPECT_EQ(same["unauthorized"], 1);
    EXPECT_EQ(same["invalid"], 1);
    // A tighter proposal with the keys rotated: acme is found by name, and refused sooner.
    auto tighter = replay(limited_config(2, "k9"), "tighter");
    EXPECT_EQ(tighter["admitted"], 2);
    EXPECT_EQ(tighter["rejected"], 4);
    EXPECT_EQ(tighter["limits"][0]["limit"], "tenant:requests");
}

}  // namespace
}  // namespace tokengate::testing
