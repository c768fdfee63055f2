#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokengate/server/access_log.hpp"

namespace tokengate::server {
namespace {

/// Keeps what it is given; each write can be held back, as a slow disk would.
class SlowSink : public spdlog::sinks::base_sink<std::mutex> {
public:
    std::string text() {
        std::lock_guard lock(mutex_);
        return written_;
    }
    std::atomic<int> delay_ms{0};

protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
        spdlog::memory_buf_t formatted;
        formatter_->format(msg, formatted);
        written_.append(formatted.data(), formatted.size());
    }
    void flush_() override {}

private:
    std::string written_;
};

TEST(AccessLog, WritesEveryBatchInOrderOnALineOfItsOwn) {
    auto sink = std::make_shared<SlowSink>();
    AccessLog log(sink);
    std::string batch = R"({"n":1})"
                        "\n"
                        R"({"n":2})";
    log.write(batch);
    EXPECT_TRUE(batch.empty()) << "the batch is taken, not copied";
    batch = R"({"n":3})";
    log.write(batch);
    log.flush();
    EXPECT_EQ(sink->text(), "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n");
}

TEST(AccessLog, HandsBackAWrittenBuffer) {
    auto sink = std::make_shared<SlowSink>();
    AccessLog log(sink);
    std::string batch(40'000, 'x');
    log.write(batch);
    log.flush();
    batch = "y";
    log.write(batch);
    EXPECT_TRUE(batch.empty());
    EXPECT_GE(batch.capacity(), 40'000u) << "the first batch's buffer came back for the next lines";
}

// A disk slower than the workers: writers wait for room (two batches here), and no line is lost.
TEST(AccessLog, AFullQueueMakesWritersWaitAndLosesNothing) {
    auto sink = std::make_shared<SlowSink>();
    sink->delay_ms = 2;
    {
        AccessLog log(sink, 2);
        std::vector<std::thread> workers;
        for (int w = 0; w < 4; ++w)
            workers.emplace_back([&log, w] {
                for (int i = 0; i < 25; ++i) {
                    std::string line = "w" + std::to_string(w) + "-" + std::to_string(i);
                    log.write(line);
                }
            });
        for (auto& t : workers) t.join();
    }  // the destructor writes what is still waiting
    std::istringstream lines(sink->text());
    std::vector<std::string> seen;
    for (std::string line; std::getline(lines, line);) seen.push_back(line);
    ASSERT_EQ(seen.size(), 100u);
    for (int w = 0; w < 4; ++w) {  // each worker's lines in its own order
        int next = 0;
        auto prefix = "w" + std::to_string(w) + "-";
        for (const auto& line : seen) {
            if (line.starts_with(prefix)) {
                EXPECT_EQ(line, prefix + std::to_string(next++));
            }
        }
        EXPECT_EQ(next, 25);
    }
}

}  // namespace
}  // namespace tokengate::server
