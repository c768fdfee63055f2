// `tokengate simulate` through the binary: seed 000's trace gives the seed's answer in the
// files it writes; a bad line is exit 1 naming it; a trace out of order is replayed sorted.

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

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
    EXPECT_EQ(
        csv.rfind(
            "t,tenant,verdict,limit,wait_s,output_bound,completion_tokens,stopped\n0.000000,seed,200,,0.000000,,0,0\n",
            0),
        0u)
        << csv;
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
    auto csv = read_file(other.path() + "/out/decisions.csv");
    EXPECT_EQ(csv.substr(csv.find('\n') + 1, 9), "0.000000,") << "sorted by t";
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

// One stage sequence for serve and simulate (issue 30): a live gateway's access log, replayed
// under the same config, gets each request's verdict back — capped, shed, stopped at its budget
// — request by request.

/// What became of one request: its status, the output bound written when lowered, whether its
/// stream was stopped at the budget, and the output it was settled at.
struct Verdict {
    int status = 0;
    std::uint64_t output_bound = 0;
    bool stopped = false;
    std::uint64_t completion_tokens = 0;
    bool operator==(const Verdict&) const = default;
};

std::ostream& operator<<(std::ostream& out, const Verdict& v) {
    return out << "{" << v.status << ", bound " << v.output_bound << (v.stopped ? ", stopped" : "") << ", "
               << v.completion_tokens << " out}";
}

