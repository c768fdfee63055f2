#include <gtest/gtest.h>

#include "tokengate/metrics/registry.hpp"

namespace tokengate::metrics {
namespace {

TEST(Registry, RendersCountersGaugesAndHistograms) {
    Registry r;
    auto& requests = r.counter("tg_requests_total", "Requests.", {"tenant", "status"});
    requests.add({"acme", "200"});
    requests.add({"acme", "200"});
    requests.add({"evil\"co", "429"});
    auto& depth = r.gauge("tg_queue_depth", "Waiting.", {"limit"});
    depth.set({"gpu"}, 3);
    auto& latency = r.histogram("tg_latency_seconds", "Latency.", {"upstream"}, {0.1, 1});
    latency.observe({"a"}, 0.05);
    latency.observe({"a"}, 0.5);
    latency.observe({"a"}, 5);
    auto text = r.render();
    EXPECT_NE(text.find("# TYPE tg_requests_total counter\n"), std::string::npos);
    EXPECT_NE(text.find("tg_requests_total{tenant=\"acme\",status=\"200\"} 2\n"), std::string::npos) << text;
    EXPECT_NE(text.find("tg_requests_total{tenant=\"evil\\\"co\",status=\"429\"} 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("tg_queue_depth{limit=\"gpu\"} 3\n"), std::string::npos);
    EXPECT_NE(text.find("tg_latency_seconds_bucket{upstream=\"a\",le=\"0.1\"} 1\n"), std::string::npos) << text;
    EXPECT_NE(text.find("tg_latency_seconds_bucket{upstream=\"a\",le=\"1\"} 2\n"), std::string::npos);
    EXPECT_NE(text.find("tg_latency_seconds_bucket{upstream=\"a\",le=\"+Inf\"} 3\n"), std::string::npos);
    EXPECT_NE(text.find("tg_latency_seconds_sum{upstream=\"a\"} 5.55\n"), std::string::npos) << text;
    EXPECT_NE(text.find("tg_latency_seconds_count{upstream=\"a\"} 3\n"), std::string::npos);
    EXPECT_DOUBLE_EQ(requests.value({"acme", "200"}), 2);
}

TEST(Registry, CardinalityIsCapped) {
    Registry r(/*max_series_per_family=*/3);
    auto& c = r.counter("tg_c", "C.", {"tenant"});
    for (int i = 0; i < 100; ++i) c.add({"tenant-" + std::to_string(i)});
    auto text = r.render();
    EXPECT_NE(text.find("tg_c{tenant=\"_other\"} 97\n"), std::string::npos) << text;
    EXPECT_EQ(text.find("tenant-50"), std::string::npos);
}

}  // namespace
}  // namespace tokengate::metrics
