#pragma once

#include <spdlog/common.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tokengate::server {

/// The access log's writer (one JSON line per request, SPEC §10). Workers hand it whole
/// batches of lines, moved rather than copied, and one thread of its own writes them to the
/// sink (a file, rotating or not, or stdout): a slow disk or pipe never stalls an event loop.
/// While `max_waiting` batches wait, a worker blocks rather than drop a line.
class AccessLog {
public:
    explicit AccessLog(spdlog::sink_ptr sink, std::size_t max_waiting = 64);
    ~AccessLog();  // writes every batch handed over, then stops
    AccessLog(const AccessLog&) = delete;
    AccessLog& operator=(const AccessLog&) = delete;

    /// Takes `lines` (lines joined by '\n', without the last one's) and leaves an empty buffer
    /// in its place, one the writer is done with when it has one, so its capacity is reused.
    void write(std::string& lines);
    /// Returns once every batch handed over so far is written and the sink flushed.
    void flush();

private:
    void run();

    spdlog::sink_ptr sink_;
    std::size_t max_waiting_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<std::string> waiting_;
    std::vector<std::string> spare_;  // written batches' buffers, for write() to hand back
    std::size_t written_ = 0, handed_ = 0;
    bool stopping_ = false;
    bool failing_ = false;  // the writer thread's own
    std::thread thread_;
};

}  // namespace tokengate::server
