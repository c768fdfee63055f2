#include "tokengate/metrics/exposition.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace tokengate::metrics {
namespace {

TEST(Exposition, ParsesSamplesWithLabelsEscapesSpecialValuesAndTimestamps) {
    auto s = parse_sample(R"(vllm:num_requests_waiting{model_name="a \"b\" \\c",engine="0"} 7 1700000000000)");
    ASSERT_TRUE(s);
    EXPECT_EQ(s->name, "vllm:num_requests_waiting");
    EXPECT_DOUBLE_EQ(s->value, 7);
    EXPECT_EQ(s->timestamp_ms, 1700000000000);
    EXPECT_EQ(label_value(s->labels, "model_name"), "a \"b\" \\c");
    EXPECT_EQ(label_value(s->labels, "engine"), "0");
    EXPECT_FALSE(label_value(s->labels, "missing"));
    EXPECT_TRUE(std::isnan(parse_sample("x NaN")->value));
    EXPECT_EQ(parse_sample("x +Inf")->value, INFINITY);
    EXPECT_EQ(parse_sample("x -Inf")->value, -INFINITY);
    EXPECT_DOUBLE_EQ(parse_sample("x{} 1.5e3")->value, 1500);
    EXPECT_DOUBLE_EQ(parse_sample("x{a=\"1\",} 2\r")->value, 2) << "a trailing comma, a CRLF";
    EXPECT_EQ(label_value(parse_sample("x{a=\"line\\nbreak\"} 1")->labels, "a"), "line\nbreak");
}

TEST(Exposition, CommentsAndBadLinesAreNotSamples) {
    for (const char* line : {"# HELP x Help text", "# TYPE x gauge", "", "   ", "# anything", "x", "x 1 2 3",
                             "x{a=\"1\" 2", "x{a=1} 2", "x{=\"1\"} 2", "1x 2", "x 1e999e", "x{a=\"\\\"} 1"})
        EXPECT_FALSE(parse_sample(line)) << line;
}

TEST(Exposition, ReadsTheRecognisedSignalsWhateverTheServer) {
    auto vllm = read_load_signals(
        "# HELP vllm:num_requests_waiting Requests waiting.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting{model_name=\"a\"} 3\n"
        "vllm:num_requests_waiting{model_name=\"b\"} 4\n"
        "vllm:num_requests_running{model_name=\"a\"} 8\n"
        "vllm:kv_cache_usage_perc{model_name=\"a\"} 0.5\n"
        "vllm:kv_cache_usage_perc{model_name=\"b\"} 0.75\n"
        "vllm:unrelated_total 12345\n"
        "garbage line here\n");
    EXPECT_EQ(vllm.queue, 7);
    EXPECT_EQ(vllm.running, 8);
    EXPECT_EQ(vllm.kv_cache, 0.75) << "the largest";
    EXPECT_EQ(vllm.malformed, 1u);
    auto tgi = read_load_signals("tgi_queue_size 2\ntgi_batch_current_size 5\n");
    EXPECT_EQ(tgi.queue, 2);
    EXPECT_EQ(tgi.running, 5);
    EXPECT_FALSE(tgi.kv_cache);
    auto sglang = read_load_signals("sglang:num_queue_reqs 1\nsglang:num_running_reqs 2\nsglang:token_usage 0.9");
    EXPECT_EQ(sglang.queue, 1);
    EXPECT_EQ(sglang.kv_cache, 0.9) << "the last line needs no newline";
    auto llamacpp = read_load_signals("llamacpp:requests_deferred 4\nllamacpp:requests_processing 1\n");
    EXPECT_EQ(llamacpp.queue, 4);
    EXPECT_EQ(llamacpp.running, 1);
}

TEST(Exposition, NonFiniteOrOtherNamesLeaveASignalEmpty) {
    auto s = read_load_signals("vllm:num_requests_waiting NaN\nvllm:kv_cache_usage_perc +Inf\nqueue_depth 9\n");
    EXPECT_FALSE(s.queue);
    EXPECT_FALSE(s.kv_cache);
    EXPECT_FALSE(s.running);
    EXPECT_EQ(read_load_signals("vllm:kv_cache_usage_perc 7\n").kv_cache, 1.0) << "a ratio, clamped";
}

}  // namespace
}  // namespace tokengate::metrics
