#include "state_keeper.hpp"

#include <spdlog/spdlog.h>

#include <stdexcept>

#include "tokengate/store/state_file.hpp"

namespace tokengate::server {

StateKeeper::StateKeeper(std::string path, core::Nanos interval, store::Store& store, const core::Clock& clock,
                         metrics::Registry& registry, bool ignore_state)
    : path_(std::move(path)),
      interval_(interval),
      store_(store),
      clock_(clock),
      snapshots_(registry.counter("tokengate_state_snapshots_total",
                                  "Snapshots of the bucket levels to store.state_file, by result.", {"result"})) {
    snapshots_.add({"ok"}, 0);
    snapshots_.add({"failed"}, 0);
    try {
        auto bytes = store::read_state_file(path_);
        if (!bytes) {
            spdlog::info("state file {} does not exist yet: every bucket starts afresh", path_);
            return;
        }
        auto state = store::decode_state(*bytes);
        // Wall-clock time, not the steady clock: the machine may have rebooted meanwhile. A
        // clock set backwards counts as no time down (the levels are not refilled at all).
        auto down = std::max<std::int64_t>(0, clock_.unix_now() - state.written_at_unix_ns);
        auto restored = store_.restore(state.levels, down);
        spdlog::info("state file {}: {} of {} buckets and quotas restored, refilled for {:.1f} s down", path_, restored,
                     state.levels.buckets.size() + state.levels.quotas.size(), static_cast<double>(down) / 1e9);
    } catch (const store::StateFileError& e) {
        std::string why = "state file " + path_ + ": " + e.what();
        if (!ignore_state) throw std::runtime_error(why + "; start with --ignore-state to begin afresh");
        spdlog::warn("{}; ignored (--ignore-state): every bucket starts afresh", why);
    }
}

void StateKeeper::start() {
    thread_ = std::thread([this] {
        std::unique_lock lock(mutex_);
        while (!stopping_) {
            if (wake_.wait_for(lock, interval_, [this] { return stopping_; })) break;
            lock.unlock();
            snapshot();
            lock.lock();
        }
    });
}

void StateKeeper::stop() {
    {
        std::lock_guard lock(mutex_);
        if (stopped_) return;
        stopped_ = stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    snapshot();
}

bool StateKeeper::snapshot() {
    store::StateSnapshot state;
    state.written_at_unix_ns = clock_.unix_now();
    state.levels = store_.save();
    std::string error;
    if (store::write_state_file(path_, store::encode_state(state), error)) {
        snapshots_.add({"ok"});
        return true;
    }
    snapshots_.add({"failed"});
    spdlog::error("state snapshot failed, the previous one stays: {}", error);
    return false;
}

}  // namespace tokengate::server
