#include "tokengate/server/access_log.hpp"

#include <spdlog/details/log_msg.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/spdlog.h>

#include <exception>
#include <utility>

namespace tokengate::server {

AccessLog::AccessLog(spdlog::sink_ptr sink, std::size_t max_waiting)
    : sink_(std::move(sink)), max_waiting_(max_waiting) {
    sink_->set_pattern("%v");  // the line as it is, then the sink's end of line
    thread_ = std::thread([this] { run(); });
}

AccessLog::~AccessLog() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
}

void AccessLog::write(std::string& lines) {
    if (lines.empty()) return;
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return waiting_.size() < max_waiting_; });
    waiting_.push_back(std::move(lines));
    ++handed_;
    lines.clear();  // a moved-from string is valid but unspecified
    if (!spare_.empty()) {
        lines.swap(spare_.back());
        spare_.pop_back();
    }
    lock.unlock();
    changed_.notify_all();
}

void AccessLog::flush() {
    std::unique_lock lock(mutex_);
    auto target = handed_;
    changed_.wait(lock, [&] { return written_ >= target; });
}

void AccessLog::run() {
    std::unique_lock lock(mutex_);
    for (;;) {
        changed_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
        if (waiting_.empty()) return;  // stopping, and every batch is written
        auto batch = std::move(waiting_.front());
        waiting_.pop_front();
        bool last = waiting_.empty();
        lock.unlock();
        changed_.notify_all();  // a worker waiting for room
        // One message for the whole batch: the pattern ("%v") copies it once, and the sink
        // writes it with one end of line after its last line.
        try {
            sink_->log(spdlog::details::log_msg("access", spdlog::level::info, batch));
            if (last) sink_->flush();  // as soon as nothing more is waiting: tail -f sees it
            failing_ = false;
        } catch (const std::exception& e) {  // a full disk: said once, until a write succeeds
            if (!std::exchange(failing_, true)) spdlog::error("access log: lines lost: {}", e.what());
        }
        batch.clear();
        lock.lock();
        if (spare_.size() < max_waiting_) spare_.push_back(std::move(batch));
        ++written_;
        changed_.notify_all();  // flush() waits for this count
    }
}

}  // namespace tokengate::server
