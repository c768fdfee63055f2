// SPEC §13 through the binaries: the mock upstream as a GPU (`--max-seqs`), whose vLLM-style
// /metrics show its batch and its queue.

#include <gtest/gtest.h>

#include <thread>

#include "harness.hpp"

namespace tokengate::testing {
namespace {

using namespace std::chrono_literals;

/// The value of an unlabelled series in a Prometheus text page (NaN if absent).
double series(const std::string& page, const std::string& name) {
    auto at = page.find("\n" + name + " ");
    if (at == std::string::npos) return std::nan("");
    return std::stod(page.substr(at + name.size() + 2));
}

TEST(GpuMock, AtMostMaxSeqsGenerateAndTheRestWaitInOrder) {
    TempDir dir;
    auto port = free_port();
    // 20 tokens/s and 10 tokens each: a request holds its place for about half a second.
    Process mock(
        {gateway_binary(), "mock-upstream", "--port", std::to_string(port), "--tokens-per-s", "20", "--max-seqs", "2"},
        dir.path() + "/mock.log");
    ASSERT_TRUE(wait_for_port(port));
    std::vector<std::thread> clients;
    std::vector<int> statuses(5);
    for (int i = 0; i < 5; ++i)
        clients.emplace_back([&, i] {
            statuses[i] = send_request(port, {"POST",
                                              "/v1/chat/completions",
                                              {{"x-mock-completion-tokens", "10"}},
                                              chat_body("m", "hi", 10, false)})
                              .status;
        });
    // Watch the batch fill: two running, three waiting, the KV cache full.
    std::string page;
    for (int i = 0; i < 100; ++i) {
        page = send_request(port, {"GET", "/metrics", {}, ""}).body;
        if (series(page, "vllm:num_requests_waiting") == 3) break;
        std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(series(page, "vllm:num_requests_running"), 2) << page;
    EXPECT_EQ(series(page, "vllm:num_requests_waiting"), 3) << page;
    EXPECT_EQ(series(page, "vllm:kv_cache_usage_perc"), 1.0) << page;
    double most_running = 0;
    for (int i = 0; i < 300; ++i) {
        page = send_request(port, {"GET", "/metrics", {}, ""}).body;
        most_running = std::max(most_running, series(page, "vllm:num_requests_running"));
        if (series(page, "mock_requests_total") == 5 && series(page, "vllm:num_requests_running") == 0) break;
        std::this_thread::sleep_for(10ms);
    }
    for (auto& c : clients) c.join();
    EXPECT_EQ(statuses, std::vector<int>(5, 200)) << "every waiting request is served in the end";
    EXPECT_LE(most_running, 2) << "a finishing request hands its place over: never more than N";
    EXPECT_EQ(series(page, "vllm:num_requests_waiting"), 0);
    EXPECT_EQ(series(page, "vllm:kv_cache_usage_perc"), 0);
}

}  // namespace
}  // namespace tokengate::testing