/// The live gateway's verdicts, from its access log once it has written `n` lines, in the order
/// the requests arrived (a line is written as its request ends: ts - duration_ms).
std::vector<Verdict> live_verdicts(const GatewayUnderTest& gw, std::size_t n) {
    std::vector<std::pair<double, Verdict>> lines;
    for (int attempt = 0; attempt < 100 && lines.size() < n; ++attempt) {
        lines.clear();
        std::istringstream log(gw.log());
        for (std::string line; std::getline(log, line);) {
            if (line.rfind("{\"ts\"", 0) != 0) continue;
            auto j = nlohmann::json::parse(line);
            lines.push_back({j["ts"].get<double>() - j["duration_ms"].get<double>() / 1e3,
                             {j["status"].get<int>(), j.value("output_bound", std::uint64_t{0}),
                              j.value("stopped", false), j["completion_tokens"].get<std::uint64_t>()}});
        }
        if (lines.size() < n) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::stable_sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Verdict> out;
    for (const auto& [arrived, verdict] : lines) out.push_back(verdict);
    return out;
}

/// `tokengate simulate` of the gateway's own log under `config`: each request's verdict.
std::vector<Verdict> replayed_verdicts(const GatewayUnderTest& gw, const std::string& config, const std::string& out,
                                       const std::string& upstream_extra = "") {
    std::ofstream(gw.dir() + "/proposed.yaml")
        << "upstreams:\n  - name: mock\n    url: \"http://127.0.0.1:" + std::to_string(gw.mock_port()) + "\"\n" +
               upstream_extra + config;
    auto said = capture(std::string(gateway_binary()) + " simulate -c " + gw.dir() + "/proposed.yaml --trace " +
                        gw.dir() + "/gateway.log --out " + gw.dir() + "/" + out + " 2>&1");
    std::istringstream csv(read_file(gw.dir() + "/" + out + "/decisions.csv"));
    std::string line;
    std::getline(csv, line);
    EXPECT_EQ(line, "t,tenant,verdict,limit,wait_s,output_bound,completion_tokens,stopped") << said;
    std::vector<Verdict> verdicts;
    while (std::getline(csv, line)) {
        std::vector<std::string> cells;
        std::istringstream row(line);
        for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
        if (cells.size() != 8) {
            ADD_FAILURE() << line;
            continue;
        }
        verdicts.push_back({std::stoi(cells[2]), cells[5].empty() ? 0 : std::stoull(cells[5]), cells[7] == "1",
                            std::stoull(cells[6])});
    }
    return verdicts;
}

Request chat_as(const std::string& key, const std::string& body, std::vector<std::pair<std::string, std::string>> h) {
    h.emplace_back("Authorization", "Bearer " + key);
    return {"POST", "/v1/chat/completions", h, body};
}

// One event loop: a request's arrival and the settlement before it are in the order the clock
// read them, as the replay orders them.
const std::string k_one_worker = "  threads: 1\n";

const std::string k_unit_cost =
    "cost:\n  input: { per: 1, min: 1 }\n  output: { per: 1, min: 1 }\n  stream_surcharge: 0\n";

TEST(Simulate, CapOutputReplaysEachCapAndRefusalTheGatewayGave) {
    // 300 tokens of budget, a slow refill; each request asks for 120 output tokens and makes 30.
    const std::string config = "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n" + k_unit_cost +
                               "  cap_output: true\n  min_output: 20\n"
                               "tenants:\n  - id: acme\n    keys: [\"k1\"]\n    limits: [ { name: tokens, algorithm: "
                               "token_bucket, capacity: 300, rate: 0.001/s, unit: cost } ]\n";
    GatewayUnderTest gw(config, k_one_worker);
    for (int i = 0; i < 9; ++i)
        gw.request(chat_as("k1", chat_body("llama3-8b", "hi", 120, false), {{"x-mock-completion-tokens", "30"}}));
    auto live = live_verdicts(gw, 9);
    ASSERT_EQ(live.size(), 9u);
    int capped = 0, refused = 0;
    for (const auto& v : live) capped += v.output_bound != 0, refused += v.status == 429;
    ASSERT_GE(capped, 1) << ::testing::PrintToString(live);
    ASSERT_GE(refused, 1) << ::testing::PrintToString(live);
    EXPECT_EQ(replayed_verdicts(gw, config, "same"), live);
    // Without cap_output, the first request that was capped is refused instead, and fewer are served.
    auto uncapped =
        replayed_verdicts(gw, std::string(config).replace(config.find("  cap_output: true\n"), 19, ""), "uncapped");
    ASSERT_EQ(uncapped.size(), live.size());
    auto first_capped = std::find_if(live.begin(), live.end(), [](const Verdict& v) { return v.output_bound; });
    EXPECT_EQ(uncapped[first_capped - live.begin()].status, 429) << ::testing::PrintToString(uncapped);
    auto served = [](const std::vector<Verdict>& v) {
        return std::count_if(v.begin(), v.end(), [](const Verdict& x) { return x.status == 200; });
    };
    EXPECT_LT(served(uncapped), served(live));
}

TEST(Simulate, ShedReplaysTheOverloadTheAccessLogRecorded) {
    const std::string config =
        "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n"
        "tiers:\n  free: { priority: sheddable }\n  vip: { priority: critical }\n"
        "tenants:\n  - { id: crowd, tier: free, keys: [\"k-free\"] }\n  - { id: bank, tier: vip, keys: [\"k-vip\"] }\n"
        "overload: { queue: 2 }\n";
    const std::string scrape = "    metrics: { interval: 200ms }\n";
    GatewayUnderTest gw(config, k_one_worker, 50, scrape, {}, {}, {"--max-seqs", "1"});
    auto chat = [&](const std::string& key) { return gw.request(chat_as(key, chat_body("m", "hi", 5, false), {})); };
    ASSERT_EQ(chat("k-free").status, 200) << "no overload yet";
    // Someone else's work straight to the mock GPU: a queue the gateway's scrape sees.
    std::vector<std::thread> others;
    for (int i = 0; i < 6; ++i)
        others.emplace_back([&] {
            send_request(gw.mock_port(),
                         chat_as("x", chat_body("m", "hi", 25, false), {{"x-mock-completion-tokens", "25"}}));
        });
    // Until a scrape shows the queue (the scrape's own gauge), nothing else is sent: a request
    // through the gateway would wait behind it.
    for (int i = 0; i < 100; ++i) {
        auto page = send_request(gw.admin_port(), {"GET", "/metrics", {}, ""}).body;
        if (page.find("\ntokengate_upstream_queue{upstream=\"mock\"} 0") == std::string::npos &&
            page.find("\ntokengate_upstream_queue{upstream=\"mock\"} ") != std::string::npos)
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    auto shed = chat("k-free");
    std::size_t sent = 2;
    EXPECT_EQ(shed.status, 503) << shed.body;
    EXPECT_EQ(chat("k-vip").status, 200) << "critical traffic is never shed";
    for (auto& t : others) t.join();
    auto live = live_verdicts(gw, sent + 1);
    ASSERT_EQ(live.size(), sent + 1);  // and the vip one
    ASSERT_EQ(std::count_if(live.begin(), live.end(), [](const Verdict& v) { return v.status == 503; }), 1)
        << ::testing::PrintToString(live);
    ASSERT_TRUE(gw.log_contains("\"load_queue\":"));
    EXPECT_EQ(replayed_verdicts(gw, config, "same", scrape), live);
    // Without `overload`, the same log sheds nobody.
    auto calm = replayed_verdicts(gw, config.substr(0, config.find("overload:")), "calm", scrape);
    ASSERT_EQ(calm.size(), live.size());
    for (const auto& v : calm) EXPECT_EQ(v.status, 200);
}

TEST(Simulate, StopAtBudgetReplaysWhereEachStreamWasStopped) {
    // A learned reservation of 1 token (twenty one-token answers), an 800-unit budget, blocks of
    // 32: streams of 300 tokens run on the live budget until it refuses a block.
    const std::string config = "routes:\n  - { path: /v1/chat/completions, upstreams: [mock] }\n" + k_unit_cost +
                               "  default_max_tokens: 500\n  output_estimate: learned\n  stop_at_budget: true\n"
                               "  stream_charge_every: 32\n  learned: { min_samples: 5, window: 25 }\n"
                               "tenants:\n  - id: acme\n    keys: [\"k1\"]\n    limits: [ { name: tokens, algorithm: "
                               "token_bucket, capacity: 800, rate: 0.001/s, unit: cost } ]\n";
    GatewayUnderTest gw(config, k_one_worker);
    const std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
    const std::string stream = R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})";
    for (int i = 0; i < 20; ++i) {  // one at a time: the learned estimate is 1 from the fifth
        ASSERT_EQ(gw.request(chat_as("k1", body, {{"x-mock-completion-tokens", "1"}})).status, 200);
        ASSERT_TRUE(gw.wait_settled(i + 1));
    }
    for (int i = 0; i < 4; ++i) gw.request(chat_as("k1", stream, {{"x-mock-completion-tokens", "300"}}));
    auto live = live_verdicts(gw, 24);
    ASSERT_EQ(live.size(), 24u);
    ASSERT_GE(std::count_if(live.begin(), live.end(), [](const Verdict& v) { return v.stopped; }), 1)
        << ::testing::PrintToString(live);
    EXPECT_EQ(live[20].completion_tokens, 300u) << "the first stream is paid for block by block";
    EXPECT_EQ(replayed_verdicts(gw, config, "same"), live);
    // Without stop_at_budget, the stopped stream runs to its end in the replay.
    auto free_running =
        replayed_verdicts(gw, std::string(config).replace(config.find("  stop_at_budget: true\n"), 23, ""), "free");
    ASSERT_EQ(free_running.size(), live.size());
    for (std::size_t i = 0; i < live.size(); ++i)
        if (live[i].stopped) {
            EXPECT_FALSE(free_running[i].stopped);
        }
}

}  // namespace
}  // namespace tokengate::testing
