#include <gtest/gtest.h>

#include <thread>
#include <vector>

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

TEST(Registry, ClearHidesSeriesUntilTheyAreSetAgain) {
    Registry r;
    auto& depth = r.gauge("tg_queue_depth", "Waiting.", {"limit"});
    depth.set({"gpu"}, 3);
    depth.set({"cpu"}, 1);
    depth.clear();
    EXPECT_EQ(r.render().find("tg_queue_depth{"), std::string::npos) << r.render();
    EXPECT_DOUBLE_EQ(depth.value({"gpu"}), 0);
    depth.set({"gpu"}, 2);
    auto text = r.render();
    EXPECT_NE(text.find("tg_queue_depth{limit=\"gpu\"} 2\n"), std::string::npos) << text;
    EXPECT_EQ(text.find("cpu"), std::string::npos) << text;
}

TEST(Registry, ARefUpdatesTheSeriesItWasFoundFor) {
    Registry r(/*max_series_per_family=*/2);
    auto& c = r.counter("tg_c", "C.", {"tenant"});
    auto& latency = r.histogram("tg_latency_seconds", "Latency.", {"upstream"}, {0.1, 1});
    auto acme = c.at({"acme"});
    acme.add();
    acme.add(2);
    c.add({"acme"});
    EXPECT_DOUBLE_EQ(c.value({"acme"}), 4) << "the Ref and the labels reach one series";
    auto up = latency.at({"a"});
    up.observe(0.05);
    up.observe(5);
    EXPECT_NE(r.render().find("tg_latency_seconds_bucket{upstream=\"a\",le=\"0.1\"} 1\n"), std::string::npos);
    EXPECT_DOUBLE_EQ(latency.value({"a"}), 2);
    c.add({"beta"});
    c.at({"gamma"}).add(5);  // past the cap: the Ref is "_other"'s
    EXPECT_NE(r.render().find("tg_c{tenant=\"_other\"} 5\n"), std::string::npos) << r.render();
    auto& depth = r.gauge("tg_queue_depth", "Waiting.", {"limit"});
    auto gpu = depth.at({"gpu"});
    gpu.set(3);
    depth.clear();
    EXPECT_EQ(r.render().find("tg_queue_depth{"), std::string::npos);
    gpu.set(2);
    EXPECT_NE(r.render().find("tg_queue_depth{limit=\"gpu\"} 2\n"), std::string::npos)
        << "a cleared series shows again";
}

TEST(Registry, ANewRegistryNeverSeesAnOldOnesSeries) {
    // Each thread caches where a series lives; a registry built where an old one stood must
    // not find the old one's series through that cache.
    for (int round = 0; round < 3; ++round) {
        Registry r;
        auto& c = r.counter("tg_c", "C.", {"tenant"});
        c.add({"acme"});
        EXPECT_DOUBLE_EQ(c.value({"acme"}), 1) << "round " << round;
    }
}

TEST(Registry, UpdatesFromManyThreadsAreAllCounted) {
    Registry r;
    auto& c = r.counter("tg_c", "C.", {"tenant"});
    auto& h = r.histogram("tg_h", "H.", {"upstream"}, {0.5, 2});
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 10000; ++i) {
                c.add({i % 2 ? "a" : "b"});
                h.observe({"u"}, t % 2 ? 1.0 : 0.25);
            }
        });
    for (auto& t : threads) t.join();
    EXPECT_DOUBLE_EQ(c.value({"a"}) + c.value({"b"}), 40000);
    auto text = r.render();
    EXPECT_NE(text.find("tg_h_bucket{upstream=\"u\",le=\"0.5\"} 20000\n"), std::string::npos) << text;
    EXPECT_NE(text.find("tg_h_bucket{upstream=\"u\",le=\"2\"} 40000\n"), std::string::npos) << text;
    EXPECT_NE(text.find("tg_h_count{upstream=\"u\"} 40000\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace tokengate::metrics

namespace tokengate::metrics {
namespace {

TEST(Registry, LongLabelValuesAreCutAtAUtf8Boundary) {
    Registry r;
    auto& f = r.counter("t_total", "t", {"model"});
    std::string huge(200 * 1024, 'm');
    f.add({huge});
    f.add({huge + "other tail"});  // the same first 128 bytes: the same series
    auto text = r.render();
    EXPECT_LT(text.size(), 1024u) << "the label is cut";
    EXPECT_DOUBLE_EQ(f.value({std::string(k_max_label_bytes, 'm')}), 2);
    std::string cjk;
    while (cjk.size() < 200) cjk += "\xe4\xb8\xad";  // 中, three bytes each
    EXPECT_EQ(bounded_label(cjk).size(), 126u) << "no character is split";
}

TEST(Registry, ValuesPerParentAreCapped) {
    Registry r;
    auto& f = r.counter("tokens_total", "t", {"tenant", "model", "kind"});
    f.limit_values_per(0, 1, 3);
    for (int i = 0; i < 50; ++i) f.add({"acme", "model-" + std::to_string(i), "prompt"}, 1);
    f.add({"acme", "model-0", "completion"}, 5);  // a known model keeps its own series
    f.add({"other-tenant", "model-49", "prompt"}, 1);
    EXPECT_DOUBLE_EQ(f.value({"acme", "model-2", "prompt"}), 1);
    EXPECT_DOUBLE_EQ(f.value({"acme", "model-0", "completion"}), 5);
    EXPECT_DOUBLE_EQ(f.value({"acme", "_other", "prompt"}), 47);
    EXPECT_DOUBLE_EQ(f.value({"acme", "model-3", "prompt"}), 0);
    EXPECT_DOUBLE_EQ(f.value({"other-tenant", "model-49", "prompt"}), 1) << "each tenant has its own allowance";
}

}  // namespace
}  // namespace tokengate::metrics
