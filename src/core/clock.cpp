#include "tokengate/core/clock.hpp"

namespace tokengate::core {

bool AlarmList::add(Nanos at, std::uint64_t id, std::function<void()> wake) {
    auto it = by_deadline_.emplace(at, Entry{std::move(wake), id});
    return it == by_deadline_.begin();
}

void AlarmList::cancel(Nanos at, std::uint64_t id) {
    auto [first, last] = by_deadline_.equal_range(at);
    for (auto it = first; it != last; ++it)
        if (it->second.id == id) {
            by_deadline_.erase(it);
            return;
        }
}

std::vector<std::function<void()>> AlarmList::take_due(Nanos now) {
    std::vector<std::function<void()>> due;
    auto end = by_deadline_.upper_bound(now);
    for (auto it = by_deadline_.begin(); it != end; ++it) due.push_back(std::move(it->second.wake));
    by_deadline_.erase(by_deadline_.begin(), end);
    return due;
}

std::optional<Nanos> AlarmList::next() const {
    if (by_deadline_.empty()) return std::nullopt;
    return by_deadline_.begin()->first;
}

namespace {

/// Rings each wake; one that throws does not keep the others from ringing.
void ring(const std::vector<std::function<void()>>& wakes) {
    for (const auto& wake : wakes) try {
            wake();
        } catch (...) {}
}

// An alarm takes itself off its clock's list when destroyed.
class ListedAlarm final : public Alarm {
public:
    ListedAlarm(std::mutex& mutex, AlarmList& list, Nanos at, std::uint64_t id)
        : mutex_(mutex), list_(list), at_(at), id_(id) {}
    ~ListedAlarm() override {
        std::lock_guard lock(mutex_);
        list_.cancel(at_, id_);
    }

private:
    std::mutex& mutex_;
    AlarmList& list_;
    Nanos at_;
    std::uint64_t id_;
};

}  // namespace

SteadyClock::~SteadyClock() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::unique_ptr<Alarm> SteadyClock::alarm(Nanos at, std::function<void()> wake) const {
    std::lock_guard lock(mutex_);
    auto id = ++next_id_;
    bool earliest = alarms_.add(at, id, std::move(wake));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    if (earliest) changed_.notify_all();
    return std::make_unique<ListedAlarm>(mutex_, alarms_, at, id);
}

void SteadyClock::run() const {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        auto next = alarms_.next();
        if (!next) {
            changed_.wait(lock);
            continue;
        }
        if (*next > now()) {
            changed_.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(*next)));
            continue;
        }
        auto due = alarms_.take_due(now());
        lock.unlock();
        ring(due);
        lock.lock();
    }
}

std::unique_ptr<Alarm> ManualClock::alarm(Nanos at, std::function<void()> wake) const {
    std::vector<std::function<void()>> due;
    std::uint64_t id = 0;
    {
        std::lock_guard lock(mutex_);
        id = ++next_id_;
        alarms_.add(at, id, std::move(wake));
        due = alarms_.take_due(now());  // already due: rings at once
    }
    ring(due);
    return std::make_unique<ListedAlarm>(mutex_, alarms_, at, id);
}

void ManualClock::set(Nanos to) {
    now_.store(to, std::memory_order_relaxed);
    std::vector<std::function<void()>> due;
    {
        std::lock_guard lock(mutex_);
        due = alarms_.take_due(to);
    }
    ring(due);
}

std::optional<Nanos> ManualClock::next_alarm() const {
    std::lock_guard lock(mutex_);
    return alarms_.next();
}

}  // namespace tokengate::core
